"""llmb_record: write this host's result of a stage to <artifacts_dir>/<stage>/<host>.json on the
controller (llmb.results, the one results writer). Documentation: plugins/modules/llmb_record.py.
"""

from __future__ import annotations

import os
import sys

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

_MU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "module_utils")
if _MU not in sys.path:
    sys.path.insert(0, _MU)

from llmb.plugin import ControllerAction  # noqa: E402
from llmb.results import ResultError, record  # noqa: E402

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
            started = task_vars.get("llmb_stage_started")
            path = record(args["artifacts_dir"], args["stage"], host, args["data"],
                          started=started if isinstance(started, str) else None)
        except (ResultError, OSError) as err:
            raise AnsibleActionFail(f"{host}: llmb_record {args['stage']}: {err}") from None
        result.update(changed=False, path=path)
        return result
