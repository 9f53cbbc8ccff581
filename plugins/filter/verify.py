"""Filters for the verify role (thin shims over llmb.hw and llmbctl.verify)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmb.hw import ParseError, parse
from llmbctl import verify as V


def llmb_hw_parse(text, kind=None):
    """Parse one tool output with llmb.hw (kind detected when not given)."""
    try:
        return parse(text or "", kind)
    except ParseError as exc:
        raise AnsibleFilterError(str(exc)) from None


def llmb_verify_report(results):
    """Lines 'host: check: expected X, found Y. hint' for every failed check of every host result."""
    return V.report_lines(list(results or []))


def llmb_platform_names(_unused=None):
    """Names of the platform profiles under data/platforms."""
    return V.profile_names()


class FilterModule:
    def filters(self):
        return {
            "llmb_hw_parse": llmb_hw_parse,
            "llmb_verify_report": llmb_verify_report,
            "llmb_platform_names": llmb_platform_names,
        }
