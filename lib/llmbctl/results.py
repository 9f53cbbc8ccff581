"""The one writer of per-host stage results: <artifacts>/<stage>/<host>.json (read by llmb.report).

Every stage records through here: the llmb_record action (engine, weights, ssh_mesh, serve, bench)
and the verify action (verify/<host>.json). Controller side, stdlib only.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from typing import Any

from llmb.fsutil import atomic_write_text

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+@-]{0,252}$")


class ResultError(ValueError):
    """A stage or host name that cannot name a file; the message names it."""


def _name(kind: str, value: str) -> str:
    value = str(value)
    if not _NAME.match(value) or value in (".", ".."):
        raise ResultError(
            f"result {kind} {value!r}: expected letters, digits and . _ : + @ - (a file name), "
            "found a path separator, space or other character"
        )
    return value


def result_path(artifacts_dir: str, stage: str, host: str, suffix: str = "") -> str:
    """<artifacts_dir>/<stage>/<host><suffix>.json"""
    return os.path.join(str(artifacts_dir), _name("stage", stage), f"{_name('host', host)}{suffix}.json")


def write_json(path: str, data: Any) -> None:
    """Write JSON atomically (llmb.fsutil: temp file in the same directory, then rename): no reader sees
    half a file."""
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def timing(started: str | None, now: datetime.datetime | None = None) -> dict:
    """{started, finished, duration_s} of a host's stage: `started` is the stage's start (ISO 8601,
    set by playbooks/_run.yml as llmb_stage_started), finished is now. A start that cannot be read
    gives only `finished` (the report then shows no duration rather than a wrong one)."""
    end = now or _utc_now()
    out: dict[str, Any] = {"finished": end.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
    if started:
        try:
            t0 = datetime.datetime.fromisoformat(str(started).replace("Z", "+00:00"))
        except ValueError:
            return out
        if t0.tzinfo is None:
            t0 = t0.replace(tzinfo=datetime.UTC)
        out["started"] = t0.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        out["duration_s"] = round(max(0.0, (end - t0).total_seconds()), 3)
    return out


def record(artifacts_dir: str, stage: str, host: str, data: dict | None = None, suffix: str = "",
           started: str | None = None) -> str:
    """Write a host's result of a stage: {host, stage, ok: true, finished[, started, duration_s]}
    updated with data. Returns the path."""
    doc: dict[str, Any] = {"host": str(host), "stage": str(stage), "ok": True}
    doc.update(timing(started))
    doc.update(data or {})
    path = result_path(artifacts_dir, stage, host, suffix)
    write_json(path, doc)
    return path
