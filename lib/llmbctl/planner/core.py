"""plan(): inventory -> validated per-host launch plan (or PlanError listing every problem).

A straight pipeline: read the inventory -> resolve its names into a context -> check the engine
against the platform -> the engine module resolves the topology -> check it -> the engine's args
-> its services -> check the plan. Each check adds its problems; a stage whose input is missing
(no deployment, no context, no topology) stops the run with the problems found so far.
"""

from __future__ import annotations

from typing import Any

from ..catalog import Catalog
from . import topology
from .context import resolve
from .disagg import plan as plan_disaggregated
from .engines import ENGINES, engine_for_vendor
from .exposure import confine_listeners
from .inventory import read_deployment
from .model import PlanError, Planned, Problem
from .validation import check_engine, check_plan, check_topology
from .yamlkeys import duplicate_keys


def check(
    hostvars: Any, groups: dict[str, Any], data_dir: str | None = None, host_set: dict | None = None,
    inventory_files: list[str] | None = None,
) -> list[Problem]:
    """Every problem of the inventory (empty when it can be planned)."""
    try:
        plan_inventory(hostvars, groups, data_dir, host_set=host_set, inventory_files=inventory_files)
    except PlanError as err:
        return err.problems
    return []


def plan_inventory(
    hostvars: Any,
    groups: dict[str, Any],
    data_dir: str | None = None,
    source: str = "inventory",
    host_set: dict | None = None,
    inventory_files: list[str] | None = None,
    engine_version: str | None = None,
) -> Planned:
    """host_set: per host, the names set on the host itself (see inventory.py); inventory_files: the
    YAML files the inventory was read from, checked for duplicate keys (yamlkeys.py); engine_version:
    the release when the inventory leaves llmb_engine_version unset (the lock's,
    llmbctl.pins.resolve_engine); None: the newest shipped."""
    duplicates = duplicate_keys(inventory_files) if inventory_files else []
    try:
        planned = _plan_inventory(hostvars, groups, data_dir, source, host_set, engine_version)
    except PlanError as err:
        raise PlanError(duplicates + err.problems, source) from None
    if duplicates:
        raise PlanError(duplicates, source)
    return planned


def _plan_inventory(
    hostvars: Any, groups: dict[str, Any], data_dir: str | None, source: str, host_set: dict | None,
    engine_version: str | None = None,
) -> Planned:
    dep, problems = read_deployment(hostvars, groups, host_set)
    if dep is None or problems:
        raise PlanError(_catalog_choices(problems, data_dir), source)
    ctx, problems = resolve(dep, Catalog(data_dir), default_version=engine_version)
    if ctx is None:
        raise PlanError(problems, source)
    engine = ENGINES[ctx.engine]
    problems = check_engine(ctx, engine.CAPS, engine_for_vendor(ctx.platform.vendor))
    if ctx.v.get("llmb_disaggregation"):  # two engine clusters and a router: planner/disagg.py
        return plan_disaggregated(ctx, engine, problems, source)
    resolution = topology.resolve(ctx, engine)
    found = check_topology(ctx, resolution)
    problems += found
    topo = resolution.topology
    if topo is None or found:
        raise PlanError(problems, source)
    ea, arg_problems = engine.engine_args(ctx, topo)
    problems += arg_problems
    hosts = engine.services(ctx, topo, ea)
    confine_listeners(ctx, hosts)
    problems += check_plan(ctx, topo, ea.values, hosts)
    if problems:
        raise PlanError(problems, source)
    ctx.notes.append(topo.describe())
    ctx.notes.extend(ea.notes)
    return Planned(ctx, topo, hosts)


# the required knobs whose valid values are the catalog's names (listed when one is left unset)
CATALOG_NAMES = {"llmb_platform": "platform_names", "llmb_model": "model_names"}


def _catalog_choices(problems: list[Problem], data_dir: str | None) -> list[Problem]:
    """A required catalog name left unset: its expected value lists the names the catalog has."""
    for p in problems:
        var = p.message.split(" ", 1)[0]
        if p.check == "required" and var in CATALOG_NAMES:
            try:
                names = getattr(Catalog(data_dir), CATALOG_NAMES[var])()
            except (OSError, ValueError):
                continue
            p.expected = "one of " + ", ".join(names)
    return problems


def plan(
    hostvars: Any, groups: dict[str, Any], data_dir: str | None = None, host_set: dict | None = None
) -> list[dict[str, Any]]:
    """The launch plan as the JSON-ready list the serve role consumes."""
    return plan_inventory(hostvars, groups, data_dir, host_set=host_set).to_list()
