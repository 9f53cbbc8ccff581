"""vLLM and vllm-ascend plans: one node, TP x PP over Ray (seed 002), DP + EP with headless ranks.

Shapes (seeds 000-004):
- single: one `vllm serve` on one node (000 H100 TP8, 003 H200 TP8+DCP8, 001 A3 TP16 container,
  002/003 MI300X TP8 container);
- ray: `ray start --head` on the head, `ray start --address` on the others, then `vllm serve`
  with TP x PP spanning the nodes on the head (002 H800 TP8+PP2+DCP8, 004 TP16); with containers,
  vLLM's run_cluster.sh pattern: every node's engine container runs `ray start --block` (head or
  worker, VLLM_HOST_IP its node's address) and `vllm serve` runs in the head's container (kind exec);
- native: vLLM's own multi-node launch for TP x PP across nodes (the recipes' form since vLLM has
  `--nnodes`): every node runs `vllm serve` with `--nnodes N --node-rank r --master-addr HEAD
  --master-port P`, every node but rank 0 `--headless`; the ranks split evenly over the nodes. The
  default where the release's flag set has those options; `llmb_vllm_multinode: ray` keeps Ray
  (the seeds that use Ray say so in their samples);
- dp: DP rank 0 with the API on the head, `--headless --data-parallel-start-rank k` elsewhere
  (002/004 DP16 + EP over 2 nodes).
"""

from __future__ import annotations

from typing import Any

from llmb.ports import host_port

from ...catalog import Catalog
from ...engines.capabilities import EngineCaps, HostPackage
from ...engines.registry import FlagSet, load_flagset, overlay_for
from .. import containers
from .. import topology as shared
from ..context import Context
from ..flags import EngineArgs
from ..inventory import Node
from ..model import HostPlan, Problem, Service
from ..topology import Sizes, Topology
from . import common

CAPS = EngineCaps(
    name="vllm",
    host_package=HostPackage("vllm", "vllm", ("{venv}/bin/vllm", "--version")),
    vendors=("nvidia", "amd"),
    installs=("host", "container"),
    memory_fraction_flag="--gpu-memory-utilization",
    memory_fraction_default=0.9,
    modes=("single", "ray", "native", "dp"),
    head_address_use="--data-parallel-address / --master-addr / the Ray head address",
    decode_context_parallel=True,
    expert_parallel="switch",
    host_ip_env="VLLM_HOST_IP",
    tool_choice_flag="--enable-auto-tool-choice",
    max_len_flag="--max-model-len",
    kv_dtype_flag="--kv-cache-dtype",
)


# vLLM's own multi-node launch: a release has it when its flag set has every one of these
NATIVE_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")
MULTINODE_VAR = "llmb_vllm_multinode"


def native_missing(flagset: FlagSet) -> list[str]:
    """The options of vLLM's own multi-node launch the release's flag set lacks (empty: it has it)."""
    return [f for f in NATIVE_FLAGS if f not in flagset.flags]


def multinode_launch(ctx: Context) -> tuple[str, list[Problem]]:
    """How a TP x PP group spanning nodes is launched: "native" or "ray" (llmb_vllm_multinode, default
    native where the release has it, else Ray); "native" asked of a release without it is refused."""
    asked = ctx.v.get(MULTINODE_VAR)
    missing = native_missing(ctx.flagset)
    release = f"{ctx.engine} {ctx.flagset.version}"
    if asked is None:
        return ("ray" if missing else "native"), []
    if asked == "native" and missing:
        return "native", [
            Problem(
                "parallelism",
                f"{release} has no multi-node launch of its own: its flag set lacks {', '.join(missing)}",
                found=f"{MULTINODE_VAR}: native, llmb_engine_version: {ctx.flagset.version}",
                expected="a release whose flag set has " + ", ".join(NATIVE_FLAGS),
                fix=f"set {MULTINODE_VAR}: ray, or choose a release that has them (scripts/launch-plan --engine-versions)",
            )
        ]
    return str(asked), []


def topology(ctx: Context, caps: EngineCaps, sizes: Sizes) -> tuple[Topology | None, list[Problem]]:
    """DP > 1: DP ranks over the nodes (`dp`); else one TP x PP group: on one node (`single`), or
    across nodes with vLLM's own launch (`native`, ranks split evenly) or over Ray (`ray`)."""
    multinode = sizes.nodes > 1
    if sizes.dp > 1:
        return shared.dp_ranks(ctx, caps, sizes, "dp" if multinode else "single")
    if not multinode:
        return shared.whole_nodes(ctx, caps, sizes, "single")
    how, problems = multinode_launch(ctx)
    if problems:
        return None, problems
    if how == "native":
        return shared.even_split(ctx, caps, sizes, "native")
    return shared.whole_nodes(ctx, caps, sizes, "ray")


