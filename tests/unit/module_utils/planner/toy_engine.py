"""A whole engine in one module, for test_planner_engines: `toyserve serve MODEL --port P --tp N`.

It declares its capabilities record and the three functions every engine module has; the
planner's core and checks know nothing else about it.
"""

from __future__ import annotations

from llmbctl.engines.capabilities import EngineCaps
from llmbctl.planner import topology as shared
from llmbctl.planner.engines import common
from llmbctl.planner.model import Service

CAPS = EngineCaps(
    name="toyserve",
    vendors=("nvidia",),
    installs=("host",),
    memory_fraction_flag="--mem-fraction",
    memory_fraction_default=0.95,
    modes=("single",),
    head_address_use="--master-addr",
)


def topology(ctx, caps, sizes):
    return shared.whole_nodes(ctx, caps, sizes, "single")


def engine_args(ctx, topo):
    return common.build_engine_args(ctx, [("--port", ctx.v["llmb_api_port"]), ("--tp", topo.tp)])


def services(ctx, topo, ea):
    model_path, _ = common.model_paths(ctx)
    plans = []
    for node in ctx.dep.nodes[: topo.nodes]:
        argv = [common.venv_bin(ctx, "toyserve"), "serve", model_path, *ea.argv()]
        hp, env = common.node_plan(ctx, topo, node, model_path)
        svc = Service(
            name="llmb-toyserve", kind="systemd", role="api", argv=argv, order=common.ORDER_FIRST, env=env
        )
        svc = common.engine_service(ctx, svc, [], [], {})
        common.place_rank(ctx, topo, hp, svc, node, ea)
        plans.append(hp)
    return plans
