"""The dry run's changed set against the real run's (docs/check-mode.md): (host, task) pairs from
Ansible's default output, minus the tasks docs/check-mode.md lists as unpredictable in check mode."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def changed_set(out: str) -> set[tuple[str, str]]:
    """(host, task) of every `changed:` line, under the TASK or RUNNING HANDLER header it follows."""
    pairs, task = set(), None
    for line in out.splitlines():
        m = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.+)\] \**$", line)
        if m:
            task = m.group(1)
            continue
        m = re.match(r"^changed: \[([^\]\s]+)", line)
        if m and task:
            pairs.add((m.group(1), task))
    return pairs


def unpredictable() -> dict[str, str]:
    """task -> reason, from the table of docs/check-mode.md."""
    text = (ROOT / "docs" / "check-mode.md").read_text()
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([^`]+)` \| (.+) \|$", text, re.M)}


def compare(dry_out: str, real_out: str) -> tuple[set, set]:
    """(reported by the dry run only, changed by the real run only), the documented exceptions removed."""
    skip = set(unpredictable())
    dry = {p for p in changed_set(dry_out) if p[1] not in skip}
    real = {p for p in changed_set(real_out) if p[1] not in skip}
    return dry - real, real - dry
