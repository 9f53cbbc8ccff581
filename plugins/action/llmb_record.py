"""llmb_record: write this host's result of a stage to <artifacts_dir>/<stage>/<host>.json on the
controller (llmbctl.results, the one results writer); with ``hosts``, the same result for each of them
in one task (a stage the fast path found converged everywhere: one round, not one per host). A serve
record is written by llmbctl.serveresult.record_serve (it carries the host's start history over).
Documentation: plugins/modules/llmb_record.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl.plugin import RESULT_ARGS, HostResultAction, stage_started
from llmbctl.results import ResultError, record
from llmbctl.serveresult import ServeResultError, record_serve

ARG_SPEC = {
    **RESULT_ARGS,
    "stage": {"type": "str", "required": True},
    "data": {"type": "dict", "default": {}},
    "hosts": {"type": "list", "elements": "str", "default": []},
}


class ActionModule(HostResultAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        if not args["hosts"]:
            return super().act(args, task_vars, result)
        if args["host"]:
            raise AnsibleActionFail(f"llmb_record {args['stage']}: give host or hosts, not both")
        started = stage_started(task_vars)
        done = [self.act_on(host, started, args, {}) for host in args["hosts"]]
        result.update(changed=False, paths=[d["path"] for d in done])
        warnings = [w for d in done for w in d.get("warnings", [])]
        if warnings:
            result["warnings"] = warnings
        return result

    def act_on(self, host, started, args, result):
        try:
            # started: the running stage's clock, set per stage by playbooks/_run.yml (the report's durations)
            if args["stage"] == "serve":
                path, warning = record_serve(args["artifacts_dir"], host, args["data"], started=started)
                if warning:
                    result.setdefault("warnings", []).append(warning)
            else:
                path = record(args["artifacts_dir"], args["stage"], host, args["data"], started=started)
        except (ResultError, ServeResultError, OSError) as err:
            raise AnsibleActionFail(f"{host}: llmb_record {args['stage']}: {err}") from None
        result.update(changed=False, path=path)
        return result
