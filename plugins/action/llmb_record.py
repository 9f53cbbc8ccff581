"""llmb_record: write this host's result of a stage to <artifacts_dir>/<stage>/<host>.json on the
controller (llmbctl.results, the one results writer); with ``hosts``, the same result for each of them
in one task (a stage the fast path found converged everywhere: one round, not one per host).
Documentation: plugins/modules/llmb_record.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl.plugin import RESULT_ARGS, HostResultAction, stage_started
from llmbctl.results import ResultError, record

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
        paths = [self.act_on(host, started, args, {})["path"] for host in args["hosts"]]
        result.update(changed=False, paths=paths)
        return result

    def act_on(self, host, started, args, result):
        try:
            # started: the running stage's clock, set per stage by playbooks/_run.yml (the report's durations)
            path = record(args["artifacts_dir"], args["stage"], host, args["data"], started=started)
        except (ResultError, OSError) as err:
            raise AnsibleActionFail(f"{host}: llmb_record {args['stage']}: {err}") from None
        result.update(changed=False, path=path)
        return result
