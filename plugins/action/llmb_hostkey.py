"""llmb_hostkey: the host key the node to recover presents against what known_hosts pins; stop with
the fingerprint and the fix, or pin exactly the accepted key (llmbctl.hostkeys). Runs in the
controller process. Documentation: plugins/modules/llmb_hostkey.py."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl.hostkeys import HostKeyError, check_host
from llmbctl.plugin import ControllerAction

ARG_SPEC = {
    "host": {"type": "str", "required": True},
    "address": {"type": "str", "required": True},
    "port": {"type": "int", "default": 22},
    "user": {"type": "str"},
    "ssh_args": {"type": "str", "default": ""},
    "accept": {"type": "str"},
    "inventory": {"type": "str", "default": "<inventory>"},
    "timeout_s": {"type": "int", "default": 5},
    "control_path": {"type": "str", "default": "~/.ansible/cp/%C"},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        try:
            out = check_host(args["host"], args["address"], args["port"], args["ssh_args"], args["accept"],
                             args["inventory"], args["timeout_s"], args["user"], args["control_path"],
                             check_mode=bool(getattr(self._play_context, "check_mode", False)))
        except (HostKeyError, OSError) as err:
            raise AnsibleActionFail(f"recover: {args['host']}: {err}") from None
        ok = out.pop("ok")
        result.update(out)
        if not ok:
            result["failed"] = True
        return result
