"""Live state of a run from ansible-runner events: per stage x host a status and its duration,
per node the weights fetched (bytes, rate). Pure (no terminal, no runner): fed event dicts as
ansible-runner hands them to an event_handler (event, event_data{host, task, task_path,
task_action, res, duration}, created)."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field

from llmb.stages import ROLE_STAGE, STAGE_NAMES

STAGES = list(STAGE_NAMES)  # the console's columns: llmb.stages, the one stage table
_ROLE = re.compile(r"/roles/([^/]+)/")
_PLAYBOOK = re.compile(r"/playbooks/([A-Za-z0-9_]+)\.yml")
PENDING, RUNNING, OK, FAILED, UNREACHABLE = "pending", "running", "ok", "failed", "unreachable"


def stage_of(task_path: str) -> str | None:
    """The stage a task belongs to, from its file: roles/<role>/... or playbooks/<stage>.yml
    (_run.yml is stage 0, preflight; includes/ belong to the stage that includes them: None)."""
    m = _ROLE.search(task_path or "")
    if m:
        return ROLE_STAGE.get(m.group(1))
    m = _PLAYBOOK.search(task_path or "")
    if m:
        name = m.group(1)
        return "preflight" if name in ("_run", "preflight", "recover") else name if name in STAGES else None
    return None


def _ts(created: str | None) -> float | None:
    if not created:
        return None
    try:
        t = _dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=_dt.UTC)).timestamp()


@dataclass
class Cell:
    status: str = PENDING
    started: float | None = None
    last: float | None = None
    task: str = ""
    error: str = ""

    @property
    def seconds(self) -> float | None:
        return None if self.started is None or self.last is None else max(0.0, self.last - self.started)


@dataclass
class Weights:
    bytes: int = 0
    seconds: float | None = None
    source: str | None = None
    files: int = 0
    total: int | None = None  # bytes the node lacks (model_fetch's disk check), when known

    @property
    def rate(self) -> float | None:
        return self.bytes / self.seconds if self.seconds else None


@dataclass
class Progress:
    hosts: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    weights: dict[str, Weights] = field(default_factory=dict)
    stage: str | None = None
    ok: bool | None = None  # the playbook's own outcome (playbook_on_stats)
    # a day-two command (status, stop, start, collect): its tasks, whatever role they come from, are its column
    command: str | None = None

    def stage_of(self, task_path: str) -> str | None:
        stage = stage_of(task_path)
        return self.command if self.command and task_path and stage != "preflight" else stage

    def cell(self, stage: str, host: str) -> Cell:
        if host not in self.hosts and host != "localhost":
            self.hosts.append(host)
        return self.cells.setdefault((stage, host), Cell())

    def stages(self) -> list[str]:
        seen = {s for s, _ in self.cells}
        return [s for s in STAGES if s in seen] + sorted(seen - set(STAGES))

    def feed(self, ev: dict) -> None:
        kind = ev.get("event", "")
        data = ev.get("event_data") or {}
        now = _ts(ev.get("created"))
        if kind == "playbook_on_stats":
            bad = (data.get("failures") or {}) | (data.get("dark") or {})
            self.ok = not any(bad.values())
            return
        host = data.get("host")
        stage = self.stage_of(data.get("task_path") or "") or self.stage
        if kind == "playbook_on_task_start" and self.stage_of(data.get("task_path") or ""):
            new = self.stage_of(data["task_path"])
            if self.stage and new != self.stage:
                self.close_stage(self.stage)  # a stage ends where the next one starts
            self.stage = new
        if not host or not stage or not kind.startswith("runner_on_") or host == "localhost":
            return
        c = self.cell(stage, host)
        if c.started is None:
            c.started = now
        c.last = now or c.last
        c.task = str(data.get("task") or "")
        if kind == "runner_on_start":
            if c.status == PENDING:
                c.status = RUNNING
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            c.status, c.error = FAILED, str((data.get("res") or {}).get("msg") or "")[:500]
        elif kind == "runner_on_unreachable":
            c.status, c.error = UNREACHABLE, str((data.get("res") or {}).get("msg") or "")[:500]
        elif kind in ("runner_on_ok", "runner_on_skipped") and c.status in (PENDING, RUNNING):
            c.status = RUNNING if stage != "report" else OK
        if kind == "runner_on_ok" and data.get("task_action") in ("model_fetch", "llmb.model_fetch"):
            self._weights(host, data.get("res") or {})

    def _weights(self, host: str, res: dict) -> None:
        if res.get("manifest_only") or "fetched_bytes" not in res:
            return
        w = self.weights.setdefault(host, Weights())
        w.bytes = int(res.get("fetched_bytes") or 0)
        w.files = len(res.get("fetched") or [])
        w.seconds = res.get("fetch_seconds") or res.get("seconds")
        need = (res.get("disk") or {}).get("needed")
        w.total = int(need) if isinstance(need, (int, float)) else w.total

    def settle(self) -> None:
        """At the end of the run: what still runs finished its stage."""
        for c in self.cells.values():
            if c.status == RUNNING:
                c.status = OK

    def close_stage(self, stage: str) -> None:
        for (s, _h), c in self.cells.items():
            if s == stage and c.status == RUNNING:
                c.status = OK
