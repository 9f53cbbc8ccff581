"""Preflight's node OS checks (llmbctl.nodeos): "{{ ansible_facts | llmb_node_os_problems(inventory_hostname) }}"."""

from __future__ import annotations

from llmbctl.nodeos import os_problems, os_untested


def llmb_node_os_problems(facts, host):
    return os_problems(str(host), dict(facts or {}))


def llmb_node_os_untested(facts, host):
    return os_untested(str(host), dict(facts or {})) or ""


class FilterModule:
    def filters(self):
        return {"llmb_node_os_problems": llmb_node_os_problems, "llmb_node_os_untested": llmb_node_os_untested}
