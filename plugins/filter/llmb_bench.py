"""Filters of the bench role (controller side): thin shims over llmb.bench."""

from __future__ import annotations

from llmb.bench import bench_tool
from llmbctl.plugin import reraise

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # imported by the unit tests without Ansible
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]


def llmb_bench_tool(services, tool="auto"):
    """'vllm' (`vllm bench serve` where every API service runs `vllm serve`) or 'client'."""
    return bench_tool(list(services or []), str(tool))


class FilterModule:
    def filters(self):
        return {"llmb_bench_tool": reraise(llmb_bench_tool, ValueError, AnsibleFilterError)}
