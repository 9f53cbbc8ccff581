"""Filters for the serve role's templates (controller side): thin shims over llmb.serve.

A value that cannot be written safely into a unit or environment file (a newline in an argument,
an environment name with a space, ...) fails the template task with the message of
llmb.quoting.QuotingError, naming the service and the field.
"""

from __future__ import annotations

import sys
from pathlib import Path

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from llmb.serve import environment_file, systemd_exec, systemd_unit  # noqa: E402

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # imported by the unit tests without Ansible
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]


def _shim(fn):
    def run(*args):
        try:
            return fn(*args)
        except ValueError as exc:
            raise AnsibleFilterError(str(exc)) from None

    run.__name__ = fn.__name__
    return run


class FilterModule:
    def filters(self):
        return {
            "llmb_systemd_exec": _shim(systemd_exec),
            "llmb_systemd_unit": _shim(systemd_unit),
            "llmb_environment_file": _shim(environment_file),
        }
