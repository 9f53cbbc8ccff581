"""Aggregate every stage's per-host results under artifacts/<run-id>/ into one report.

The verdict is computed from every expected (stage, host) result: the hosts of the deployment
(artifacts/<run-id>/deployment.json) for each expected stage, only the hosts that serve an API for
bench and accuracy. A missing result (the host was unreachable, or failed earlier in the stage,
before its record was written) counts as failed, and so does a run with no expected result at all.

Outputs, written atomically beside the results: report.json (the aggregate), report.md and one
self-contained report.html (inline CSS, no script, no external resource): verdict, per stage and
host status and duration, verify's topology as a device link matrix with NUMA nodes and NIC
rails (deviations highlighted), weights, serve start order and time to healthy (this run's, and the
median of every start recorded per compile cache state: llmb.starthistory), bench and accuracy
figures against their thresholds and the recipe's reference. Stdlib only.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path
from typing import Any

from . import starthistory
from .finding import Finding
from .fsutil import atomic_write_text
from .stages import PIPELINE_STAGES as _PIPELINE
from .stages import STAGE_NAMES

# the stages whose results directories the report orders (llmb.stages, the one stage table)
STAGE_ORDER = [name for name in STAGE_NAMES if name != "report"]
# What site.yml (and recover.yml, which imports it) runs per host: every one is expected.
PIPELINE_STAGES = list(_PIPELINE)
# Stages that run only on the hosts whose plan has an API service (they test the endpoint).
API_STAGES = {"bench", "accuracy"}
# What a control node (a host outside accel_nodes running the PD router; ``control`` in the
# deployment's host entry) runs: no accelerator checks, no weights, no SSH mesh.
CONTROL_STAGES = {"engine", "serve"} | API_STAGES
# Extra per-host files of a stage: <stage>/<host><suffix>.json (not hosts of their own).
_SUFFIXES = (".bandwidth",)
_NOT_HOSTS = {"summary", "report", "deployment"}
MISSING = "missing"


class ReportError(ValueError):
    """The run directory cannot be reported on; the message says what and where."""


def _read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text()), None
    except (OSError, ValueError) as e:
        return None, f"unreadable result {path}: {e}"


def _ts(value: Any) -> float | None:
    """Seconds since the epoch of an ISO 8601 time (Z or offset) or a number; None otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        try:
            t = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.UTC)
        return t.timestamp()
    return None


def api_hosts(deployment: dict) -> list[str]:
    """The hosts whose plan serves an API (a service with ``api``): where bench and accuracy run and
    record a result (stage 0 puts them in the group llmb_api_hosts, the plays of both stages)."""
    out = []
    for name, h in (deployment.get("hosts") or {}).items():
        services = ((h or {}).get("plan") or {}).get("services") or []
        if any(isinstance(s, dict) and s.get("api") for s in services):
            out.append(name)
    return out


def expected_results(deployment: dict | None, stages: list[str], present: dict[str, dict]) -> list[tuple[str, str]]:
    """Every (stage, host) a run of `stages` must have recorded. Hosts come from the deployment
    document; without one, from the results themselves (every host seen in any stage). A control
    node is expected only in CONTROL_STAGES."""
    hosts = list((deployment or {}).get("hosts") or {})
    if not hosts:
        hosts = sorted({h for hs in present.values() for h in hs})
    api = api_hosts(deployment or {}) if deployment else []
    control = {n for n, h in ((deployment or {}).get("hosts") or {}).items() if (h or {}).get("control")}
    out = []
    for s in stages:
        if s in API_STAGES:
            targets = api or sorted(present.get(s, {})) or hosts[:1]
        else:
            targets = [h for h in hosts if h not in control or s in CONTROL_STAGES]
        out.extend((s, h) for h in targets)
    return out


def _duration(d: dict, mtime: float) -> float | None:
    if isinstance(d.get("duration_s"), (int, float)):
        return round(float(d["duration_s"]), 1)
    start = _ts(d.get("started"))
    if start is None:
        return None
    end = _ts(d.get("finished")) or mtime
    return round(max(0.0, end - start), 1) if end else None


def _load(run_dir: Path) -> tuple[dict[str, dict[str, dict]], dict[str, dict[str, dict]]]:
    """(results, extras): results[stage][host] = the record (+ _mtime); extras[stage][host.suffix]."""
    stages: dict[str, dict[str, dict]] = {}
    extras: dict[str, dict[str, dict]] = {}
    for sd in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        for f in sorted(sd.glob("*.json")):
            stem = f.stem
            if stem in _NOT_HOSTS:
                continue
            data, err = _read_json(f)
            if err or not isinstance(data, dict):
                data = {"ok": False, "error": err or f"result {f} is not an object"}
            if any(stem.endswith(sfx) for sfx in _SUFFIXES):
                extras.setdefault(sd.name, {})[stem] = data
                continue
            data = dict(data)
            data["_mtime"] = f.stat().st_mtime
            stages.setdefault(sd.name, {})[stem] = data
    return stages, extras


