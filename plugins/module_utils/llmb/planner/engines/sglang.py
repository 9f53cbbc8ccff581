"""SGLang plans: `python -m sglang.launch_server`, one process per node (seed 004: TP16 on 2 nodes
with --dist-init-addr MASTER:50000 --nnodes 2 --node-rank 0|1)."""

from __future__ import annotations

from typing import Any

from .. import topology as shared
from ..capabilities import EngineCaps
from ..context import Context
from ..flags import EngineArgs
from ..model import HostPlan, Problem, Service
from ..topology import Sizes, Topology
from . import common

CAPS = EngineCaps(
    name="sglang",
    vendors=("nvidia", "amd"),
    installs=("host", "container"),
    memory_fraction_flag="--mem-fraction-static",
    memory_fraction_default=0.9,
    modes=("sglang",),
    head_address_use="--dist-init-addr",
    max_len_flag="--context-length",
    kv_dtype_flag="--kv-cache-dtype",
    memory_model="static",
)


def topology(ctx: Context, caps: EngineCaps, sizes: Sizes) -> tuple[Topology | None, list[Problem]]:
    """TP x PP ranks split evenly over the nodes, one launch_server per node (mode `sglang`)."""
    return shared.even_split(ctx, caps, sizes, "sglang")


def engine_args(ctx: Context, topo: Topology) -> tuple[EngineArgs, list[Problem]]:
    v = ctx.v
    model_path, _ = common.model_paths(ctx)
    flags: list[tuple[str, Any]] = [
        ("--model-path", model_path),
        ("--served-model-name", ctx.served_name),
        ("--host", v["llmb_api_host"]),
        ("--port", v["llmb_api_port"]),
        ("--tp-size", topo.tp),
        ("--pp-size", topo.pp if topo.pp > 1 else None),
        ("--dp-size", topo.dp if topo.dp > 1 else None),
        ("--ep-size", v.get("llmb_expert_parallel_size")),
    ]
    if topo.nodes > 1:
        flags += [
            ("--dist-init-addr", f"{ctx.dep.head.address}:{v['llmb_sglang_dist_port']}"),
            ("--nnodes", topo.nodes),
        ]
    return common.build_engine_args(ctx, flags)


def services(ctx: Context, topo: Topology, ea: EngineArgs) -> list[HostPlan]:
    v = ctx.v
    container = v["llmb_install"] == "container"
    model_path, model_mounts = common.model_paths(ctx)
    multinode = topo.nodes > 1
    penv, pdevices, pmounts, pcontainer = common.platform_bits(ctx)
    prefix = (
        ["python3", "-m", "sglang.launch_server"]
        if container
        else [common.venv_bin(ctx, "python"), "-m", "sglang.launch_server"]
    )
    plans = []
    for node in ctx.dep.nodes[: topo.nodes]:
        values = dict(ea.values)
        if multinode:
            values["--node-rank"] = node.rank
        argv = [*prefix, *ea.argv(values)]
        hp, env = common.node_plan(ctx, topo, node, model_path, penv if container else {})
        is_head = node is ctx.dep.head
        order = common.ORDER_FIRST if is_head else common.ORDER_SECOND
        svc = Service(name="llmb-sglang", kind="systemd", role="sglang-rank", argv=argv, order=order, env=env)
        svc = common.engine_service(ctx, svc, pdevices, pmounts + model_mounts, pcontainer)
        common.place_rank(ctx, topo, hp, svc, node, ea)
        if is_head and multinode:
            svc.ports.append({"port": v["llmb_sglang_dist_port"], "purpose": "dist-init"})
            svc.ready = common.ready_tcp(ctx, node, v["llmb_sglang_dist_port"])
        plans.append(hp)
    return plans
