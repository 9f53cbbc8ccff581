"""The topology of a deployment: how many devices of how many nodes run which ranks.

Each engine module resolves its topology (``engines/<engine>.py:topology``) from the requested
sizes with the shared helpers below; validation.py then checks the resolved topology.
A helper reports only what leaves no topology to check (too few devices, DP that cannot be
spread); everything else about a resolved topology is a check in validation.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..engines.capabilities import EngineCaps
from .context import Context
from .model import Problem

# how the ranks are laid over the nodes (which checks of validation.py apply)
WHOLE_NODES = "whole-nodes"  # one TP x PP group filling whole nodes (single node, or Ray across them)
DP_RANKS = "dp-ranks"  # DP ranks of TP x PP each, spread evenly over the nodes
EVEN_SPLIT = "even-split"  # TP x PP ranks split evenly over the nodes, one process per node


@dataclass
class Topology:
    mode: str  # single | ray | native | dp | sglang | mpirun
    nodes: int
    devices_per_node: int
    world: int  # devices used in total
    per_node: int  # devices used per node
    tp: int
    pp: int
    dp: int
    dp_local: int
    dcp: int
    layout: str = WHOLE_NODES
    caps: EngineCaps | None = None  # the capabilities of the engine that resolved it

    def describe(self) -> str:
        return (
            f"{self.mode}: {self.nodes} node(s), TP {self.tp} x PP {self.pp} x DP {self.dp}"
            + (f" (DCP {self.dcp})" if self.dcp > 1 else "")
            + f", {self.per_node} of {self.devices_per_node} devices per node"
        )


@dataclass(frozen=True)
class Sizes:
    """The parallel sizes an inventory asks for, and the nodes it offers."""

    tp: int
    pp: int
    dp: int
    dcp: int
    nodes: int
    devices_per_node: int


@dataclass
class Resolution:
    """What resolving the topology gave: the requested sizes (None when one is not a positive integer),
    the topology (None when none can be formed) and the problems found on the way."""

    caps: EngineCaps
    sizes: Sizes | None
    topology: Topology | None
    problems: list[Problem]


def resolve(ctx: Context, engine: Any) -> Resolution:
    """The requested sizes, then the engine module's topology(ctx, caps, sizes) from them."""
    sizes, problems = requested_sizes(ctx)
    if sizes is None:
        return Resolution(engine.CAPS, None, None, problems)
    topo, problems = engine.topology(ctx, engine.CAPS, sizes)
    if topo is not None and topo.mode not in engine.CAPS.modes:
        raise ValueError(f"engine {engine.CAPS.name} resolved mode {topo.mode!r}, not one of {engine.CAPS.modes}")
    return Resolution(engine.CAPS, sizes, topo, problems)


def positive(key: str, value: Any, problems: list[Problem]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        problems.append(
            Problem(
                "parallelism", f"{key} must be a positive integer", found=value, fix=f"set {key} to 1 or more"
            )
        )
        return 1
    return value


def requested_sizes(ctx: Context) -> tuple[Sizes | None, list[Problem]]:
    """TP / PP / DP / DCP from the inventory (TP defaults to the devices of one node)."""
    v = ctx.v
    problems: list[Problem] = []
    dev = ctx.platform.device_count
    tp = positive("llmb_tensor_parallel", v.get("llmb_tensor_parallel") or dev, problems)
    pp = positive("llmb_pipeline_parallel", v["llmb_pipeline_parallel"], problems)
    dp = positive("llmb_data_parallel", v["llmb_data_parallel"], problems)
    dcp = positive("llmb_decode_context_parallel", v["llmb_decode_context_parallel"], problems)
    if problems:
        return None, problems
    return Sizes(tp, pp, dp, dcp, len(ctx.dep.nodes), dev), []


def _too_few_devices(ctx: Context, s: Sizes) -> Problem:
    """TP x PP asks for more devices than the inventory's nodes have."""
    n, dev = s.nodes, s.devices_per_node
    world = s.tp * s.pp
    devices_text = f"{n} node{'s' if n != 1 else ''} x {dev} {ctx.platform.device_model} = {n * dev} devices"
    return Problem(
        "parallelism",
        f"TP x PP = {s.tp} x {s.pp} = {world} devices, but the inventory has {devices_text}",
        found=f"llmb_tensor_parallel: {s.tp}, llmb_pipeline_parallel: {s.pp}",
        expected=f"TP x PP <= {n * dev}",
        fix=f"lower llmb_tensor_parallel / llmb_pipeline_parallel, or add {math.ceil(world / dev) - n} node(s) "
        "to accel_nodes",
    )


def whole_nodes(ctx: Context, caps: EngineCaps, s: Sizes, mode: str) -> tuple[Topology | None, list[Problem]]:
    """One TP x PP group: on one node, or filling several (mode says how they are joined)."""
    world = s.tp * s.pp
    if world > s.nodes * s.devices_per_node:
        return None, [_too_few_devices(ctx, s)]
    per_node = min(world, s.devices_per_node)
    return Topology(
        mode, s.nodes, s.devices_per_node, world, per_node, s.tp, s.pp, 1, 1, s.dcp, WHOLE_NODES, caps
    ), []


def dp_ranks(ctx: Context, caps: EngineCaps, s: Sizes, mode: str) -> tuple[Topology | None, list[Problem]]:
    """DP ranks of TP x PP devices each, llmb_data_parallel_local of them per node (default DP / nodes)."""
    n, dp = s.nodes, s.dp
    problems: list[Problem] = []
    dp_local_raw = ctx.v.get("llmb_data_parallel_local")
    if dp_local_raw is None:
        if dp % n != 0:
            problems.append(
                Problem(
                    "parallelism",
                    f"DP {dp} cannot be spread evenly over {n} nodes",
                    found=f"llmb_data_parallel: {dp}, {n} hosts in accel_nodes",
                    expected=f"DP a multiple of {n}",
                    fix=f"set llmb_data_parallel to a multiple of {n}, or llmb_data_parallel_local",
                )
            )
            return None, problems
        dp_local = dp // n
    else:
        dp_local = positive("llmb_data_parallel_local", dp_local_raw, problems)
    per_node = s.tp * s.pp * dp_local
    world = s.tp * s.pp * dp
    return Topology(
        mode, n, s.devices_per_node, world, per_node, s.tp, s.pp, dp, dp_local, s.dcp, DP_RANKS, caps
    ), problems


def even_split(ctx: Context, caps: EngineCaps, s: Sizes, mode: str) -> tuple[Topology | None, list[Problem]]:
    """TP x PP ranks split evenly over the nodes, one engine process per node."""
    world = s.tp * s.pp
    if world > s.nodes * s.devices_per_node:
        return None, [_too_few_devices(ctx, s)]
    per_node = world // s.nodes if s.nodes else world
    return Topology(
        mode, s.nodes, s.devices_per_node, world, per_node, s.tp, s.pp, s.dp, 1, s.dcp, EVEN_SPLIT, caps
    ), []
