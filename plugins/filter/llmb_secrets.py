"""Filters over llmb.secrets (controller side): the one pattern deciding which names hold secrets.

    no_log: "{{ item.env | llmb_secret_keys | length > 0 }}"
"""

from __future__ import annotations

import sys
from pathlib import Path

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from llmb.secrets import secret_keys  # noqa: E402


class FilterModule:
    def filters(self):
        return {"llmb_secret_keys": secret_keys}