def engine_args(ctx: Context, topo: Topology) -> tuple[EngineArgs, list[Problem]]:
    v = ctx.v
    flags: list[tuple[str, Any]] = [
        ("--served-model-name", [ctx.served_name]),
        ("--host", v["llmb_api_host"]),
        ("--port", v["llmb_api_port"]),
        ("--tensor-parallel-size", topo.tp),
        ("--pipeline-parallel-size", topo.pp if topo.pp > 1 else None),
        ("--decode-context-parallel-size", topo.dcp if topo.dcp > 1 else None),
        ("--enable-expert-parallel", True if v.get("llmb_expert_parallel") else None),
    ]
    if topo.mode == "ray":
        flags.append(("--distributed-executor-backend", "ray"))
    if topo.mode == "native":  # --node-rank and --headless per node (services)
        flags += [
            ("--nnodes", topo.nodes),
            ("--master-addr", ctx.dep.head.address),
            ("--master-port", v["llmb_vllm_master_port"]),
        ]
    if topo.dp > 1:
        flags.append(("--data-parallel-size", topo.dp))
        if topo.nodes > 1:
            flags += [
                ("--data-parallel-size-local", topo.dp_local),
                ("--data-parallel-address", ctx.dep.head.address),
                ("--data-parallel-rpc-port", v["llmb_dp_rpc_port"]),
            ]
    return common.build_engine_args(ctx, flags)


def _ray_flagset(data: Catalog) -> FlagSet:
    """The newest shipped Ray release's set (the one `make engine-check` parses the `ray start` argv with)."""
    version = data.newest_version("ray")
    fs = load_flagset(data, "ray", version) if version else None
    if fs is None:
        raise ValueError("no data/engines/ray-<version>.yml: cannot plan a Ray cluster")
    return fs


def _ray_argv(ctx: Context, fs: FlagSet, node: Node, head: Node, exe: str) -> list[str]:
    v = ctx.v
    values: dict[str, Any] = {"--node-ip-address": node.address}
    if node is head:
        values = {
            "--head": True,
            "--port": v["llmb_ray_port"],
            **values,
            "--dashboard-host": node.address,  # the cluster network only (docs/ports.md)
            "--dashboard-port": v["llmb_ray_dashboard_port"],
        }
    else:
        values = {"--address": host_port(head.address, v["llmb_ray_port"]), **values}
    values["--disable-usage-stats"] = True
    values["--block"] = True
    argv = [exe, "start"]
    for canon, value in values.items():
        argv += fs.render(canon, value)
    return argv


def _ray_service(
    ctx: Context, fs: FlagSet, node: Node, env: dict[str, str], bits: tuple[list[str], list[str], dict[str, Any]]
) -> Service:
    """The Ray head or worker of node: a unit (host install), or the node's engine container running
    `ray start --block` (vLLM's run_cluster.sh: the container is the Ray node, vLLM runs in the head's)."""
    v = ctx.v
    head = ctx.dep.head
    is_head = node is head
    container = v["llmb_install"] == "container"
    ray = Service(
        name="llmb-vllm" if container else "llmb-ray",
        kind="systemd",
        role="ray-head" if is_head else "ray-worker",
        argv=_ray_argv(ctx, fs, node, head, "ray" if container else common.venv_bin(ctx, "ray")),
        order=common.ORDER_FIRST if is_head else common.ORDER_SECOND,
        env=dict(env),
    )
    devices, mounts, defaults = bits
    ray = common.engine_service(ctx, ray, devices, mounts, defaults)
    if is_head:
        ray.ports = [
            {"port": v["llmb_ray_port"], "purpose": "ray-gcs"},
            {"port": v["llmb_ray_dashboard_port"], "purpose": "ray-dashboard"},
        ]
        ray.ready = common.ready_tcp(ctx, node, v["llmb_ray_port"])
    else:
        ray.depends_on = [common.dep_ref(head, ray.name)]
        # joined: the worker's raylet keeps its connection to the head's GCS port
        ray.ready = common.ready_connected(ctx, head, v["llmb_ray_port"])
    return ray