def _smoke(serve: dict[str, dict]) -> tuple[str | None, str | None]:
    for d in serve.values():
        for rec in [c for t in d.get("smoke") or [] for c in (t if isinstance(t, list) else [])]:
            if isinstance(rec, dict) and rec.get("check") == "chat-completion" and rec.get("request"):
                endpoint = str(rec["request"]).split(" ", 1)[-1].rsplit("/chat/completions", 1)[0]
                return endpoint, rec.get("found")
    return None, None


def _topology(host: str, d: dict, extra: dict | None) -> dict:
    """One host's device link matrix, NUMA nodes and NIC rails from its verify result, with the
    deviations the checks found (interconnect.A-B, numa.D, rdma.rail.D, links.D)."""
    facts = d.get("facts") or {}
    devices = [x for x in facts.get("devices") or [] if isinstance(x, dict)]
    names = [str(x.get("name")) for x in devices]
    matrix = facts.get("matrix") or {}
    if not names:
        names = sorted(matrix)
    failed = {c.get("id"): c for c in d.get("checks") or [] if isinstance(c, dict) and c.get("ok") is False}
    cells = []
    for a in names:
        for b in names:
            if a == b:
                continue
            chk = failed.get(f"interconnect.{a}-{b}") or failed.get(f"interconnect.{b}-{a}")
            found = (matrix.get(a) or {}).get(b)
            cells.append({"a": a, "b": b, "link": found, "deviation": bool(chk),
                          "expected": chk.get("expected") if chk else None})
    numa: dict[str, list[str]] = {}
    for x in devices:
        node = x.get("numa_node")
        numa.setdefault("?" if node is None else str(node), []).append(str(x.get("name")))
    rails = []
    for nic in facts.get("nics") or []:
        if not isinstance(nic, dict):
            continue
        near = sorted(g for g, lab in (nic.get("nearest") or {}).items() if lab in ("PIX", "PXB"))
        rails.append({"nic": nic.get("name"), "devices": near})
    dev_flags = {}
    for n in names:
        bad = [cid for cid in (f"numa.{n}", f"rdma.rail.{n}", f"links.{n}") if cid in failed]
        if bad:
            dev_flags[n] = [Finding(cid, expected=failed[cid].get("expected"), found=failed[cid].get("found")).render()
                            for cid in bad]
    link_counts: dict[str, int] = {}
    for c in cells:
        if c["link"]:
            link_counts[str(c["link"])] = link_counts.get(str(c["link"]), 0) + 1
    out = {"host": host, "platform": d.get("platform"), "vendor": facts.get("vendor") or d.get("vendor"),
           "driver": facts.get("driver_version") or d.get("driver_version"), "devices": names, "cells": cells,
           "link_counts": link_counts, "numa": numa, "rails": rails, "device_deviations": dev_flags,
           "failed_checks": [{"id": k, "expected": v.get("expected"), "found": v.get("found"), "hint": v.get("hint")}
                             for k, v in failed.items()]}
    if extra:
        out["bandwidth_ok"] = extra.get("ok")
    return out


def _weights(d: dict) -> dict:
    f = d.get("fetch") if isinstance(d.get("fetch"), dict) else {}
    v = f.get("verify") if isinstance(f.get("verify"), dict) else {}
    hashed, secs = v.get("hashed_bytes"), v.get("seconds")
    rate = round(hashed / secs / 1e6, 1) if isinstance(hashed, (int, float)) and secs else None
    fetched = f.get("fetched_bytes")
    fsecs = f.get("fetch_seconds")
    # verified this run: what was on disk (hashed before fetching) + what arrived (hashed on arrival)
    verified = sum(x for x in (hashed, fetched) if isinstance(x, (int, float))) if f else None
    return {"source": d.get("source") or f.get("source"), "action": d.get("action"),
            "fetched_bytes": fetched, "fetched_files": len(f.get("fetched") or []),
            "fetch_seconds": fsecs,
            "fetch_mb_s": round(fetched / fsecs / 1e6, 1) if fetched and fsecs else None,
            "waited_s": f.get("waited_seconds"),
            "verified_bytes": verified, "verify_seconds": secs, "verify_mb_s": rate,
            "refetched": len(f.get("refetched") or [])}


