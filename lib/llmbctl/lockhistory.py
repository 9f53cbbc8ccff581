"""Every lock that was applied, kept beside the inventory's lock file (controller side).

    <inventory>/llmb.lock.json                  the pins of the deployment now (llmbctl.pins)
    <inventory>/llmb.lock.history/0001.json     one entry per applied deployment, numbered from 1
    <inventory>/llmb.lock.history/attempt.json  the last `llmb up` / `llmb rollback` that moved the cluster

An entry holds what the cluster was given when that lock was current::

    {"schema": 1, "n": 3, "applied_at": "...Z", "run_id": "...", "how": "up" | "rollback",
     "lock": {...llmb.lock.json...}, "deployment": {...deployment.json, run left out...}}

so that ``llmb rollback --to N`` re-applies exactly that document (stage 0 loads it instead of
planning: llmbctl.deployment.build with llmb_rollback_to), giving the same argv and units byte for
byte. Entries are written once, atomically (a temporary file linked to its number: two writers never
share a number), and never rewritten; an apply whose document and lock equal the newest entry's adds
none (a rollback to the newest entry adds none; to an older one, a new entry, so the history reads in
the order things ran). The console records an entry after a run whose serve stage succeeded everywhere.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from llmb.fsutil import atomic_write_text, fsync_dir

from .pins import LOCK_NAME, PinError, lock_path, read_lock

HISTORY_DIR = "llmb.lock.history"
ATTEMPT = "attempt.json"
SCHEMA = 1
_ENTRY = re.compile(r"^([0-9]{4,9})\.json$")


class HistoryError(Exception):
    """The history cannot be read or has no such entry; the message names the file and the fix."""


def history_dir(inventory_dir: str | os.PathLike[str]) -> Path:
    return Path(inventory_dir) / HISTORY_DIR


def inventory_dir_of(inventory: str | os.PathLike[str]) -> Path:
    """Where the lock lives for ``-i INV``: the directory itself, or a hosts file's directory."""
    p = Path(inventory)
    return p if p.is_dir() else p.parent


def numbers(inventory_dir: str | os.PathLike[str]) -> list[int]:
    """The entry numbers, ascending ([] when there is no history)."""
    d = history_dir(inventory_dir)
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_ENTRY.match, names) if m)


def entry_path(inventory_dir: str | os.PathLike[str], n: int) -> Path:
    return history_dir(inventory_dir) / f"{int(n):04d}.json"


def load(inventory_dir: str | os.PathLike[str], n: int) -> dict[str, Any]:
    """Entry ``n``; HistoryError naming the entries there are when it is missing or not an entry."""
    path = entry_path(inventory_dir, n)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        have = numbers(inventory_dir)
        raise HistoryError(
            f"no applied lock {n} in {history_dir(inventory_dir)} (entries: "
            f"{', '.join(map(str, have)) if have else 'none; nothing was applied through llmb up yet'})"
        ) from None
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{path}: not a readable JSON entry ({exc}); restore it from version control") from None
    if not isinstance(doc, dict) or doc.get("n") != n or not isinstance(doc.get("deployment"), dict) \
            or not isinstance(doc.get("lock"), dict):
        raise HistoryError(f"{path}: not a lock history entry (expected n={n}, lock and deployment)")
    return doc


def latest(inventory_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    have = numbers(inventory_dir)
    return load(inventory_dir, have[-1]) if have else None


def document_body(doc: dict[str, Any]) -> dict[str, Any]:
    """The deployment document as an entry keeps it: without the run (id, artifacts directory)."""
    return {k: v for k, v in doc.items() if k != "run"}


def _same(entry: dict[str, Any] | None, lock: dict[str, Any], doc: dict[str, Any]) -> bool:
    """The same lock and the same document content (its hash: all but the run and where pins came from)."""
    return bool(entry) and entry["lock"] == lock and entry["deployment"].get("hash") == doc.get("hash") \
        and doc.get("hash") is not None


def record(
    inventory_dir: str | os.PathLike[str], doc: dict[str, Any], run_id: str, how: str = "up",
    lock: dict[str, Any] | None = None,
) -> tuple[int, bool]:
    """Record an applied deployment: (its entry number, whether a new entry was written).

    ``lock``: the lock that was current (default: llmb.lock.json as it is now)."""
    if lock is None:
        try:
            lock = read_lock(lock_path(inventory_dir))
        except PinError as err:
            raise HistoryError(err.problem.message) from None
    last = latest(inventory_dir)
    if _same(last, lock, doc):
        return int(last["n"]), False
    d = history_dir(inventory_dir)
    d.mkdir(parents=True, exist_ok=True)
    n = (numbers(inventory_dir) or [0])[-1] + 1
    while True:
        entry = {"schema": SCHEMA, "n": n, "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "run_id": run_id, "how": how, "lock": lock, "deployment": document_body(doc)}
        fd, tmp = tempfile.mkstemp(dir=str(d), prefix=".entry.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, indent=2, sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            try:
                os.link(tmp, entry_path(inventory_dir, n))  # never over an existing number
            except FileExistsError:
                n += 1
                continue
        finally:
            os.unlink(tmp)
        fsync_dir(d)
        return n, True


def write_attempt(inventory_dir: str | os.PathLike[str], run_id: str, doc_hash: str | None, ok: bool,
                  how: str, failed_group: int | None = None) -> None:
    """What the last run that moved the cluster tried (the default of ``llmb rollback``)."""
    atomic_write_text(history_dir(inventory_dir) / ATTEMPT, json.dumps(
        {"run_id": run_id, "hash": doc_hash, "ok": bool(ok), "how": how, "failed_group": failed_group},
        indent=2, sort_keys=True) + "\n")


def read_attempt(inventory_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        doc = json.loads((history_dir(inventory_dir) / ATTEMPT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def default_target(inventory_dir: str | os.PathLike[str]) -> int:
    """The entry ``llmb rollback`` goes back to without --to: the newest entry whose document is not
    the one the last run tried (after a failed upgrade: the last good one; after a good one: the one
    before it). HistoryError when there is none."""
    have = numbers(inventory_dir)
    if not have:
        raise HistoryError(f"no applied lock in {history_dir(inventory_dir)}: nothing to roll back to "
                           "(entries are written by llmb up after a successful serve stage)")
    attempt = read_attempt(inventory_dir) or {}
    tried = attempt.get("hash")
    for n in reversed(have):
        if tried is None and n == have[-1]:
            continue  # no record of the last run: the newest entry is what runs now
        if load(inventory_dir, n)["deployment"].get("hash") != tried:
            return n
    raise HistoryError(f"every entry in {history_dir(inventory_dir)} is the deployment running now; "
                       "name one with --to N")


def summary(inventory_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One line of facts per entry: n, applied_at, run_id, how, engine, model commit, hash."""
    out = []
    for n in numbers(inventory_dir):
        e = load(inventory_dir, n)
        dep = e["deployment"]
        eng = dep.get("engine") or {}
        out.append({"n": n, "applied_at": e.get("applied_at"), "run_id": e.get("run_id"), "how": e.get("how"),
                    "engine": f"{eng.get('name')} {eng.get('version')}",
                    "model_commit": (dep.get("model") or {}).get("commit"), "hash": dep.get("hash")})
    return out


__all__ = ["HISTORY_DIR", "LOCK_NAME", "HistoryError", "record", "load", "latest", "numbers", "default_target",
           "write_attempt", "read_attempt", "summary", "inventory_dir_of", "document_body", "entry_path"]
