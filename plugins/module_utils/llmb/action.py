"""What the llmb action plugins (plugins/action/llmb_*.py) share: argument handling on the controller.

No Ansible import here: an action plugin mixes ``ControllerAction`` in before Ansible's ``ActionBase``
(``class ActionModule(ControllerAction, ActionBase)``) and implements ``act``.
"""

from __future__ import annotations

from typing import Any


class ControllerAction:
    """``run`` validates the task's arguments against ``arg_spec`` and hands them to ``act`` with the
    task variables and the result Ansible started."""

    arg_spec: dict[str, dict[str, Any]] = {}
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)  # type: ignore[misc]
        _, args = self.validate_argument_spec(argument_spec=self.arg_spec)  # type: ignore[attr-defined]
        return self.act(args, task_vars, result)

    def act(self, args: dict[str, Any], task_vars: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError
