"""Filters for the serve role's templates (controller side)."""

from __future__ import annotations

import sys
from pathlib import Path

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from llmb.serve import systemd_exec  # noqa: E402


class FilterModule:
    def filters(self):
        return {"llmb_systemd_exec": systemd_exec}
