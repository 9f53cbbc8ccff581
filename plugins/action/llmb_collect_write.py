"""llmb_collect_write: one host's support bundle, secrets masked, under <artifacts_dir>/collect/<host>/
(llmbctl.collect.write_host), and its collect result. Documentation: plugins/modules/llmb_collect_write.py.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl.collect import CollectError, secret_values, write_host
from llmbctl.plugin import RESULT_ARGS, HostResultAction
from llmbctl.results import ResultError, record

ARG_SPEC = {
    **RESULT_ARGS,
    "files": {"type": "dict", "required": True},
    "secrets": {"type": "list", "elements": "raw", "default": [], "no_log": True},
}


class ActionModule(HostResultAction, ActionBase):
    arg_spec = ARG_SPEC

    def act_on(self, host, started, args, result):
        try:
            written = write_host(args["artifacts_dir"], host, args["files"],
                                 secret_values(os.environ, [s for s in args["secrets"] if isinstance(s, str)]))
            record(args["artifacts_dir"], "collect", host, {"files": written["files"], "bytes": written["bytes"]},
                   started=started)
        except (CollectError, ResultError, OSError) as err:
            raise AnsibleActionFail(f"{host}: llmb_collect_write: {err}") from None
        result.update(changed=False, **written)
        return result