def services(ctx: Context, topo: Topology, ea: EngineArgs) -> list[HostPlan]:
    v = ctx.v
    head = ctx.dep.head
    nodes = ctx.dep.nodes[: topo.nodes]
    container = v["llmb_install"] == "container"
    model_path, model_mounts = common.model_paths(ctx)
    penv, pdevices, pmounts, pcontainer = common.platform_bits(ctx)
    bits = (pdevices, pmounts + model_mounts, pcontainer)
    exe = "vllm" if container else common.venv_bin(ctx, "vllm")
    plans: list[HostPlan] = []
    ray_fs = _ray_flagset(ctx.data) if topo.mode == "ray" else None
    ray_name = "llmb-ray"

    for node in nodes:
        hp, env = common.node_plan(ctx, topo, node, model_path, penv)
        values = dict(ea.values)
        is_head = node is head
        if topo.mode == "dp" and not is_head:
            values = {"--headless": True, "--data-parallel-start-rank": node.rank * topo.dp_local, **values}
        if topo.mode == "native":
            values = {**values, "--node-rank": node.rank}
            if not is_head:
                values = {"--headless": True, **values}
        argv = [exe, "serve", model_path, *ea.argv(values)]

        if topo.mode == "ray":
            ray = _ray_service(ctx, ray_fs, node, env, bits)
            common.compile_cache(ctx, ray)  # the Ray workers (vLLM's actors) inherit the raylet's environment
            ray_name = ray.name
            hp.services.append(ray)
            if not is_head:
                plans.append(hp)
                continue

        if topo.mode == "dp":
            role = "dp-rank" if is_head else "dp-headless"
            order = common.ORDER_FIRST if is_head else common.ORDER_SECOND
        elif topo.mode == "native":
            role = "node-rank-0" if is_head else "node-headless"
            order = common.ORDER_FIRST if is_head else common.ORDER_SECOND
        else:
            role = "api"
            order = common.ORDER_API if topo.mode == "ray" else common.ORDER_FIRST
        if topo.mode == "ray" and container:
            # `vllm serve` in the head's Ray container, from a unit on the node (docker exec)
            svc = Service(name=f"{ray_name}-serve", kind="exec", role=role, argv=[], order=order, env=dict(env))
            common.compile_cache(ctx, svc, owner=ray_name)  # in the Ray container: its mounted directory
        else:
            svc = Service(name="llmb-vllm", kind="systemd", role=role, argv=argv, order=order, env=env)
            svc = common.engine_service(ctx, svc, *bits)
            common.compile_cache(ctx, svc)
        svc.packages = loader_packages(ctx, values)
        common.place_rank(ctx, topo, hp, svc, node, ea)
        if is_head and topo.mode == "dp":
            svc.ports.append({"port": v["llmb_dp_rpc_port"], "purpose": "dp-rpc"})
            svc.ready = common.ready_tcp(ctx, node, v["llmb_dp_rpc_port"])
        if is_head and topo.mode == "native":
            # the torch.distributed store of node rank 0: the headless nodes join it, so they start
            # once it listens (a follower's readiness: started, after the head's)
            svc.ports.append({"port": v["llmb_vllm_master_port"], "purpose": "vllm-master"})
            svc.ready = common.ready_tcp(ctx, node, v["llmb_vllm_master_port"])
        if is_head and topo.mode == "ray":
            svc.depends_on = [common.dep_ref(n, ray_name) for n in nodes]
            # vLLM joins the running Ray cluster (ray.init reads RAY_ADDRESS; no /tmp/ray lookup)
            svc.env["RAY_ADDRESS"] = host_port(head.address, v["llmb_ray_port"])
            if svc.kind == "exec":
                svc.exec_in = ray_name
                svc.argv = containers.exec_argv(svc.name, ray_name, svc.env, argv)
                svc.stop_argv = containers.exec_stop_argv(svc.name, ray_name)
        plans.append(hp)
    return plans


def loader_packages(ctx: Context, values: dict[str, Any]) -> list[str]:
    """The package a host install needs for the chosen --load-format (data/engines/hand/vllm.yml
    load_format_packages); [] in a container (the image is what it is) or for a built-in loader."""
    if ctx.v["llmb_install"] == "container":
        return []
    table = overlay_for(ctx.data, ctx.engine, ctx.version).get("load_format_packages") or {}
    package = table.get(str(values.get("--load-format")))
    return [str(package)] if package else []
