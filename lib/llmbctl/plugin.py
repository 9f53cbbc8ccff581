"""What the llmb action and filter plugins (plugins/action, plugins/filter) share, controller side.

No Ansible import here: an action plugin mixes ``ControllerAction`` in before Ansible's ``ActionBase``
(``class ActionModule(ControllerAction, ActionBase)``) and implements ``act``; a filter plugin wraps its
functions with ``reraise`` and passes ``AnsibleFilterError`` in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
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


RESULT_ARGS: dict[str, dict[str, Any]] = {
    "artifacts_dir": {"type": "path", "required": True},
    "host": {"type": "str"},
}


class HostResultAction(ControllerAction):
    """An action that writes one host's result under the run's artifacts directory: its ``arg_spec``
    holds ``RESULT_ARGS``, and ``act_on`` gets the host (the ``host`` argument, else the task's
    inventory_hostname) and when the running stage started (``stage_started``)."""

    def act(self, args: dict[str, Any], task_vars: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        host = args["host"] or task_vars.get("inventory_hostname")
        return self.act_on(host, stage_started(task_vars), args, result)

    def act_on(self, host: str, started: str | None, args: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


def reraise(fn: Callable[..., Any], catch: type[Exception] | tuple[type[Exception], ...],
            as_error: Callable[[str], Exception], prefix: str = "") -> Callable[..., Any]:
    """``fn``, with an exception of the ``catch`` types raised again as ``as_error(prefix + message)``
    (no traceback chain: the message names the problem). Name and docstring are ``fn``'s."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except catch as err:
            raise as_error(f"{prefix}{err}") from None

    return inner


def reraise_each(fns: Iterable[Callable[..., Any]], catch: type[Exception] | tuple[type[Exception], ...],
                 as_error: Callable[[str], Exception], prefix: str = "") -> dict[str, Callable[..., Any]]:
    """``{name: reraise(fn, ...)}`` of the functions: what a filter plugin's ``FilterModule.filters``
    returns."""
    return {fn.__name__: reraise(fn, catch, as_error, prefix) for fn in fns}


def stage_started(task_vars: dict[str, Any]) -> str | None:
    """When the running stage started (the report's durations): playbooks/_run.yml starts the clock on
    localhost at every stage of a run (and gives it to every host at the first)."""
    hostvars = task_vars.get("hostvars") or {}
    try:
        started = (hostvars.get("localhost") or {}).get("llmb_stage_started")
    except Exception:  # noqa: BLE001 (no localhost in an ad-hoc inventory)
        started = None
    started = started or task_vars.get("llmb_stage_started")
    return started if isinstance(started, str) else None
