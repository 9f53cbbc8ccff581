"""Parsers for accelerator and host tool outputs (stdlib only; no Ansible imports).

    from llmb.hw import parse, detect_kind, ParseError
    facts = parse(text)                 # kind detected (from a capture header or the content)
    facts = parse(text, kind="numactl")

Every parser returns a dict with a "kind" key, or raises ParseError naming what is wrong.
llmbctl.hw.check.parse_checked(text, kind) never raises on its input: it returns the facts together with
findings (severity, capture line, text, message): truncation, header counts, a wrong kind, a BOM,
terminal residue (see docs/verify.md).
"""

from __future__ import annotations

__all__ = ["KINDS", "ParseError", "detect_kind", "parse", "parse_capture", "split_capture", "strip_capture_header"]

# Everything is imported on first use: the node-side probe runner (llmb.hw.probes, shipped with the
# accel_probe module) must not pull in every parser, and Mitogen's module_utils importer resolves
# relative imports in a package __init__ wrongly (its own submodules are not found).
_FROM_TEXT = ("ParseError", "split_capture", "strip_capture_header")
_FROM_KINDS = ("KINDS", "detect_kind", "parse", "parse_capture")


def __getattr__(name):
    if name in _FROM_TEXT:
        from . import _text

        return getattr(_text, name)
    if name in _FROM_KINDS:
        from . import kinds

        return getattr(kinds, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
