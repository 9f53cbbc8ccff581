"""`llmb status` on the controller: the cluster's status from the run's per-host records.

playbooks/status.yml writes ``<run>/status/<host>.json`` (llmb.status on each node: the services'
state, health, release, the unit drift, ...). Here the records are put together with the
deployment's hosts: a host of the plan without a record did not answer (unreachable, or its module
failed: ``errors`` from the console's live table say which), and that is drift too. Pure functions
(files in, dicts and rows out); the console prints them (lib/llmbctl/console/daytwo.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmb.status import drift_line

SUMMARY = "status.json"


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summarize(run_dir: Path, errors: dict[str, str] | None = None) -> dict:
    """{"ok", "hosts": {host: record|None}, "drift": [{host, service, check, expected, found}], "expected",
    "lock"}: every host of the deployment, the drift of all of them."""
    dep = _read(run_dir / "deployment.json") or {}
    records = {p.stem: r for p in sorted((run_dir / "status").glob("*.json")) if isinstance(r := _read(p), dict)}
    hosts = list(dep.get("hosts") or {}) or sorted(records)
    drift: list[dict] = []
    for h in hosts:
        rec = records.get(h)
        if rec is None:
            why = (errors or {}).get(h) or "no result: the node is missing or unreachable"
            drift.append({"host": h, "service": None, "check": "node", "expected": "answers", "found": why})
            continue
        drift += [{"host": h, **d} for d in rec.get("drift") or []]
    if not hosts:
        drift.append({"host": None, "service": None, "check": "hosts", "expected": "planned hosts",
                      "found": "the deployment plans no host"})
    engine, model = dep.get("engine") or {}, dep.get("model") or {}
    return {
        "ok": not drift,
        "hosts": {h: records.get(h) for h in hosts},
        "drift": drift,
        "expected": {"release": engine.get("version"), "model_commit": model.get("commit"),
                     "image": engine.get("image"), "lock": (dep.get("pins") or {}).get("lock")},
    }


def exit_status(summary: dict) -> int:
    """0 all as planned, 1 otherwise."""
    return 0 if summary["ok"] else 1


def _mem(gpu: dict | None) -> str:
    gpus = (gpu or {}).get("gpus") or []
    if not gpus:
        return (gpu or {}).get("error") and "error" or "-"
    used = sum(g.get("used_mib") or 0 for g in gpus)
    total = sum(g.get("total_mib") or 0 for g in gpus)
    return f"{used / 1024:.1f}/{total / 1024:.0f} GiB on {len(gpus)}"


def _since(value: str | None) -> str:
    """systemd's "Fri 2026-11-27 05:56:11 UTC" (or docker's ISO time) as "2026-11-27 05:56:11"."""
    if not value:
        return "-"
    parts = str(value).replace("T", " ").split()
    date = next((i for i, p in enumerate(parts) if len(p) == 10 and p[4:5] == "-"), None)
    return " ".join(parts[date:date + 2])[:19] if date is not None else str(value)


def rows(summary: dict) -> list[list[str]]:
    """One row per host and service: host, service, state, since, restarts, health, release, model,
    device memory, drift (the checks that differ: the service's, and the host's on its first row;
    :func:`drift_lines` says how)."""
    out = []
    by: dict = {}
    for d in summary["drift"]:
        by.setdefault((d.get("host"), d.get("service")), []).append(d)
    exp = summary.get("expected") or {}

    def checks(ds: list[dict]) -> str:
        return ", ".join(dict.fromkeys(d["check"] for d in ds)) or "-"

    for h, rec in summary["hosts"].items():
        if rec is None:
            out.append([h, "-", "no answer", "-", "-", "-", "-", "-", "-", checks(by.get((h, None), []))])
            continue
        commit = rec.get("model_commit")
        commit_cell = (commit[:12] if commit else "-") + ("" if not exp.get("model_commit") or commit == exp["model_commit"]
                                                          else " (lock " + str(exp["model_commit"])[:12] + ")")
        services = rec.get("services") or [{}]
        for i, s in enumerate(services):
            health = s.get("health") or {}
            state = str(s.get("state") or "-") + (f" ({s['sub']})" if s.get("sub") and s.get("state") != "active" else "")
            release = s.get("release") or (rec.get("installed_release") if i == 0 else None) or "-"
            notes = by.get((h, s.get("name")), []) + (by.get((h, None), []) if i == 0 else [])
            out.append([h, s.get("name") or "-", state, _since(s.get("since")),
                        "-" if s.get("restarts") is None else str(s["restarts"]),
                        {True: "healthy", False: "UNHEALTHY", None: "-"}[health.get("ok")], str(release),
                        commit_cell if i == 0 else "", _mem(rec.get("gpu")) if i == 0 else "", checks(notes)])
    return out


def drift_lines(summary: dict) -> list[str]:
    """Each drift as one line: host service: check: expected ..., found ...."""
    return [f"{d.get('host') or '-'} {drift_line(d)}" for d in summary["drift"]]


COLUMNS = ["host", "service", "state", "since", "restarts", "health", "release", "model", "device memory", "drift"]
