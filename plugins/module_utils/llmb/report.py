"""Aggregate every stage's per-host results under artifacts/<run-id>/ into one report."""

from __future__ import annotations

import json
from pathlib import Path

from .fsutil import atomic_write_text

STAGE_ORDER = ["preflight", "verify", "engine", "weights", "ssh_mesh", "serve", "bench"]


def collect(run_dir: Path) -> dict:
    stages: dict[str, dict[str, dict]] = {}
    for sd in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        for f in sorted(p for p in sd.glob("*.json") if p.stem != "summary"):
            try:
                data = json.loads(f.read_text())
            except ValueError as e:
                data = {"ok": False, "error": f"unreadable result {f}: {e}"}
            if isinstance(data, dict):
                stages.setdefault(sd.name, {})[f.stem] = data
    order = {s: i for i, s in enumerate(STAGE_ORDER)}
    stages = dict(sorted(stages.items(), key=lambda kv: order.get(kv[0], 99)))
    failed = [{"stage": s, "host": h} for s, hosts in stages.items() for h, d in hosts.items() if d.get("ok") is False]
    endpoint = None
    answer = None
    for d in stages.get("serve", {}).values():
        for rec in [c for t in d.get("smoke", []) for c in (t if isinstance(t, list) else [])]:
            if rec.get("check") == "chat-completion":
                endpoint = rec["request"].split(" ", 1)[1].rsplit("/chat/completions", 1)[0]
                answer = rec.get("found")
    return {"run_id": run_dir.name, "ok": not failed, "failed": failed, "endpoint": endpoint,
            "smoke_answer": answer, "stages": {s: {h: bool(d.get("ok", True)) for h, d in hs.items()}
                                               for s, hs in stages.items()}}


def render_md(rep: dict) -> str:
    lines = [f"# llm-bringup run {rep['run_id']}", "",
             f"Verdict: **{'OK' if rep['ok'] else 'FAILED'}**", ""]
    if rep.get("endpoint"):
        lines += [f"Endpoint: {rep['endpoint']}", f"Smoke answer: {rep.get('smoke_answer')!r}", ""]
    hosts = sorted({h for hs in rep["stages"].values() for h in hs})
    if hosts:
        lines.append("| stage | " + " | ".join(hosts) + " |")
        lines.append("|---|" + "---|" * len(hosts))
        for s, hs in rep["stages"].items():
            cells = ["ok" if hs.get(h) else ("FAILED" if h in hs else "-") for h in hosts]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", "Per-host results: `<stage>/<host>.json` beside this file.", ""]
    return "\n".join(lines)


def write_report(run_dir: str) -> dict:
    rd = Path(run_dir)
    rep = collect(rd)
    atomic_write_text(rd / "report.json", json.dumps(rep, indent=2) + "\n")
    atomic_write_text(rd / "report.md", render_md(rep))
    return rep
