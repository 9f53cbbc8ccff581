"""llmb_record: write this host's result of a stage to <artifacts_dir>/<stage>/<host>.json on the
controller (llmbctl.results, the one results writer). Documentation: plugins/modules/llmb_record.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl.plugin import ControllerAction, stage_started
from llmbctl.results import ResultError, record

ARG_SPEC = {
    "artifacts_dir": {"type": "path", "required": True},
    "stage": {"type": "str", "required": True},
    "data": {"type": "dict", "default": {}},
    "host": {"type": "str"},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        host = args["host"] or task_vars.get("inventory_hostname")
        try:
            # llmb_stage_started: set per stage by playbooks/_run.yml (the report's durations)
            path = record(args["artifacts_dir"], args["stage"], host, args["data"], started=stage_started(task_vars))
        except (ResultError, OSError) as err:
            raise AnsibleActionFail(f"{host}: llmb_record {args['stage']}: {err}") from None
        result.update(changed=False, path=path)
        return result
