"""Filters exposing the launch planner to playbooks (controller side).

plan: "{{ hostvars | llmb_launch_plan(groups) }}"          # list of host plans (the contract)
mine: "{{ plan | llmb_host_plan(inventory_hostname) }}"     # this host's entry
problems: "{{ hostvars | llmb_plan_problems(groups) }}"    # [] or list of problem dicts
report: "{{ problems | llmb_plan_report }}"                 # multi-line text for fail_msg
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from llmb.planner import PlanError, Problem, check, plan  # noqa: E402


def llmb_launch_plan(hostvars, groups, data_dir=None):
    """The launch plan of the inventory; fails with every problem listed when it has any."""
    try:
        return plan(hostvars, dict(groups), data_dir)
    except PlanError as err:
        raise AnsibleFilterError(err.report()) from None


def llmb_plan_problems(hostvars, groups, data_dir=None):
    """Problems of the inventory as dicts (check, message, found, expected, fix, host); [] when fine."""
    return [p.to_dict() for p in check(hostvars, dict(groups), data_dir)]


def llmb_plan_report(problems):
    """Multi-line report of problem dicts (as returned by llmb_plan_problems)."""
    objs = [
        Problem(**{k: p.get(k) for k in ("check", "message", "found", "expected", "fix", "host")})
        for p in problems or []
    ]
    for p in objs:
        p.fix = p.fix or ""
    return PlanError(objs).report() if objs else "launch plan: no problems"


def llmb_host_plan(plan_list, host):
    """The plan entry of one host (empty services when the host has no part in the plan)."""
    for entry in plan_list or []:
        if entry.get("host") == host:
            return entry
    return {"host": host, "services": []}


class FilterModule:
    def filters(self):
        return {
            "llmb_launch_plan": llmb_launch_plan,
            "llmb_plan_problems": llmb_plan_problems,
            "llmb_plan_report": llmb_plan_report,
            "llmb_host_plan": llmb_host_plan,
        }
