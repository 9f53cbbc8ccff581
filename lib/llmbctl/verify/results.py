"""A node's result (the checks, their counts) and the failed checks' lines (llmb.finding)."""

from __future__ import annotations

from llmb import finding
from llmb.finding import Finding


def summarize(host: str, profile: dict, checks: list[dict], facts: dict | None = None) -> dict:
    failed = [c for c in checks if not c["ok"]]
    out = {
        "host": host,
        "platform": profile.get("name"),
        "ok": not failed,
        "checks": checks,
        "failed": [c["id"] for c in failed],
        "counts": {"total": len(checks), "failed": len(failed),
                   "waived": sum(1 for c in checks if c.get("waived")),
                   "skipped": sum(1 for c in checks if c.get("skipped"))},
    }
    if facts is not None:
        out["warnings"] = facts.get("warnings", [])
        out["errors"] = facts.get("errors", [])
    return out


def report_lines(results: list[dict]) -> list[str]:
    """One line per failed check of every host: 'host: check: expected X, found Y. hint' (llmb.finding)."""
    lines = []
    for r in results:
        lines += finding.lines(r.get("checks", []), r["host"])
        if r.get("unreachable"):
            lines.append(Finding("reachable", host=r["host"], expected="the host to answer",
                                 found=r["unreachable"]).render())
    return lines
