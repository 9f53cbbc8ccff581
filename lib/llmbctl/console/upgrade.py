"""`llmb up` on a cluster that was brought up before, `llmb up --check`, `llmb rollback` (issue 27, 2-3).

    llmb up -i INV --check            site.yml in check mode; then the plan diff against the deployment
                                      applied last (per host and service: engine, packages, weights,
                                      argv, environment, units); nothing moves. Exit 0 / 1 / 2 as up.
    llmb up -i INV                    no applied lock yet: site.yml as before. Else group by group:
                                      stages 0-4 on every host (the new engine release installs beside
                                      the running one), then the serve stage one serving group at a
                                      time in plan order (llmbctl.upgrade.groups), each healthy (the
                                      serve stage's health and smoke test) before the next; the first
                                      group that is not stops the run with the rollback command; then
                                      bench, accuracy and the report.
    llmb rollback -i INV [--to N]     the same stages with the deployment of lock history entry N
                                      (-e llmb_rollback_to=N: stage 0 loads it, nothing is planned anew)
    llmb rollback -i INV --list       the entries (number, when, run, engine, model commit)

A run whose serve stage succeeded everywhere is recorded in the lock history (llmbctl.lockhistory).
The diff, the groups and how each went are in artifacts/<run>/upgrade.{json,md} and the run's report.
Exit status: 0 applied (verdict OK), 1 failed or stopped at a group, 2 bad input or refused by stage 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from llmb.fsutil import atomic_write_text
from llmb.report import PIPELINE_STAGES, write_report

from .. import lockhistory as H
from .. import upgrade as U

BEFORE_SERVE = ["playbooks/preflight.yml", "playbooks/verify.yml", "playbooks/engine.yml", "playbooks/weights.yml",
                "playbooks/ssh_mesh.yml"]
BEFORE_SERVE_STAGES = ["verify", "engine", "weights", "ssh_mesh"]
AFTER_SERVE = ["playbooks/bench.yml", "playbooks/accuracy.yml", "playbooks/report.yml"]


def add_parsers(sub, run_id_default: str | None) -> None:
    sp = sub.add_parser("rollback", help="re-apply an earlier applied lock (llmb.lock.history/) through the stages")
    sp.add_argument("-i", "--inventory", required=True)
    sp.add_argument("-e", "--extra-vars", action="append", default=[], metavar="NAME=VALUE")
    sp.add_argument("--run-id", default=run_id_default)
    sp.add_argument("--to", type=int, metavar="N", help="the entry to go back to (default: the newest one that is "
                    "not what the last run tried)")
    sp.add_argument("--list", action="store_true", help="list the entries and exit")
    sp.add_argument("--check", action="store_true", help="dry run: show the diff and what would change")


def _out(text: str = "") -> None:
    print(text, flush=True)


def _doc(run_dir: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((run_dir / "deployment.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("planned") else None


def _write_record(run_dir: Path, record: dict[str, Any]) -> None:
    atomic_write_text(run_dir / "upgrade.json", json.dumps(record, indent=2) + "\n")
    atomic_write_text(run_dir / "upgrade.md", "\n".join(record_lines(record)) + "\n")


def record_lines(record: dict[str, Any]) -> list[str]:
    """The upgrade section of a run, as text (upgrade.md; the report shows the same)."""
    lines = [f"# {record['command']}", ""]
    lines += record.get("diff_text") or []
    for g in record.get("groups") or []:
        lines.append(f"group {g['n']} ({', '.join(g['hosts'])}): {g.get('status', 'not reached')}")
    if record.get("message"):
        lines += ["", record["message"]]
    return lines


def _show_diff(run_dir: Path, inv_dir: Path, new: dict[str, Any], command: str,
               old: dict[str, Any] | None = None, old_label: str | None = None) -> dict[str, Any]:
    if old is None:
        last = H.latest(inv_dir)
        old = last["deployment"] if last else None
        old_label = f"applied lock {last['n']}" if last else "nothing applied"
    d = U.diff(old, new)
    text = U.render(d, old_label or "applied", "this run")
    _out()
    for line in text:
        _out(line)
    record = {"command": command, "diff": d, "diff_text": text, "groups": d["groups"], "message": None}
    _write_record(run_dir, record)
    return record


def check(run_playbook, inv: str, extra: list[str], run_id: str, root: Path, title: str) -> int:
    """llmb up --check (and rollback --check): the dry run, then the diff."""
    rc = run_playbook("site.yml", inv, extra, run_id, PIPELINE_STAGES, title, options=["--check", "--diff"])
    run_dir = root / "artifacts" / run_id
    new = _doc(run_dir)
    if new is not None:
        record = _show_diff(run_dir, H.inventory_dir_of(inv), new, title)
        for g in record["groups"]:
            g["status"] = "check mode, not applied"
        _write_record(run_dir, record)
        write_report(str(run_dir), PIPELINE_STAGES)
        _out(f"plan diff:      {run_dir / 'upgrade.md'}")
    return rc


def staged(run_playbook, inv: str, extra: list[str], run_id: str, root: Path, title: str, how: str) -> int:
    """Stages 0-4 everywhere, serve group by group with health between, then 6-8 (see the module doc)."""
    inv_dir = H.inventory_dir_of(inv)
    before = H.latest(inv_dir)
    run_dir = root / "artifacts" / run_id
    rc = run_playbook(BEFORE_SERVE, inv, extra, run_id, BEFORE_SERVE_STAGES, f"{title}: stages 0-4")
    new = _doc(run_dir)
    if rc != 0 or new is None:
        return rc or 2
    record = _show_diff(run_dir, inv_dir, new, title)
    groups = record["groups"]
    back = f"llmb rollback -i {inv} --to {before['n']}" if before else None
    H.write_attempt(inv_dir, run_id, new.get("hash"), False, how)
    for g in groups:
        limit = ",".join([*g["hosts"], "localhost"])
        _out(f"\ngroup {g['n']} of {len(groups)}: {', '.join(g['hosts'])}")
        grc = run_playbook("playbooks/serve.yml", inv, extra, run_id, None, f"{title}: serve group {g['n']}",
                           options=["--limit", limit], ident=f"{run_id}-serve-g{g['n']}", report=False)
        g["status"] = "healthy" if grc == 0 else "NOT HEALTHY"
        if grc != 0:
            done = [h for x in groups if x["n"] < g["n"] for h in x["hosts"]]
            left = [h for x in groups if x["n"] > g["n"] for h in x["hosts"]]
            msg = (f"{how} stopped at group {g['n']} ({', '.join(g['hosts'])}): not healthy after the serve stage; "
                   f"groups before it run the new plan ({', '.join(done) or 'none'}), the groups after it were not "
                   f"touched ({', '.join(left) or 'none'}).")
            msg += f" Roll back: {back}" if back else " No earlier applied lock to roll back to."
            record["message"] = msg
            _write_record(run_dir, record)
            H.write_attempt(inv_dir, run_id, new.get("hash"), False, how, failed_group=g["n"])
            write_report(str(run_dir), PIPELINE_STAGES)
            _out(f"\n{msg}")
            _out(f"report:         {run_dir / 'report.html'}")
            return 1
        _write_record(run_dir, record)
    rc = run_playbook(AFTER_SERVE, inv, extra, run_id, PIPELINE_STAGES, f"{title}: stages 6-8",
                      ident=f"{run_id}-finish")
    n, _new = H.record(inv_dir, new, run_id, how)
    H.write_attempt(inv_dir, run_id, new.get("hash"), rc == 0, how)
    record["message"] = f"applied: lock history entry {n}" + (f" (before: {before['n']}; back: {back})" if back else "")
    _write_record(run_dir, record)
    write_report(str(run_dir), PIPELINE_STAGES)
    _out(record["message"])
    return rc


def up(run_playbook, inv: str, extra: list[str], run_id: str, root: Path, title: str, check_mode: bool) -> int:
    inv_dir = H.inventory_dir_of(inv)
    if check_mode:
        return check(run_playbook, inv, extra, run_id, root, title)
    if H.latest(inv_dir) is None:  # first bring-up: every stage in one run, then the first entry
        rc = run_playbook("site.yml", inv, extra, run_id, PIPELINE_STAGES, title)
        doc = _doc(root / "artifacts" / run_id)
        if doc is not None and _serve_ok(root / "artifacts" / run_id, doc):
            n, _ = H.record(inv_dir, doc, run_id, "up")
            H.write_attempt(inv_dir, run_id, doc.get("hash"), rc == 0, "up")
            _out(f"applied: lock history entry {n}")
        return rc
    return staged(run_playbook, inv, extra, run_id, root, title, "upgrade")


def _serve_ok(run_dir: Path, doc: dict[str, Any]) -> bool:
    """Every host with services has a serve result that is ok."""
    for host, entry in (doc.get("hosts") or {}).items():
        if not ((entry or {}).get("plan") or {}).get("services"):
            continue
        try:
            res = json.loads((run_dir / "serve" / f"{host}.json").read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(res, dict) or res.get("ok") is False:
            return False
    return True


def rollback(run_playbook, a, inv: str, extra: list[str], run_id: str, root: Path) -> int:
    inv_dir = H.inventory_dir_of(inv)
    if a.list:
        rows = H.summary(inv_dir)
        if not rows:
            _out(f"no applied lock in {H.history_dir(inv_dir)}")
        for r in rows:
            _out(f"{r['n']:>4}  {r['applied_at']}  {r['how']:<8}  {r['engine']:<16}  model {str(r['model_commit'])[:12]}  "
                 f"run {r['run_id']}")
        return 0
    if a.to is not None and a.to < 1:
        raise H.HistoryError(f"--to {a.to}: an entry number is 1 or more (llmb rollback -i {inv} --list)")
    n = a.to if a.to is not None else H.default_target(inv_dir)
    entry = H.load(inv_dir, n)
    title = f"llmb rollback --to {n} {run_id}"
    extra = [*extra, f"llmb_rollback_to={n}"]
    if a.check:
        return check(run_playbook, inv, extra, run_id, root, title)
    _out(f"rolling back to lock history entry {n} (applied {entry.get('applied_at')}, run {entry.get('run_id')}, "
         f"{(entry['deployment'].get('engine') or {}).get('name')} {(entry['deployment'].get('engine') or {}).get('version')})")
    return staged(run_playbook, inv, extra, run_id, root, title, "rollback")


def fail(msg: str) -> int:
    print(f"llmb: {msg}", file=sys.stderr)
    return 2
