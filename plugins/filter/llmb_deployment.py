"""Filters exposing the deployment resolver (lib/llmbctl/deployment.py) and the
launch planner to stage 0 (controller side).

doc:  "{{ hostvars | llmb_deployment(groups, run_id, artifacts_dir) }}"   # the whole document
text: "{{ doc | llmb_deployment_json }}"                                  # deployment.json's bytes
mine: "{{ doc | llmb_deployment_host(inventory_hostname) }}"              # shared sections + this host
plan: "{{ hostvars | llmb_launch_plan(groups) }}"          # list of host plans (the contract)
mine: "{{ plan | llmb_host_plan(inventory_hostname) }}"     # this host's entry
problems: "{{ hostvars | llmb_plan_problems(groups) }}"    # [] or list of problem dicts
report: "{{ problems | llmb_plan_report }}"                 # multi-line text for fail_msg
api:  "{{ doc | llmb_api_hosts }}"                          # the hosts that serve an API (llmb.report)
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError
from llmb.finding import Finding
from llmb.report import api_hosts
from llmbctl.deployment import DeploymentError, build, dumps, host_view, validate_run_id
from llmbctl.planner import PlanError, check, plan
from llmbctl.planner.inventory import is_checked_name


def llmb_deployment(
    hostvars, groups, run_id=None, artifacts_dir=None, data_dir=None, inventory_dir=None, check_mode=False
):
    """The deployment document of the inventory (planned: false and problems when it cannot be planned).

    inventory_dir: where llmb.lock.json keeps the pins; given, the engine release comes from it when
    the inventory leaves llmb_engine_version unset, the model commit and the image digests are
    resolved (hub, registry), and all are locked there (not written in check mode)."""
    try:
        rid = validate_run_id(run_id) if run_id is not None else None
    except DeploymentError as err:
        raise AnsibleFilterError(str(err)) from None
    return build(
        hostvars,
        dict(groups),
        rid,
        str(artifacts_dir) if artifacts_dir else None,
        data_dir,
        host_set=host_set_of(hostvars),
        inventory_files=inventory_files_of(hostvars),
        inventory_dir=str(inventory_dir) if inventory_dir else None,
        write=not check_mode,
    )


def llmb_deployment_json(doc):
    """The document as deployment.json holds it."""
    return dumps(dict(doc))


def llmb_deployment_host(doc, host):
    """One host's view: every shared section, and `host` = its own entry (address, rank, patches, plan)."""
    return host_view(dict(doc), str(host))


def inventory_files_of(hostvars) -> list[str] | None:
    """The YAML files of the play's inventory sources (None: cannot tell)."""
    inventory = getattr(hostvars, "_inventory", None)
    if inventory is None:
        return None
    from llmbctl.planner.yamlkeys import inventory_files

    return [f for s in getattr(inventory, "_sources", []) if s and os.path.exists(s) for f in inventory_files(s)]


def host_set_of(hostvars) -> dict[str, list[str]] | None:
    """Per host, the llmb_* / stage variable names set on the host itself (None: cannot tell)."""
    inventory = getattr(hostvars, "_inventory", None)
    loader = getattr(hostvars, "_loader", None)
    if inventory is None or loader is None:
        return None
    from ansible.vars.plugins import get_vars_from_inventory_sources

    sources = [s for s in getattr(inventory, "_sources", []) if s]
    out: dict[str, list[str]] = {}
    for host in dict(inventory.hosts).values():  # not get_hosts(): a play restricts that to its hosts
        own = set(host.get_vars())
        for stage in ("inventory", "task"):
            own |= set(get_vars_from_inventory_sources(loader, sources, [host], stage))
        out[host.name] = sorted(str(k) for k in own if is_checked_name(str(k)))
    return out


def llmb_launch_plan(hostvars, groups, data_dir=None):
    """The launch plan of the inventory; fails with every problem listed when it has any."""
    try:
        return plan(hostvars, dict(groups), data_dir, host_set=host_set_of(hostvars))
    except PlanError as err:
        raise AnsibleFilterError(err.report()) from None


def llmb_plan_problems(hostvars, groups, data_dir=None):
    """Problems of the inventory as dicts (check, message, found, expected, fix, host); [] when fine."""
    problems = check(hostvars, dict(groups), data_dir, host_set=host_set_of(hostvars))
    return [{**p.to_dict(), "found": _jsonable(p.found)} for p in problems]


def _jsonable(value):
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def llmb_plan_report(problems):
    """Multi-line report of problem dicts (as returned by llmb_plan_problems)."""
    objs = [Finding.from_record({"check": None, **p}) for p in problems or []]
    return PlanError(objs).report() if objs else "launch plan: no problems"


def llmb_host_plan(plan_list, host):
    """The plan entry of one host (empty services when the host has no part in the plan)."""
    for entry in plan_list or []:
        if entry.get("host") == host:
            return entry
    return {"host": host, "services": []}


def llmb_api_hosts(doc):
    """The hosts whose plan serves an API: bench and accuracy run there (llmb.report.api_hosts)."""
    return api_hosts(dict(doc or {}))


class FilterModule:
    def filters(self):
        return {
            "llmb_deployment": llmb_deployment,
            "llmb_deployment_json": llmb_deployment_json,
            "llmb_deployment_host": llmb_deployment_host,
            "llmb_launch_plan": llmb_launch_plan,
            "llmb_plan_problems": llmb_plan_problems,
            "llmb_plan_report": llmb_plan_report,
            "llmb_host_plan": llmb_host_plan,
            "llmb_api_hosts": llmb_api_hosts,
        }
