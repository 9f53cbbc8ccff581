"""llmb_verify_report: gather every play host's verify result, write <artifacts>/verify/summary.json
and fail once, listing every failed check of every host (host, check, expected, found, hint).
Run it once (run_once: true) after llmb_verify. Documentation: plugins/modules/llmb_verify_report.py.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl import verify as V
from llmbctl.plugin import ControllerAction
from llmbctl.results import write_json

ARG_SPEC = {
    "artifacts_dir": {"type": "path", "required": True},
    "result_var": {"type": "str", "default": "__verify_result"},
    "bandwidth_var": {"type": "str", "default": "__verify_bandwidth"},
    "fabric_var": {"type": "str", "default": "__verify_fabric"},
    "fail": {"type": "bool", "default": True},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        hosts = list(task_vars.get("ansible_play_hosts_all") or [])
        alive = set(task_vars.get("ansible_play_hosts") or [])
        hostvars = task_vars.get("hostvars") or {}
        results = []
        for h in hosts:
            hv = hostvars.get(h, {})
            res = hv.get(args["result_var"]) if h in hostvars else None
            bw = hv.get(args["bandwidth_var"]) if h in hostvars else None
            entry: dict = {"host": h, "checks": []}
            if isinstance(res, dict) and "counts" in res:
                entry.update(ok=res["ok"], platform=res.get("platform"), result_file=res.get("result_file"),
                             checks=list(res.get("failed_checks", [])), counts=res["counts"])
            elif isinstance(bw, dict) and "checks" in bw:
                entry.update(ok=True, platform=bw.get("platform"))
            else:
                why = "the host was unreachable or failed" if h not in alive else "no verify result was recorded"
                entry.update(ok=False, unreachable=why)
            if isinstance(bw, dict) and "checks" in bw:
                bad = [c for c in bw["checks"] if not c["ok"]]
                entry["checks"] += bad
                entry["bandwidth_file"] = bw.get("result_file")
                if bad:
                    entry["ok"] = False
            results.append(entry)
        # Driver and firmware equal on the nodes of one platform (the differences listed per host).
        firmware = {r["host"]: hostvars[r["host"]][args["result_var"]]["firmware"] for r in results
                    if isinstance(hostvars.get(r["host"], {}).get(args["result_var"]), dict)
                    and "firmware" in hostvars[r["host"]][args["result_var"]]}
        consistency = V.consistency_checks(firmware)
        fabric = next((hostvars[h].get(args["fabric_var"]) for h in hosts if isinstance(
            hostvars.get(h, {}).get(args["fabric_var"]), dict) and "failed_checks" in hostvars[h][args["fabric_var"]]), None)
        if fabric:  # tag fabric: the cross-node checks, each on the host it names
            for r in results:
                bad = fabric["failed_checks"].get(r["host"]) or []
                if bad:
                    r["checks"] = r["checks"] + bad
                    r["ok"] = False
                r["fabric_file"] = fabric.get("result_file")
        for r in results:
            bad = consistency.get(r["host"]) or []
            if bad:
                r["checks"] = r["checks"] + bad
                r["ok"] = False
        lines = V.report_lines(results)
        ok = all(r["ok"] for r in results)
        summary = {"ok": ok, "hosts": len(results), "failed_hosts": [r["host"] for r in results if not r["ok"]],
                   "results": results, "report": lines}
        path = os.path.join(args["artifacts_dir"], "verify", "summary.json")
        write_json(path, summary)
        result.update(changed=False, ok=ok, summary_file=path, failed_hosts=summary["failed_hosts"])
        if not ok and args["fail"]:
            result["failed"] = True
            result["msg"] = (f"verify: {len(summary['failed_hosts'])} of {len(results)} hosts deviate from their "
                             f"platform profile ({len(lines)} failed checks; details in {path}):\n" + "\n".join(lines))
        else:
            result["msg"] = f"verify: all {len(results)} hosts match their platform profile (summary: {path})"
        if not hosts:
            raise AnsibleActionFail("verify: no hosts in this play")
        return result
