"""llmb_serve_converged: where serve's fast path found the stage converged on every host, smoke-test every
planned API endpoint from the controller (llmb.smoke, the checks llmb_smoke makes) and write every host's
serve result (llmbctl.serveresult.record_serve: the start history carried over), in one task run once:
the logic is llmbctl.serveresult. Where an endpoint fails a check, nothing is written and ``recorded`` is false: serve.yml then smoke-tests and
records per host as ever, the failure named on its host. Documentation: plugins/modules/llmb_serve_converged.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmb.smoke import failures_text, run_smoke
from llmbctl.plugin import ControllerAction, stage_started
from llmbctl.results import ResultError
from llmbctl.serveresult import ServeResultError, converged_results, record_serve

ARG_SPEC = {
    "artifacts_dir": {"type": "path", "required": True},
    "hosts": {"type": "list", "elements": "str", "required": True},
    "document_hosts": {"type": "dict", "required": True},
    "smoke": {"type": "bool", "default": True},
    "tool_choice": {"type": "str", "default": "auto", "choices": ["auto", "named"]},
    "timeout_s": {"type": "int", "default": 120},
}


class _NoKey(Exception):
    pass


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def api_key(self, task_vars, host, var):
        try:
            return (task_vars.get("hostvars") or {})[host][var]
        except Exception:  # noqa: BLE001 (undefined on the host, or a template that fails)
            raise _NoKey(f"{host}: serve smoke test: the API key's variable {var} is not set") from None

    def act(self, args, task_vars, result):
        def smoke(host, api):
            token = self.api_key(task_vars, host, api["api_key_var"]) if "api_key_var" in api else None
            return run_smoke(api["base_url"], api["model"], api["reasoning"], api["tool_calls"], args["timeout_s"],
                             token, args["tool_choice"], api["image"])

        run = args["smoke"] and not self._task.check_mode
        try:
            data, failed = converged_results(args["document_hosts"], args["hosts"], smoke if run else None)
        except ServeResultError as err:
            raise AnsibleActionFail(f"llmb_serve_converged: {err}") from None
        except _NoKey as err:  # the per-host smoke test then fails on that host, as ever
            result.update(changed=False, recorded=False, failures=[str(err)])
            return result
        if failed:
            result.update(changed=False, recorded=False, failures=[failures_text(h, checks) for h, checks in failed])
            return result
        started = stage_started(task_vars)
        try:
            done = [record_serve(args["artifacts_dir"], h, d, started=started) for h, d in data.items()]
        except (ResultError, ServeResultError, OSError) as err:
            raise AnsibleActionFail(f"llmb_serve_converged: {err}") from None
        paths = [p for p, _ in done]
        if any(w for _, w in done):
            result["warnings"] = [w for _, w in done if w]
        result.update(changed=False, recorded=True, paths=paths, smoked=sum(len(d["smoke"]) for d in data.values()) if run else 0)
        return result
