"""TensorRT-LLM plans (seed 004): engine containers on every node with sshd on its own port,
`mpirun ... trtllm-llmapi-launch trtllm-serve serve` launched from the first node's container,
and the extra LLM API options file written on every node."""

from __future__ import annotations

from typing import Any

from ...engines.capabilities import EngineCaps
from .. import containers, yamltext
from .. import topology as shared
from ..context import Context
from ..flags import EngineArgs
from ..model import HostPlan, Problem, Service
from ..topology import Sizes, Topology
from . import common, nvidia

CAPS = EngineCaps(
    name="trtllm",
    vendors=("nvidia",),
    installs=("container",),
    memory_fraction_flag="--kv_cache_free_gpu_memory_fraction",
    memory_fraction_default=0.9,
    max_len_flag="--max_seq_len",
    memory_model="free",
    modes=("single", "mpirun"),
    head_address_use="the mpirun host list",
    data_parallel_refused=(
        "trtllm-serve has no data-parallel flag; attention DP is set in the extra LLM API options",
        "set llmb_data_parallel: 1 (enable_attention_dp lives in llmb_trtllm_extra_llm_api_options)",
    ),
)

# seed 004 "Generate additional config for trtllm serve"
DEFAULT_EXTRA_LLM_API_OPTIONS: dict[str, Any] = {
    "cuda_graph_config": {"padding_enabled": True, "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128]},
    "print_iter_log": True,
    "enable_attention_dp": True,
}


def extra_options_path(ctx: Context) -> str:
    return f"{str(ctx.v['llmb_config_dir']).rstrip('/')}/trtllm/extra-llm-api-config.yml"


def mesh_dir(ctx: Context) -> str:
    return str(ctx.v["llmb_ssh_mesh_dir"]).rstrip("/") or "/"


def sshd_argv(mesh: str) -> list[str]:
    """sshd of the container on the mesh's config (its port, host key, the cluster key only).

    /run/sshd (privilege separation) does not exist in a fresh container; exec keeps sshd the
    container's main process, its command line naming the config (how ssh_mesh tells it apart
    from a squatter on the port). The script is constant: the mesh directory is its positional
    parameter $1 (after $0 = "sh"), so no value is ever parsed by the shell."""
    return ["/bin/sh", "-c", SSHD_SCRIPT, "sh", mesh]


SSHD_SCRIPT = 'mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f "$1/sshd_config"'


def topology(ctx: Context, caps: EngineCaps, sizes: Sizes) -> tuple[Topology | None, list[Problem]]:
    """TP x PP ranks split evenly over the nodes; mpirun starts them when there are several."""
    return shared.even_split(ctx, caps, sizes, "mpirun" if sizes.nodes > 1 else "single")


def engine_args(ctx: Context, topo: Topology) -> tuple[EngineArgs, list[Problem]]:
    v = ctx.v
    flags: list[tuple[str, Any]] = [
        ("--host", v["llmb_api_host"]),
        ("--port", v["llmb_api_port"]),
        ("--tp_size", topo.tp),
        ("--pp_size", topo.pp if topo.pp > 1 else None),
        ("--ep_size", v.get("llmb_expert_parallel_size")),
        ("--extra_llm_api_options", extra_options_path(ctx)),
    ]
    return common.build_engine_args(ctx, flags)


def services(ctx: Context, topo: Topology, ea: EngineArgs) -> list[HostPlan]:
    v = ctx.v
    head = ctx.dep.head
    nodes = ctx.dep.nodes[: topo.nodes]
    model_path, model_mounts = common.model_paths(ctx)
    multinode = topo.mode == "mpirun"
    options = v.get("llmb_trtllm_extra_llm_api_options")
    if options is None:
        options = DEFAULT_EXTRA_LLM_API_OPTIONS
    cfg_path = extra_options_path(ctx)
    cfg_dir = cfg_path.rsplit("/", 1)[0]
    config_file = {
        "path": cfg_path,
        "content": yamltext.dump(options),
        "mode": "0644",
        "purpose": "trtllm-serve --extra_llm_api_options",
    }
    serve_argv = ["trtllm-serve", "serve", *ea.argv(), model_path]
    name = str(v.get("llmb_container_name") or "llmb-trtllm")
    image = containers.default_image(ctx)
    sshd_port = v["llmb_sshd_port"]
    mesh = mesh_dir(ctx)
    plans = []
    for node in nodes:
        hp, env = common.node_plan(ctx, topo, node, model_path)
        mounts = [*model_mounts, f"{cfg_dir}:{cfg_dir}:ro"]
        if multinode:
            mounts.append(f"{mesh}:{mesh}:ro")  # ssh_mesh stage: cluster key, pinned host keys, sshd_config
        # multinode: the container runs sshd and mpirun starts the ranks in it; else it serves the API
        role, argv = ("sshd", sshd_argv(mesh)) if multinode else ("api", serve_argv)
        svc = Service(name=name, kind="container", role=role, argv=argv, order=common.ORDER_FIRST, env=env)
        svc = containers.containerize(ctx, svc, image, [], mounts, dict(nvidia.TRTLLM_CONTAINER))
        svc.config_files = [dict(config_file)]
        hp.services.append(svc)
        if not multinode:
            common.expose_api(ctx, topo, svc, node, ea.values)
            svc.notes = list(ea.notes)
        else:
            svc.ports = [{"port": sshd_port, "purpose": "sshd"}]
            svc.ready = common.ready_tcp(ctx, node, sshd_port)
            svc.container["sshd"] = {
                "port": sshd_port,
                "permit_root_login": "prohibit-password",
                "config": f"{mesh}/sshd_config",
            }
            if node is head:
                launcher = Service(
                    name=f"{name}-launcher",
                    kind="mpirun",
                    role="mpirun-launcher",
                    argv=containers.docker_exec(name, env, _mpirun_argv(ctx, topo, nodes, env, serve_argv)),
                    order=common.ORDER_API,
                    env=env,
                    exec_in=name,
                    stop_argv=["/usr/bin/docker", "exec", name, "pkill", "-TERM", "-f", "trtllm-serve"],
                    depends_on=[common.dep_ref(n, name) for n in nodes],
                )
                common.expose_api(ctx, topo, launcher, node, ea.values)
                launcher.notes = list(ea.notes)
                hp.services.append(launcher)
        _served_as_model_path(hp, model_path)
        plans.append(hp)
    return plans


def _served_as_model_path(hp: HostPlan, model_path: str) -> None:
    """trtllm-serve has no served-name option: /v1/models lists the model argument (the path the
    container sees), so clients, the health check, smoke and bench ask for that name."""
    hp.model["served_model_name"] = model_path
    for svc in hp.services:
        if svc.api:
            svc.api["served_model_name"] = model_path
        if svc.health:
            svc.health["expect_model"] = model_path


def _mpirun_argv(
    ctx: Context, topo: Topology, nodes, env: dict[str, str], serve_argv: list[str]
) -> list[str]:
    hosts = ",".join(f"{n.address}:{topo.per_node}" for n in nodes)
    argv = [
        "mpirun",
        "-np",
        str(topo.world),
        "-H",
        hosts,
        "-mca",
        "plm_rsh_args",
        # the mesh's client config: cluster key, host keys pinned in its known_hosts, BatchMode
        f"-F {mesh_dir(ctx)}/ssh_config -p {ctx.v['llmb_sshd_port']}",
        "--allow-run-as-root",
    ]
    iface = ctx.v.get("llmb_cluster_iface")
    if iface:
        argv += ["-mca", "btl_tcp_if_include", iface, "-mca", "oob_tcp_if_include", iface]
    for key in sorted(env):
        argv += ["-x", key]
    return [*argv, "trtllm-llmapi-launch", *serve_argv]
