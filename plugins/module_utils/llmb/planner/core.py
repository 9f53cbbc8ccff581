"""plan(): inventory -> validated per-host launch plan (or PlanError listing every problem).

A straight pipeline: read the inventory -> resolve its names into a context -> the engine module
resolves the topology -> checks of the resolved topology -> the engine's args -> its services ->
checks of the plan. Each stage adds its problems; a stage whose input is missing stops the run.
"""

from __future__ import annotations

from typing import Any

from . import topology as shared
from .context import Context, resolve
from .data import DataDir
from .engines import ENGINES, common, engine_for_vendor
from .inventory import read_deployment
from .model import HostPlan, PlanError, Problem
from .topology import Topology
from .validation import (
    check_engine_platform,
    check_fit,
    check_model,
    check_ports,
    check_sizes,
    check_topology,
)


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


def check(hostvars: Any, groups: dict[str, Any], data_dir: str | None = None) -> list[Problem]:
    """Every problem of the inventory (empty when it can be planned)."""
    try:
        plan_inventory(hostvars, groups, data_dir)
    except PlanError as err:
        return err.problems
    return []


def check_image(
    ctx: Context, topo: Topology, engine_args: dict[str, Any], hosts: list[HostPlan]
) -> list[Problem]:
    """A container install has an image: llmb_container_image or the flag set's default."""
    if ctx.v["llmb_install"] != "container" or common.default_image(ctx):
        return []
    return [
        Problem(
            "install",
            f"no default image for {ctx.engine} on {ctx.platform.vendor}",
            fix="set llmb_container_image",
        )
    ]


# checks of a planned deployment, each (ctx, topology, engine args, host plans) -> problems
PLAN_CHECKS = (
    lambda ctx, topo, args, hosts: check_model(ctx, args),
    lambda ctx, topo, args, hosts: check_fit(ctx, topo, args),
    check_image,
    lambda ctx, topo, args, hosts: check_ports(ctx, hosts),
)


def plan_inventory(
    hostvars: Any, groups: dict[str, Any], data_dir: str | None = None, source: str = "inventory"
) -> Planned:
    dep, problems = read_deployment(hostvars, groups)
    if dep is None or problems:
        raise PlanError(problems, source)
    ctx, problems = resolve(dep, DataDir(data_dir))
    if ctx is None:
        raise PlanError(problems, source)
    engine = ENGINES[ctx.engine]
    problems = check_engine_platform(ctx, engine.CAPS, engine_for_vendor(ctx.platform.vendor))
    problems += common.container_problems(ctx)

    sizes, found = shared.requested_sizes(ctx)
    problems += found
    if sizes is None:
        raise PlanError(problems, source)
    found = check_sizes(ctx, engine.CAPS, sizes)
    topo, resolved = engine.topology(ctx, engine.CAPS, sizes)
    found += resolved
    if topo is not None:
        found += check_topology(ctx, topo)
    problems += found
    if topo is None or found:
        raise PlanError(problems, source)

    ea, arg_problems = engine.engine_args(ctx, topo)
    problems += arg_problems
    hosts = engine.services(ctx, topo, ea)
    for plan_check in PLAN_CHECKS:
        problems += plan_check(ctx, topo, ea.values, hosts)
    if problems:
        raise PlanError(problems, source)
    ctx.notes.append(shared.describe(topo))
    ctx.notes.extend(ea.notes)
    return Planned(ctx, topo, hosts)


def plan(hostvars: Any, groups: dict[str, Any], data_dir: str | None = None) -> list[dict[str, Any]]:
    """The launch plan as the JSON-ready list the serve role consumes."""
    return plan_inventory(hostvars, groups, data_dir).to_list()