def _serve(deployment: dict | None, serve: dict[str, dict]) -> dict:
    order = []
    for host, h in ((deployment or {}).get("hosts") or {}).items():
        for s in ((h or {}).get("plan") or {}).get("services") or []:
            if isinstance(s, dict):
                order.append({"order": s.get("order"), "host": host, "service": s.get("name"),
                              "kind": s.get("kind")})
    order.sort(key=lambda r: (r["order"] if isinstance(r["order"], (int, float)) else 1e9, r["host"], str(r["service"])))
    healthy = {}
    for host, d in serve.items():
        # the compile cache before the start, per service (roles/serve/tasks/report.yml; older records: none)
        caches = d.get("compile_cache") if isinstance(d.get("compile_cache"), dict) else {}
        # seconds from the service's start to healthy, where the health wait knew the start (llmb_service_ready)
        since = d.get("since_start_s") if isinstance(d.get("since_start_s"), dict) else {}
        for r in d.get("healthy") or []:  # [service, seconds] (roles/serve/tasks/report.yml) or a dict
            if isinstance(r, (list, tuple)) and len(r) in (2, 3):
                r = {"service": r[0], "waited_s": r[1], **({"compile_cache": r[2]} if len(r) == 3 else {})}
            if isinstance(r, dict):
                cache = r.get("compile_cache") or caches.get(r.get("service"))
                from_start = since.get(r.get("service"))
                from_start = from_start if isinstance(from_start, (int, float)) and not isinstance(from_start, bool) else None
                healthy.setdefault(host, []).append({"service": r.get("service"), "waited_s": r.get("waited_s"),
                                                     "since_start_s": from_start,
                                                     "compile_cache": cache if isinstance(cache, str) else None})
    # every start recorded in this artifacts directory (llmbctl.serveresult.record_serve), per compile
    # cache state; a history that is not what the writer keeps shows nothing (the writer warned of it)
    starts = {}
    for host, d in serve.items():
        try:
            history = starthistory.check(d.get("starts") or [])
        except starthistory.HistoryError:
            continue
        if history:
            starts[host] = starthistory.summary(history)
    return {"start_order": order, "healthy": healthy, "starts": starts}


def _cache_note(compile_cache: Any) -> str:
    """' (compile cache cold)' after a time to healthy; nothing for a record without a cache state."""
    return f" (compile cache {compile_cache})" if compile_cache else ""


def healthy_text(waited_s: Any, compile_cache: Any = None, since_start_s: Any = None) -> str:
    """'healthy 255.3 s after its start (compile cache cold)' where the start is known (a group's rank 0 waits
    for every level before its health wait: the wait alone leaves its lead out), else 'healthy after 124.6 s'
    (the health wait); without a cache state (an older record), the time alone."""
    if since_start_s is not None:
        text = f"healthy {_fmt_s(since_start_s)} after its start"
    else:
        text = f"healthy after {_fmt_s(waited_s)}" if waited_s is not None else "healthy (time not recorded)"
    return text + _cache_note(compile_cache)


def healthy_lines(sv: dict) -> list[str]:
    """One line per health-checked service, in start order: 'llmb-vllm on node1: healthy after 124.6 s (compile
    cache cold)'; a host's services the start order does not name (no deployment document) after them."""
    rows = {(h, r["service"]): r for h, rs in sv["healthy"].items() for r in rs}
    return [f"{s} on {h}: {healthy_text(rows[(h, s)]['waited_s'], rows[(h, s)]['compile_cache'], rows[(h, s)].get('since_start_s'))}"
            for h, s in _start_keys(sv, rows)]


def starts_text(groups: list[dict]) -> str:
    """'cold 255.3 s (median of 2), warm 164.4 s (1 start)': a history's groups (starthistory.summary)."""
    return ", ".join(f"{g['compile_cache']} {_fmt_s(g['median_s'])} "
                     + (f"(median of {g['count']})" if g["count"] > 1 else "(1 start)") for g in groups)


def _start_keys(sv: dict, rows: Any) -> list[tuple[Any, Any]]:
    """(host, service) of ``rows`` in start order, those the start order does not name after them."""
    keys = [(r["host"], r["service"]) for r in sv["start_order"] if (r["host"], r["service"]) in rows]
    return list(dict.fromkeys(keys + sorted(rows, key=lambda k: (str(k[0]), str(k[1])))))


def starts_lines(sv: dict) -> list[str]:
    """One line per host and service with recorded starts, in start order: 'llmb-vllm on node1, starts
    recorded: cold 255.3 s (median of 2), warm 164.4 s (median of 2), peer 201.0 s (median of 2)'."""
    rows = {(h, r["service"]): r["groups"] for h, rs in (sv.get("starts") or {}).items() for r in rs}
    return [f"{s} on {h}, starts recorded: {starts_text(rows[(h, s)])}" for h, s in _start_keys(sv, rows)]


