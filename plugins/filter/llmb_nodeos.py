"""Preflight's node OS checks (llmb.nodeos): "{{ ansible_facts | llmb_node_os_problems(inventory_hostname) }}"."""

from __future__ import annotations

import sys
from pathlib import Path

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from llmb.nodeos import os_problems, os_untested  # noqa: E402


def llmb_node_os_problems(facts, host):
    return os_problems(str(host), dict(facts or {}))


def llmb_node_os_untested(facts, host):
    return os_untested(str(host), dict(facts or {})) or ""


class FilterModule:
    def filters(self):
        return {"llmb_node_os_problems": llmb_node_os_problems, "llmb_node_os_untested": llmb_node_os_untested}
