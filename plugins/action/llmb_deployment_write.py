"""llmb_deployment_write: make the run's artifacts directory and write deployment.json into it, on the
controller, in the controller's own process (no module is sent anywhere: stage 0 runs this in every stage
playbook). Documentation: plugins/modules/llmb_deployment_write.py.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl import deployment as D
from llmbctl.plugin import ControllerAction

ARG_SPEC = {
    "artifacts_dir": {"type": "path", "required": True},
    "document": {"type": "dict", "required": True},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        directory = args["artifacts_dir"]
        path = os.path.join(directory, "deployment.json")
        try:
            os.makedirs(directory, exist_ok=True)
            os.chmod(directory, 0o755)  # the results of the run, readable by whoever reads the report
            written = D.write(args["document"], path)
        except OSError as err:
            raise AnsibleActionFail(f"stage 0: cannot write {path}: {err}") from None
        # results of the run, not cluster state: never a change
        result.update(changed=False, path=path, written=written)
        return result