def _gates(records: dict[str, dict], key: str) -> list[dict]:
    """One row per run of every host's record, with the record's thresholds, reference and note (a
    record without runs but with a note, a gate that did not run, gives a row with the note only)."""
    out = []
    for host, d in records.items():
        runs = [r for r in d.get(key) or [] if isinstance(r, dict)]
        for r in runs:
            row = {"host": host, **r}
            for k in ("thresholds", "reference", "note"):  # the record's, unless the run has its own
                if isinstance(d.get(k), (dict, str)) and k not in row:
                    row[k] = d[k]
            out.append(row)
        if not runs and isinstance(d.get("note"), str):
            out.append({"host": host, "note": d["note"]})
    return out


REFUSED_TEXT = "stage 0 refused the inventory before any host was contacted"


def _refusal(dep: dict | None) -> list[dict] | None:
    """The problems stage 0 refused the inventory with (deployment.json planned: false), else None."""
    if not dep or dep.get("planned") is not False:
        return None
    problems = [p for p in dep.get("problems") or [] if isinstance(p, dict)]
    return problems or [{"check": "plan", "message": "the inventory could not be planned", "found": None,
                         "expected": None, "fix": None, "host": None}]


def problem_lines(p: dict) -> list[str]:
    """One problem of the refusal as the planner prints it (llmb.finding): [check] message, then found/expected/fix."""
    f = Finding.from_record({"check": None, **p})
    return [f.title()] + [f"{k}: {v}" for k, v in f.details()]


def _upgrade(run_dir: Path) -> dict | None:
    """upgrade.json of a run of `llmb up` / `llmb rollback` (llmbctl.console.upgrade): the plan diff's
    text, the groups and how each went, the message; None when there is none."""
    doc, _ = _read_json(run_dir / "upgrade.json") if (run_dir / "upgrade.json").exists() else (None, None)
    if not isinstance(doc, dict):
        return None
    return {"command": doc.get("command"), "diff_text": doc.get("diff_text") or [],
            "groups": doc.get("groups") or [], "message": doc.get("message")}


def _upgrade_lines(up: dict) -> list:
    lines = [str(line) for line in up.get("diff_text") or []]
    lines += [f"group {g.get('n')} ({', '.join(g.get('hosts') or [])}): {g.get('status', 'not reached')}"
              for g in up.get("groups") or []]
    return lines + ([str(up["message"])] if up.get("message") else [])


def drain_lines(stop: dict[str, dict]) -> list[str]:
    """What `llmb stop` did to the workers a router routes to, from its records (host -> stop/<host>.json):
    each drained worker with its wait and the requests it still ran when its service stopped (those the
    stop ended: 0 where the drain let them finish), or the workers stopped without a drain (--no-drain)."""
    out = []
    for host, d in sorted(stop.items()):
        for entry in d.get("drained") or []:
            url, secs, how, running = (list(entry) + [None] * 4)[:4]
            left = "unknown (no /get_load)" if running is None else str(running)
            out.append(f"drained:        {host} {url} out of rotation in {secs} s ({how}); "
                       f"requests still running at its stop: {left}")
        out += [f"not drained:    {host} {url} stopped with the requests it ran (--no-drain)"
                for url in d.get("not_drained") or []]
    return out


