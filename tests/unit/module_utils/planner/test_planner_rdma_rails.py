"""NCCL_IB_HCA / NCCL_IB_GID_INDEX in the plan from the rails verify recorded (llmb_rdma_rails)."""

from __future__ import annotations

import pytest
from llmbctl.planner import PlanError, plan_inventory
from planner_helpers import REPO, load_inventory


def _plan(rails: dict, gid: dict | None = None):
    hv, groups = load_inventory("h800")
    for host, value in rails.items():
        hv[host]["llmb_rdma_rails"] = value
    for host, value in (gid or {}).items():
        hv[host]["llmb_rdma_gid_index"] = value
    return plan_inventory(hv, groups, str(REPO / "data"))


def _env(planned, host):
    entry = next(p for p in planned.to_list() if p["host"] == host)
    return [s["env"] for s in entry["services"]]


def test_recorded_rails_become_nccl_ib_hca_of_that_host_only():
    hv, groups = load_inventory("h800")
    first, second = list(groups["accel_nodes"])[:2]
    planned = _plan({first: ["mlx5_0", "mlx5_1", "mlx5_2"]}, {first: 3})
    assert all(e["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2" and e["NCCL_IB_GID_INDEX"] == "3" for e in _env(planned, first))
    assert all("NCCL_IB_HCA" not in e for e in _env(planned, second))


def test_no_rails_no_ib_variables():
    planned = _plan({})
    assert all("NCCL_IB_HCA" not in e for p in planned.to_list() for e in (s["env"] for s in p["services"]))


def test_a_rail_name_with_a_shell_character_is_refused_naming_the_variable():
    hv, groups = load_inventory("h800")
    first = list(groups["accel_nodes"])[0]
    with pytest.raises(PlanError) as err:
        _plan({first: ["mlx5_0;reboot"]})
    assert any("llmb_rdma_rails" in p.message for p in err.value.problems)


def test_the_file_verify_records_is_read_back_as_the_knobs_the_planner_takes():
    import yaml
    from llmbctl import verify as V

    text = V.rails_yaml("gpu-h800-01", {"llmb_rdma_rails": ["mlx5_0", "mlx5_2"], "llmb_rdma_gid_index": 3})
    values = yaml.safe_load(text)
    assert values == {"llmb_rdma_rails": ["mlx5_0", "mlx5_2"], "llmb_rdma_gid_index": 3}
    hv, groups = load_inventory("h800")
    first = list(groups["accel_nodes"])[0]
    hv[first].update(values)
    planned = plan_inventory(hv, groups, str(REPO / "data"))
    assert {e["NCCL_IB_HCA"] for e in _env(planned, first)} == {"=mlx5_0,mlx5_2"}
