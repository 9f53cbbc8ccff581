"""Plans the engines will accept (issue 26): each class of check, from a shape that passed before.

Every test starts from a sample inventory and writes the shape a new user would write; before the
check it planned (or planned wrong), now it plans right or is refused naming the variable.
"""

from __future__ import annotations

import pytest
from llmb.planner import PlanError, plan_inventory
from planner_helpers import REPO, load_inventory

DATA = str(REPO / "data")


def _plan(name: str, **overrides):
    hv, groups = load_inventory(name)
    for host in hv.values():
        host.update(overrides)
    return plan_inventory(hv, groups, DATA)


def _problems(name: str, **overrides):
    with pytest.raises(PlanError) as err:
        _plan(name, **overrides)
    return err.value.problems


# ------------------------------------------------ 6. values from the command line (-e key=value)
def test_extra_var_text_plans_like_the_integer():
    """`-e llmb_pipeline_parallel=2` gives the text '2': converted as the roles' argument specs do."""
    as_int = _plan("h800", llmb_pipeline_parallel=2).to_list()
    as_text = _plan("h800", llmb_pipeline_parallel="2").to_list()
    assert as_text == as_int
    assert any("--pipeline-parallel-size" in s["argv"] for h in as_text for s in h["services"])


def test_extra_var_text_that_does_not_convert_names_the_variable():
    (p,) = [p for p in _problems("h800", llmb_pipeline_parallel="two") if p.check == "type"]
    assert "llmb_pipeline_parallel" in p.message and "'two' does not convert" in p.fix


# ------------------------------------------------ 7. messages name the variable and the valid set
def test_unshipped_engine_version_names_the_variable_and_the_shipped_releases():
    (p,) = [p for p in _problems("h100", llmb_engine_version="0.99.9") if p.check == "engine-version"]
    assert p.message.startswith("llmb_engine_version: 0.99.9 is not shipped; shipped for vllm: ")
    assert "0.19.1" in p.message