def collect(run_dir: Path, expect_stages: list[str] | None = None) -> dict:
    if not run_dir.is_dir():
        raise ReportError(f"report: no results directory {run_dir} (did any stage run?)")
    stages, extras = _load(run_dir)
    dep, _ = _read_json(run_dir / "deployment.json") if (run_dir / "deployment.json").exists() else (None, None)
    dep = dep if isinstance(dep, dict) else None
    if expect_stages is None:
        prev, _ = _read_json(run_dir / "report.json") if (run_dir / "report.json").exists() else (None, None)
        expect_stages = (prev or {}).get("expected_stages") if isinstance(prev, dict) else None
    present = [s for s in STAGE_ORDER if s in stages] + sorted(s for s in stages if s not in STAGE_ORDER)
    expected_stages = list(expect_stages) if expect_stages else present
    refused = _refusal(dep)
    # stage 0 refused the inventory: the stages that need the plan never contacted a host, so they are
    # not rows of "no result" per host; the refusal (every problem) is the result of the run
    expected = [] if refused is not None and not stages else expected_results(dep, expected_stages, stages)
    order = {s: i for i, s in enumerate(STAGE_ORDER)}
    all_stages = sorted(set(present) | set(expected_stages), key=lambda s: (order.get(s, 99), s))

    results: dict[str, dict[str, dict]] = {}
    failed = []
    for s in all_stages:
        for h, d in stages.get(s, {}).items():
            ok = d.get("ok", True) is not False
            results.setdefault(s, {})[h] = {"status": "ok" if ok else "failed",
                                            "duration_s": _duration(d, d.get("_mtime") or 0.0)}
            if not ok:
                bad = [str(c.get("id")) for c in d.get("checks") or [] if isinstance(c, dict) and c.get("ok") is False]
                why = d.get("error") or d.get("msg") or (f"checks failed: {', '.join(bad[:8])}" if bad else "failed")
                failed.append({"stage": s, "host": h, "why": str(why)[:300]})
    for s, h in expected:
        if h not in stages.get(s, {}):
            results.setdefault(s, {})[h] = {"status": MISSING, "duration_s": None}
            failed.append({"stage": s, "host": h,
                           "why": "no result: the host was unreachable or failed earlier in the stage"})
    failed.sort(key=lambda f: (order.get(f["stage"], 99), f["stage"], f["host"]))
    ok = bool(expected) and not failed and refused is None
    endpoint, answer = _smoke(stages.get("serve", {}))
    hosts = list((dep or {}).get("hosts") or {}) or sorted({h for hs in results.values() for h in hs})
    verify = stages.get("verify", {})
    return {
        "schema": 2,
        "run_id": run_dir.name,
        "ok": ok,
        "verdict": "OK" if ok else "FAILED",
        "expected_stages": expected_stages,
        "expected": len(expected),
        "refused": refused,
        "hosts": hosts if expected or stages else [],
        "failed": failed,
        "endpoint": endpoint,
        "smoke_answer": answer,
        "stages": {s: {h: r["status"] == "ok" for h, r in hs.items()} for s, hs in results.items()},
        "results": results,
        "topology": [_topology(h, verify[h], extras.get("verify", {}).get(f"{h}.bandwidth"))
                     for h in sorted(verify)],
        "weights": {h: _weights(d) for h, d in sorted(stages.get("weights", {}).items())},
        "serve": _serve(dep, stages.get("serve", {})),
        "bench": _gates(stages.get("bench", {}), "runs"),
        "accuracy": _gates(stages.get("accuracy", {}), "runs"),
        **({"control": control} if (control := _control_hosts(dep)) else {}),
        "upgrade": _upgrade(run_dir),
        **({"drains": drains} if (drains := drain_lines(stages.get("stop", {}))) else {}),
    }


def _control_hosts(dep: dict | None) -> list[str]:
    """The control nodes of the deployment (the PD router's host outside accel_nodes)."""
    return [n for n, h in ((dep or {}).get("hosts") or {}).items() if (h or {}).get("control")]


def _host_label(rep: dict, host: str) -> str:
    """A host's column title: a control node says so (it runs the router, not the accelerator stages)."""
    return f"{host} (control node: router)" if host in (rep.get("control") or []) else host


# ---------------------------------------------------------------------------------------------
# Markdown


def _fmt_s(v: Any) -> str:
    return "-" if v is None else f"{v:g} s"


