"""The one writer of per-host stage results: <artifacts>/<stage>/<host>.json (read by llmb.report).

Every stage records through here: the llmb_record action (engine, weights, ssh_mesh, serve, bench)
and the verify action (verify/<host>.json). Controller side, stdlib only.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from .fsutil import atomic_write_text

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


def record(artifacts_dir: str, stage: str, host: str, data: dict | None = None, suffix: str = "") -> str:
    """Write a host's result of a stage: {host, stage, ok: true} updated with data. Returns the path."""
    doc: dict[str, Any] = {"host": str(host), "stage": str(stage), "ok": True}
    doc.update(data or {})
    path = result_path(artifacts_dir, stage, host, suffix)
    write_json(path, doc)
    return path
