"""plan(): inventory -> validated per-host launch plan (or PlanError listing every problem)."""

from __future__ import annotations

from typing import Any

from .context import Context, resolve
from .data import DataDir
from .engines import common, sglang, trtllm, vllm
from .inventory import read_deployment
from .model import HostPlan, PlanError, Problem
from .validation import check_engine_platform, check_fit, check_model, check_ports, plan_topology

ENGINE_PLANNERS = {"vllm": vllm, "vllm-ascend": vllm, "sglang": sglang, "trtllm": trtllm}


class Planned:
    """Result of planning: host plans plus the context, topology and notes behind them."""

    def __init__(self, ctx: Context, topology, hosts: list[HostPlan]):
        self.ctx = ctx
        self.topology = topology
        self.hosts = hosts

    def to_list(self) -> list[dict[str, Any]]:
        return [h.to_dict() for h in self.hosts]

    @property
    def notes(self) -> list[str]:
        return list(dict.fromkeys(self.ctx.notes))


def check(
    hostvars: Any, groups: dict[str, Any], data_dir: str | None = None, host_set: dict | None = None
) -> list[Problem]:
    """Every problem of the inventory (empty when it can be planned)."""
    try:
        plan_inventory(hostvars, groups, data_dir, host_set=host_set)
    except PlanError as err:
        return err.problems
    return []


def plan_inventory(
    hostvars: Any,
    groups: dict[str, Any],
    data_dir: str | None = None,
    source: str = "inventory",
    host_set: dict | None = None,
) -> Planned:
    """host_set: per host, the names set on the host itself (see inventory.py)."""
    data = DataDir(data_dir)
    dep, problems = read_deployment(hostvars, groups, host_set)
    if dep is None or problems:
        raise PlanError(problems, source)
    ctx, problems = resolve(dep, data)
    if ctx is None:
        raise PlanError(problems, source)
    problems = check_engine_platform(ctx)
    problems += common.container_problems(ctx)
    topo, topo_problems = plan_topology(ctx)
    problems += topo_problems
    if topo is None:
        raise PlanError(problems, source)
    planner = ENGINE_PLANNERS[ctx.engine]
    ea, arg_problems = planner.engine_args(ctx, topo)
    problems += arg_problems
    problems += check_model(ctx, ea.values)
    problems += check_fit(ctx, topo, ea.values)
    if ctx.v["llmb_install"] == "container" and not common.default_image(ctx):
        problems.append(
            Problem(
                "install",
                f"no default image for {ctx.engine} on {ctx.platform.vendor}",
                fix="set llmb_container_image",
            )
        )
    hosts = planner.services(ctx, topo, ea)
    problems += check_ports(ctx, hosts)
    if problems:
        raise PlanError(problems, source)
    ctx.notes.append(common.describe_topology(topo))
    ctx.notes.extend(ea.notes)
    return Planned(ctx, topo, hosts)


def plan(
    hostvars: Any, groups: dict[str, Any], data_dir: str | None = None, host_set: dict | None = None
) -> list[dict[str, Any]]:
    """The launch plan as the JSON-ready list the serve role consumes."""
    return plan_inventory(hostvars, groups, data_dir, host_set=host_set).to_list()