def _fmt_bytes(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1000 or unit == "TB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1000.0
    return str(v)


def _cell(r: dict | None) -> str:
    if not r:
        return "-"
    word = {"ok": "ok", "failed": "FAILED", MISSING: "MISSING"}[r["status"]]
    return f"{word} ({r['duration_s']:g} s)" if r.get("duration_s") is not None else word


_NOT_FIGURES = {"host", "thresholds", "reference", "errors", "gate", "violations", "note", "log", "results_file"}


def _notes(rows: list[dict]) -> list[tuple[str, str]]:
    """(host, note) of bench/accuracy rows, once each (a subset's "reference does not apply", a gate
    that did not run)."""
    out: list[tuple[str, str]] = []
    for r in rows:
        if isinstance(r.get("note"), str) and (r["host"], r["note"]) not in out:
            out.append((r["host"], r["note"]))
    return out


def _figures(rows: list[dict]) -> list[tuple[str, str, str, str, str]]:
    """(host, figure, value, threshold, reference) rows of bench/accuracy runs."""
    out = []
    for r in rows:
        th = r.get("thresholds") or {}
        ref = r.get("reference") or {}
        for k, v in r.items():
            if k in _NOT_FIGURES or isinstance(v, (dict, list)):
                continue
            out.append((r["host"], k, str(v), str(th.get(k) or ""), str(ref.get(k) or "")))
    return out


def render_md(rep: dict) -> str:
    lines = [f"# llm-bringup run {rep['run_id']}", "", f"Verdict: **{rep['verdict']}**", ""]
    if rep.get("endpoint"):
        lines += [f"Endpoint: {rep['endpoint']}", f"Smoke answer: {rep.get('smoke_answer')!r}", ""]
    if rep.get("refused"):
        lines += [f"Refused: {REFUSED_TEXT}, with {len(rep['refused'])} problem(s):", ""]
        for i, prob in enumerate(rep["refused"], 1):
            first, *rest = problem_lines(prob)
            lines.append(f"{i}. {first}")
            lines += [f"   - {r}" for r in rest]
        lines.append("")
    if rep["failed"]:
        lines.append("Failed or missing:")
        lines += [f"- {f['stage']} on {f['host']}: {f['why']}" for f in rep["failed"]]
        lines.append("")
    hosts = rep["hosts"]
    if hosts:
        lines.append("| stage | " + " | ".join(_host_label(rep, h) for h in hosts) + " |")
        lines.append("|---|" + "---|" * len(hosts))
        for s, hs in rep["results"].items():
            lines.append(f"| {s} | " + " | ".join(_cell(hs.get(h)) for h in hosts) + " |")
        lines.append("")
    for t in rep["topology"]:
        lines.append(f"Topology {t['host']}: {len(t['devices'])} devices, links "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(t["link_counts"].items()))
                     + f"; NUMA {', '.join(f'{n}: {len(d)}' for n, d in t['numa'].items())}"
                     + f"; deviations: {len(t['failed_checks'])}")
    if rep["topology"]:
        lines.append("")
    if rep["weights"]:
        lines += ["| weights | source | fetched | fetch MB/s | verified | verify MB/s |", "|---|---|---|---|---|---|"]
        for h, w in rep["weights"].items():
            lines.append(f"| {h} | {w['source'] or '-'} | {_fmt_bytes(w['fetched_bytes'])} | {w['fetch_mb_s'] or '-'} | "
                         f"{_fmt_bytes(w['verified_bytes'])} | {w['verify_mb_s'] or '-'} |")
        lines.append("")
    for title, key in (("bench", "bench"), ("accuracy", "accuracy")):
        rows = _figures(rep[key])
        if rows:
            lines += [f"| {title} | figure | value | threshold | reference |", "|---|---|---|---|---|"]
            lines += [f"| {h} | {k} | {v} | {t or '-'} | {r or '-'} |" for h, k, v, t, r in rows]
            lines.append("")
        notes = _notes(rep[key])
        if notes:
            lines += [f"{title} note ({h}): {n}" for h, n in notes]
            lines.append("")
    serve_lines = healthy_lines(rep["serve"]) + starts_lines(rep["serve"])
    if serve_lines:
        lines += ["Serve:", *[f"- {line}" for line in serve_lines], ""]
    if rep.get("upgrade"):
        lines += ["## Plan diff and groups (upgrade.md)", "", "```", *_upgrade_lines(rep["upgrade"]), "```", ""]
    if rep.get("drains"):
        lines += ["## Workers a router routes to (llmb stop)", "", "```", *rep["drains"], "```", ""]
    lines += ["Per-host results: `<stage>/<host>.json` beside this file; the picture: `report.html`.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# HTML (self-contained: inline CSS, no script, nothing fetched)

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:.25em .5em;font-size:.9em}
th{background:#f0f0f0}.verdict{font-size:1.6em;font-weight:bold;padding:.3em .8em;display:inline-block}
.OK{background:#c8efc8;color:#135213}.FAILED{background:#f6c6c6;color:#7a1010}
td.ok{background:#e3f6e3}td.failed,td.missing{background:#f6c6c6;font-weight:bold}
td.pair{text-align:center;font-family:monospace}td.self{background:#ddd;text-align:center}
td.dev{background:#ff9e9e;font-weight:bold;outline:2px solid #c00}td.nv{background:#cfe3ff}td.sys{background:#fff}
.numa{display:inline-block;border:1px solid #888;margin:.3em;padding:.3em;border-radius:4px}
.dev-chip{display:inline-block;border:1px solid #557;padding:0 .3em;margin:.1em;font-family:monospace}
.dev-chip.bad{background:#ff9e9e;border-color:#c00}.small{color:#666;font-size:.85em}
"""


def _e(v: Any) -> str:
    return html.escape("-" if v is None else str(v))


def _link_class(link: Any) -> str:
    s = str(link or "")
    if s.startswith(("NV", "HCCS", "XGMI", "SIO")):
        return "nv"
    return "sys"


def _html_matrix(t: dict) -> list[str]:
    names = t["devices"]
    by = {(c["a"], c["b"]): c for c in t["cells"]}
    out = [f'<table class="matrix" id="matrix-{_e(t["host"])}"><tr><th></th>'
           + "".join(f"<th>{_e(n)}</th>" for n in names) + "</tr>"]
    for a in names:
        row = [f"<tr><th>{_e(a)}</th>"]
        for b in names:
            if a == b:
                row.append('<td class="self">X</td>')
                continue
            c = by.get((a, b), {"link": None, "deviation": False, "expected": None})
            cls = "pair dev" if c["deviation"] else f"pair {_link_class(c['link'])}"
            title = f"{a}-{b}: {c['link']}" + (f" (expected {c['expected']})" if c["deviation"] else "")
            row.append(f'<td class="{cls}" data-pair="{_e(a)}-{_e(b)}" title="{_e(title)}">{_e(c["link"])}</td>')
        out.append("".join(row) + "</tr>")
    out.append("</table>")
    return out


def render_html(rep: dict) -> str:
    p = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
         f"<title>llm-bringup run {_e(rep['run_id'])}: {_e(rep['verdict'])}</title>",
         f"<style>{_CSS}</style></head><body>",
         f"<h1>llm-bringup run {_e(rep['run_id'])}</h1>",
         f'<div id="verdict" class="verdict {_e(rep["verdict"])}">Verdict: {_e(rep["verdict"])}</div>',
         f'<p class="small">{rep["expected"]} expected results (stages: {_e(", ".join(rep["expected_stages"]))}); '
         "a missing result counts as failed.</p>"]
    if rep.get("endpoint"):
        p.append(f"<p>Endpoint: <code>{_e(rep['endpoint'])}</code><br>Smoke answer: {_e(rep.get('smoke_answer'))}</p>")
    if rep.get("refused"):
        p.append(f'<h2>Refused</h2><p id="refused-why">{_e(REFUSED_TEXT)}; no stage ran. '
                 f"{len(rep['refused'])} problem(s):</p><ol id=\"refused\">")
        for prob in rep["refused"]:
            first, *rest = problem_lines(prob)
            p.append(f'<li class="problem"><b>{_e(first)}</b>'
                     + "".join(f"<br><span class=\"small\">{_e(r)}</span>" for r in rest) + "</li>")
        p.append("</ol>")
    if rep["failed"]:
        p.append('<h2>Failed or missing</h2><ul id="failed">')
        p += [f"<li><b>{_e(f['stage'])}</b> on <b>{_e(f['host'])}</b>: {_e(f['why'])}</li>" for f in rep["failed"]]
        p.append("</ul>")
    hosts = rep["hosts"]
    if rep["results"] or not rep.get("refused"):
        p.append('<h2>Stages</h2><table id="stages"><tr><th>stage</th>'
                 + "".join(f"<th>{_e(_host_label(rep, h))}</th>" for h in hosts) + "</tr>")
        for s, hs in rep["results"].items():
            cells = []
            for h in hosts:
                r = hs.get(h)
                cls = r["status"] if r else ""
                cells.append(f'<td class="{cls}">{_e(_cell(r))}</td>')
            p.append(f"<tr><th>{_e(s)}</th>{''.join(cells)}</tr>")
        p.append("</table>")

    for t in rep["topology"]:
        p.append(f"<h2>Topology: {_e(t['host'])}</h2>")
        p.append(f'<p class="small">platform {_e(t["platform"])}, vendor {_e(t["vendor"])}, driver {_e(t["driver"])}; '
                 + "links: " + _e(", ".join(f"{k} x{v}" for k, v in sorted(t["link_counts"].items()))) + "</p>")
        p += _html_matrix(t)
        p.append("<div><b>NUMA nodes</b><br>")
        for node, devs in t["numa"].items():
            chips = "".join(f'<span class="dev-chip{" bad" if d in t["device_deviations"] else ""}">{_e(d)}</span>'
                            for d in devs)
            p.append(f'<span class="numa">node {_e(node)}: {chips}</span>')
        p.append("</div>")
        if t["rails"]:
            p.append("<table><tr><th>NIC rail</th><th>devices behind the same PCIe switch</th></tr>")
            p += [f"<tr><td>{_e(r['nic'])}</td><td>{_e(', '.join(r['devices']) or 'none')}</td></tr>" for r in t["rails"]]
            p.append("</table>")
        if t["failed_checks"]:
            p.append('<table class="deviations"><tr><th>deviation</th><th>expected</th><th>found</th><th>fix</th></tr>')
            p += [f'<tr><td class="dev">{_e(c["id"])}</td><td>{_e(c["expected"])}</td><td>{_e(c["found"])}</td>'
                  f"<td>{_e(c['hint'])}</td></tr>" for c in t["failed_checks"]]
            p.append("</table>")

    if rep["weights"]:
        p.append('<h2>Weights</h2><table id="weights"><tr><th>host</th><th>source</th><th>fetched</th><th>files</th>'
                 "<th>fetch MB/s</th><th>verified</th><th>verify MB/s</th><th>refetched</th></tr>")
        for h, w in rep["weights"].items():
            p.append(f"<tr><td>{_e(h)}</td><td>{_e(w['source'])}</td><td>{_e(_fmt_bytes(w['fetched_bytes']))}</td>"
                     f"<td>{_e(w['fetched_files'])}</td><td>{_e(w['fetch_mb_s'])}</td>"
                     f"<td>{_e(_fmt_bytes(w['verified_bytes']))}</td><td>{_e(w['verify_mb_s'])}</td>"
                     f"<td>{_e(w['refetched'])}</td></tr>")
        p.append("</table>")

    sv = rep["serve"]
    if sv["start_order"]:
        p.append('<h2>Serve</h2><table id="serve"><tr><th>level</th><th>host</th><th>service</th><th>kind</th>'
                 "<th>time to healthy</th></tr>")
        waits = {(h, r["service"]): r for h, rs in sv["healthy"].items() for r in rs}
        for r in sv["start_order"]:
            w = waits.get((r["host"], r["service"])) or {}
            t = (f"{_fmt_s(w['since_start_s'])} from its start" if w.get("since_start_s") is not None
                 else _fmt_s(w["waited_s"]) if w.get("waited_s") is not None else None)
            t = t + _cache_note(w.get("compile_cache")) if t else None
            p.append(f"<tr><td>{_e(r['order'])}</td><td>{_e(r['host'])}</td><td>{_e(r['service'])}</td>"
                     f"<td>{_e(r['kind'])}</td><td>{_e(t)}</td></tr>")
        p.append("</table>")
    history = {(h, r["service"]): r["groups"] for h, rs in (sv.get("starts") or {}).items() for r in rs}
    if history:
        p.append('<h2>Serve: starts recorded</h2><table id="serve-starts"><tr><th>host</th><th>service</th>'
                 "<th>compile cache before the start</th><th>median time to healthy</th><th>starts</th></tr>")
        for h, s in _start_keys(sv, history):
            p += [f"<tr><td>{_e(h)}</td><td>{_e(s)}</td><td>{_e(g['compile_cache'])}</td>"
                  f"<td>{_e(_fmt_s(g['median_s']))}</td><td>{_e(g['count'])}</td></tr>" for g in history[(h, s)]]
        p.append("</table>")

    for title, key in (("Bench", "bench"), ("Accuracy", "accuracy")):
        rows = _figures(rep[key])
        notes = _notes(rep[key])
        if not rows and not notes:
            continue
        p.append(f"<h2>{title}</h2>")
        if rows:
            p.append(f'<table id="{key}"><tr><th>host</th><th>figure</th><th>value</th>'
                     "<th>threshold</th><th>recipe reference</th></tr>")
            p += [f"<tr><td>{_e(h)}</td><td>{_e(k)}</td><td>{_e(v)}</td><td>{_e(t or None)}</td><td>{_e(r or None)}</td></tr>"
                  for h, k, v, t, r in rows]
            p.append("</table>")
        p += [f'<p class="note" id="{key}-note-{_e(h)}"><b>{_e(h)}</b>: {_e(n)}</p>' for h, n in notes]
    if rep.get("upgrade"):
        p.append('<h2>Plan diff and groups</h2><pre id="upgrade">')
        p += [_e(line) for line in _upgrade_lines(rep["upgrade"])]
        p.append("</pre>")
    if rep.get("drains"):
        p.append('<h2>Workers a router routes to (llmb stop)</h2><pre id="drains">')
        p += [_e(line) for line in rep["drains"]]
        p.append("</pre>")
    p.append('<p class="small">Per-host results: <code>&lt;stage&gt;/&lt;host&gt;.json</code> beside this file.</p>')
    p.append("</body></html>\n")
    return "\n".join(p)


def write_report(run_dir: str, expect_stages: list[str] | None = None) -> dict:
    rd = Path(run_dir)
    rep = collect(rd, expect_stages)
    atomic_write_text(rd / "report.json", json.dumps(rep, indent=2) + "\n")
    atomic_write_text(rd / "report.md", render_md(rep))
    atomic_write_text(rd / "report.html", render_html(rep))
    return rep
