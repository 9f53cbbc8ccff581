"""What every verify check uses: version comparison, the check records (llmb.finding), the tools
per vendor and the probe kinds whose failure hides a whole area."""

from __future__ import annotations

import re

from llmb import finding


def version_key(v: str):
    """'580.159.04' < '580.159.10'; '24.1.rc2.2' < '24.1.0' (release candidates sort before releases)."""
    key = []
    for tok in re.split(r"[.\-+_]", v.strip().lower()):
        if tok.isdigit():
            key.append((2, int(tok)))
        elif re.fullmatch(r"rc(\d+)", tok):
            key.append((1, int(tok[2:])))
        elif re.fullmatch(r"[a-z]+\d*", tok):
            continue  # build tags such as 'b030' do not order releases
        else:
            raise ValueError(v)
    return key


def version_at_least(found: str, minimum: str) -> bool | None:
    """None when `found` is not a comparable version string."""
    if not found or not re.match(r"^\d+(\.\w+)+", found):
        return None
    try:
        a, b = version_key(found), version_key(minimum)
    except ValueError:
        return None
    n = max(len(a), len(b))
    pad = (2, 0)
    return a + [pad] * (n - len(a)) >= b + [pad] * (n - len(b))


# A check is the project's one finding type (llmb.finding) in its JSON record: {"id", "ok", "expected",
# "found", "hint"}, "skipped" for one not run; _check / _skip make them.
_check = finding.check
_skip = finding.skipped


TOOLS = {
    "nvidia": {"devices": "nvidia-smi -q -x / --query-gpu", "matrix": "nvidia-smi topo -m", "links": "nvidia-smi nvlink -s"},
    "amd": {"devices": "amd-smi static --json", "matrix": "amd-smi topology --json", "links": "amd-smi topology --json"},
    "ascend": {"devices": "npu-smi info", "matrix": "npu-smi info -t topo", "links": "npu-smi info -t topo"},
}
# Probe kinds whose failure hides a whole area; reported as their own checks.
REQUIRED_KINDS = {
    "nvidia": ("nvidia-smi-q-xml", "nvidia-smi-query", "nvidia-smi-topo", "nvidia-smi-nvlink"),
    "amd": ("amd-smi-static-json", "amd-smi-topology-json"),
    "ascend": ("npu-smi-info", "npu-smi-topo", "ascend-version-info"),
}


def _tool_errors(facts, kind):
    return [e for e in facts.get("errors", []) if e.get("kind") == kind and not e.get("parsed")]
