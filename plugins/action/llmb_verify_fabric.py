"""llmb_verify_fabric: judge the cross-node fabric probes of every node (ib_write_bw per rail between
ring neighbours, the all-reduce across all nodes) with llmbctl.verify.fabric_checks, write
<artifacts>/verify/fabric.json and, unless in check mode, record each node's working rails in
<inventory>/host_vars/<host>/llmb_rdma.yml for the planner (NCCL_IB_HCA). Run once. Never fails:
llmb_verify_report does, once, for all hosts. Documentation: plugins/modules/llmb_verify_fabric.py.
"""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmb.fsutil import write_text_if_changed
from llmbctl import results
from llmbctl import verify as V
from llmbctl.plugin import ControllerAction

ARG_SPEC = {
    "platform": {"type": "str", "required": True},
    "profile_overrides": {"type": "dict", "default": {}},
    "artifacts_dir": {"type": "path", "required": True},
    "platforms_dir": {"type": "path"},
    "hosts": {"type": "list", "elements": "str", "required": True},
    "result_var": {"type": "str", "default": "__verify_result"},
    "ibbw_var": {"type": "str", "default": "__verify_fabric_ibbw"},
    "allreduce_var": {"type": "str", "default": "__verify_fabric_allreduce"},
    "record_rails": {"type": "bool", "default": True},
    "allreduce_skipped": {"type": "str", "default": ""},
}


def _json(reg) -> dict | None:
    """The probe's JSON line from a registered script result (None when it did not run)."""
    if not isinstance(reg, dict) or reg.get("skipped") or "stdout" not in reg:
        return None
    try:
        return json.loads((reg.get("stdout") or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"missing": f"the fabric probe printed no result (exit status {reg.get('rc')}): "
                           f"{(reg.get('stderr') or reg.get('stdout') or '').strip()[-300:]}"}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        try:
            profile = V.load_profile(args["platform"], args["platforms_dir"], args["profile_overrides"])
        except ValueError as exc:
            raise AnsibleActionFail(f"fabric: check platform: {exc}") from None
        hostvars = task_vars.get("hostvars") or {}
        hosts = [h for h in args["hosts"] if h in hostvars]
        nodes, ibbw = {}, {}
        for i, h in enumerate(hosts):
            hv = hostvars[h]
            res = hv.get(args["result_var"]) or {}
            nodes[h] = {"hostname": res.get("node_hostname") or h, "rails": list(res.get("rails") or []),
                        "next": hosts[(i + 1) % len(hosts)]}
            got = _json(hv.get(args["ibbw_var"]))
            if got is not None:
                ibbw[h] = got
                nodes[h]["hostname"] = got.get("host") or nodes[h]["hostname"]
        allreduce = None
        for h in hosts:
            reg = hostvars[h].get(args["allreduce_var"])
            got = _json(reg)
            if got is not None:
                allreduce = dict(got, host=h)
                break
        if allreduce is None and hosts and len(hosts) > 1:
            allreduce = {"host": hosts[0], "skipped": args["allreduce_skipped"] or "not run"}
        try:
            checks = V.fabric_checks(profile, nodes, ibbw or None, allreduce)
        except ValueError as exc:
            raise AnsibleActionFail(f"fabric: check platform: {exc}") from None
        rails = V.rail_record(nodes, ibbw) if ibbw else {}
        recorded = []
        if args["record_rails"] and rails:
            for h, rec in rails.items():
                inv = hostvars[h].get("inventory_dir")
                if not inv:
                    continue
                path = os.path.join(inv, "host_vars", h, V.RAILS_FILE)
                if self._task.check_mode:
                    recorded.append(path + " (check mode: not written)")
                elif write_text_if_changed(path, V.rails_yaml(h, rec)):
                    recorded.append(path)
        path = os.path.join(args["artifacts_dir"], "verify", "fabric.json")
        results.write_json(path, {"platform": profile["name"], "nodes": nodes, "checks": checks, "rails": rails,
                                  "ibbw": ibbw, "allreduce": allreduce})
        bad = {h: [c for c in cs if not c["ok"]] for h, cs in checks.items()}
        result.update(changed=bool([p for p in recorded if not p.endswith("not written)")]), checks=checks,
                      failed_checks=bad, result_file=path, rails=rails, recorded=recorded,
                      ok=not any(bad.values()),
                      msg=f"fabric: {sum(len(v) for v in bad.values())} failed checks on "
                          f"{sum(1 for v in bad.values() if v)} of {len(hosts)} hosts (details in {path})")
        return result
