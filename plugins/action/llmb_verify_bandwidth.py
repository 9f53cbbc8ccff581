"""llmb_verify_bandwidth: compare a node's bandwidth probe output (nccl-tests all_reduce_perf or the
verify role's torch probe) with the platform profile's thresholds; write
<artifacts>/verify/<host>.bandwidth.json. Never fails: llmb_verify_report does, once, for all hosts.
Documentation: plugins/modules/llmb_verify_bandwidth.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmb.hw import ParseError, parse
from llmbctl import results
from llmbctl import verify as V
from llmbctl.plugin import ControllerAction

ARG_SPEC = {
    "output": {"type": "str", "default": ""},
    "rc": {"type": "int", "default": 0},
    "platform": {"type": "str", "required": True},
    "profile_overrides": {"type": "dict", "default": {}},
    "artifacts_dir": {"type": "path", "required": True},
    "platforms_dir": {"type": "path"},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        host = task_vars.get("inventory_hostname")
        try:
            profile = V.load_profile(args["platform"], args["platforms_dir"], args["profile_overrides"])
        except ValueError as exc:
            raise AnsibleActionFail(f"{host}: check platform: {exc}") from None
        parsed, error = None, None
        text = args["output"] or ""
        if args["rc"] != 0 and not text.strip():
            error = f"probe exit status {args['rc']}"
        else:
            kind = "nccl-tests" if "Avg bus bandwidth" in text else "torch-bw"
            try:
                parsed = parse(text, kind)
            except ParseError as exc:
                last = text.strip().splitlines()[-1] if text.strip() else ""
                error = f"{exc} (last line: {last[:200]!r})"
        checks = V.bandwidth_checks(parsed, profile, error)
        path = results.result_path(args["artifacts_dir"], "verify", host, ".bandwidth")
        ok = all(c["ok"] for c in checks)
        results.write_json(path, {"host": host, "platform": profile["name"], "ok": ok, "checks": checks,
                                  "measured": parsed, "raw": text[-20000:]})
        result.update(changed=False, platform=profile["name"], checks=checks, result_file=path,
                      ok=ok,
                      msg="; ".join(f"{c['id']}: {c['found']}" for c in checks))
        return result
