"""llmb_collect_pack: the cluster's support archive <artifacts_dir>/llmb-collect-<run>.tar.gz with an
index page, manifest and checksums (llmbctl.collect.pack). Documentation: plugins/modules/llmb_collect_pack.py.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl.collect import CollectError, pack, secret_values
from llmbctl.plugin import ControllerAction
from llmbctl.results import ResultError

ARG_SPEC = {
    "artifacts_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "hosts": {"type": "list", "elements": "str", "required": True},
    "secrets": {"type": "list", "elements": "raw", "default": [], "no_log": True},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        try:
            packed = pack(args["artifacts_dir"], args["run_id"], args["hosts"],
                          secret_values(os.environ, [s for s in args["secrets"] if isinstance(s, str)]))
        except (CollectError, ResultError, OSError) as err:
            raise AnsibleActionFail(f"llmb_collect_pack: {err}") from None
        result.update(changed=False, **packed)
        return result
