"""Topology: each engine module resolves it from the requested sizes; validation.py checks it."""

from __future__ import annotations

import dataclasses

import pytest
from llmbctl.catalog import Catalog
from llmbctl.planner import engines, topology
from llmbctl.planner.context import resolve
from llmbctl.planner.inventory import read_deployment
from llmbctl.planner.validation import check_topology
from planner_helpers import REPO, load_inventory


def resolution(name: str, **overrides) -> tuple:
    hv, groups = load_inventory(name)
    for host in hv.values():
        host.update(overrides)
    dep, problems = read_deployment(hv, groups)
    assert dep is not None and not problems, problems
    ctx, problems = resolve(dep, Catalog(REPO / "data"))
    assert ctx is not None, problems
    return ctx, topology.resolve(ctx, engines.ENGINES[ctx.engine])


@pytest.mark.parametrize(
    "name, mode, layout, per_node",
    [
        ("h100", "single", topology.WHOLE_NODES, 8),
        ("h800", "ray", topology.WHOLE_NODES, 8),
        ("h800-dp-ep", "dp", topology.DP_RANKS, 8),
        ("h200-sglang", "sglang", topology.EVEN_SPLIT, 8),
        ("h200-trtllm", "mpirun", topology.EVEN_SPLIT, 8),
        ("a3", "single", topology.WHOLE_NODES, 16),
    ],
)
def test_sample_inventories_resolve_to_their_recipe_shape(name, mode, layout, per_node):
    ctx, res = resolution(name)
    topo = res.topology
    assert (topo.mode, topo.layout, topo.per_node) == (mode, layout, per_node)
    assert topo.caps is engines.ENGINES[ctx.engine].CAPS and topo.mode in topo.caps.modes
    assert not res.problems and not check_topology(ctx, res)


def test_vllm_ascend_is_vllm_on_ascend_containers():
    vllm, ascend = engines.ENGINES["vllm"].CAPS, engines.ENGINES["vllm-ascend"].CAPS
    differ = {f.name for f in dataclasses.fields(vllm) if getattr(vllm, f.name) != getattr(ascend, f.name)}
    assert differ == {"name", "vendors", "installs"}
    assert ascend.vendors == ("ascend",) and ascend.installs == ("container",)


def test_too_few_devices_leaves_no_topology_but_the_size_checks_still_run():
    # DCP 3 does not divide TP 16, and 16 devices do not fit one 8-device node: both are reported
    ctx, res = resolution("h100", llmb_tensor_parallel=16, llmb_decode_context_parallel=3)
    assert res.topology is None
    messages = [p.message for p in check_topology(ctx, res)]
    assert messages[0].startswith("DCP 3 does not divide TP 16")
    assert messages[1].startswith("TP x PP = 16 x 1 = 16 devices, but the inventory has 1 node x 8")


def test_uneven_split_is_a_check_of_the_resolved_topology():
    ctx, res = resolution("h200-sglang", llmb_tensor_parallel=9)
    assert res.topology is not None and res.topology.per_node == 4
    (problem,) = check_topology(ctx, res)
    assert "TP x PP = 9 devices cannot be split evenly over 2 nodes of 8" in problem.message
