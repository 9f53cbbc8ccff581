"""Verify a model directory against a manifest, hashing files in parallel, with a record beside it.

    result = verify_dir(dest, manifest, workers=8)
    result["complete"], result["bad"], result["missing"], result["record"]

The record (``<dest>/.llmb-weights.json``) holds, per file, the size, mtime, SHA-256 (and git blob
id for non-LFS files) and when it was verified. A later run trusts a file whose size and mtime
still match its record entry and re-hashes only the others, so verifying a verified copy reads
nothing but directory metadata.

A file that ``json_patch`` edited in place (``config.json``) is verified through its pristine
copy ``<file>.orig``: the hub's hash is the original's.

Hashing: hashlib releases the GIL while it digests a buffer, so threads hash several files at
disk speed; each thread reads with ``readinto`` into one reusable buffer.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ..jsonpatch import atomic_write

RECORD_NAME = ".llmb-weights.json"
RECORD_FORMAT = 1
ORIG_SUFFIX = ".orig"
BUFSIZE = 8 * 1024 * 1024


def hash_file(path: str, git: bool = False, bufsize: int = BUFSIZE) -> dict:
    """{"size", "sha256"[, "git_oid"]} of the file; one pass over the data."""
    sha = hashlib.sha256()
    g = None
    buf = bytearray(bufsize)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if git:
            g = hashlib.sha1(b"blob %d\0" % size)
        total = 0
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            chunk = view[:n]
            sha.update(chunk)
            if g is not None:
                g.update(chunk)
            total += n
    out = {"size": total, "sha256": sha.hexdigest()}
    if g is not None:
        out["git_oid"] = g.hexdigest()
    return out


def default_workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 2
    return max(2, min(32, n))


def record_path(dest: str) -> str:
    return os.path.join(dest, RECORD_NAME)


def load_record(dest: str) -> dict | None:
    """The record, or None when absent or unreadable (an unreadable record only costs a re-hash)."""
    try:
        with open(record_path(dest), encoding="utf-8") as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT or not isinstance(rec.get("files"), dict):
        return None
    return rec


def save_record(dest: str, record: dict) -> None:
    atomic_write(record_path(dest), (json.dumps(record, indent=1, sort_keys=True) + "\n").encode(), mode=0o644)


def pristine(dest: str, rel: str) -> tuple[str, str]:
    """(absolute path, relative name) of the copy that carries the hub's content."""
    orig = os.path.join(dest, rel + ORIG_SUFFIX)
    if os.path.isfile(orig):
        return orig, rel + ORIG_SUFFIX
    return os.path.join(dest, rel), rel


def matches(entry: dict, digest: dict) -> bool:
    if entry.get("sha256"):
        return digest.get("sha256") == entry["sha256"]
    return digest.get("git_oid") == entry.get("git_oid")


def _expected_text(entry: dict) -> str:
    return f"sha256 {entry['sha256']}" if entry.get("sha256") else f"git blob {entry.get('git_oid')}"


def verify_dir(dest: str, manifest: dict, record: dict | None = None, workers: int | None = None,
               trust_record: bool = True, only: list[str] | None = None, now=time.time) -> dict:
    """Check every manifest file (or those in ``only``) under ``dest``.

    Returns {complete, ok, trusted, hashed, hashed_bytes, missing, bad: [{path, reason, expected,
    found}], record, seconds}. ``record`` is the new record (the old one's entries for files not
    looked at are kept); pass ``record=load_record(dest)`` to skip unchanged files."""
    t0 = time.monotonic()
    commit = manifest["commit"]
    old_files = {}
    if record and record.get("commit") == commit and record.get("repo_id") == manifest["repo_id"]:
        old_files = record.get("files") or {}
    wanted = [f for f in manifest["files"] if only is None or f["path"] in only]
    ok, trusted, missing, bad, to_hash = [], [], [], [], []
    new_files: dict[str, dict] = {}
    for entry in wanted:
        rel = entry["path"]
        path, used = pristine(dest, rel)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            missing.append(rel)
            continue
        if st.st_size != entry["size"]:
            bad.append({"path": rel, "reason": "size", "expected": entry["size"], "found": st.st_size,
                        "file": used})
            continue
        prev = old_files.get(rel)
        # a .orig made by json_patch keeps the original's size and mtime, so it matches its entry too
        if (trust_record and prev and prev.get("size") == st.st_size
                and prev.get("mtime_ns") == st.st_mtime_ns and matches(entry, prev)):
            trusted.append(rel)
            ok.append(rel)
            new_files[rel] = prev
            continue
        to_hash.append((entry, path, used, st))

    hashed_bytes = 0
    if to_hash:
        # largest first: the long hashes start early and the small ones fill the gaps
        to_hash.sort(key=lambda t: -t[0]["size"])
        n = min(workers or default_workers(), len(to_hash))

        def work(item):
            entry, path, _used, _st = item
            return hash_file(path, git=not entry.get("sha256"))

        if n <= 1:
            digests = [work(t) for t in to_hash]
        else:
            with ThreadPoolExecutor(max_workers=n) as ex:
                digests = list(ex.map(work, to_hash))
        stamp = now()
        for (entry, _path, used, st), d in zip(to_hash, digests, strict=True):
            rel = entry["path"]
            hashed_bytes += d["size"]
            if matches(entry, d):
                ok.append(rel)
                rec = {"file": used, "size": d["size"], "mtime_ns": st.st_mtime_ns, "sha256": d["sha256"],
                       "verified_at": round(stamp, 3)}
                if "git_oid" in d:
                    rec["git_oid"] = d["git_oid"]
                new_files[rel] = rec
            else:
                found = f"sha256 {d['sha256']}" if entry.get("sha256") else f"git blob {d.get('git_oid')}"
                bad.append({"path": rel, "reason": "hash", "expected": _expected_text(entry), "found": found,
                            "file": used})
    # keep entries of files this call did not look at (``only``), drop stale ones of looked-at files
    looked = {f["path"] for f in wanted}
    for rel, prev in old_files.items():
        if rel not in looked and rel not in new_files:
            new_files[rel] = prev
    new_record = make_record(manifest, new_files)
    complete = new_record["status"] == "complete" and not bad and not missing
    return {
        "complete": complete,
        "ok": sorted(ok),
        "trusted": sorted(trusted),
        "hashed": sorted(t[0]["path"] for t in to_hash),
        "hashed_bytes": hashed_bytes,
        "missing": sorted(missing),
        "bad": sorted(bad, key=lambda b: b["path"]),
        "record": new_record,
        "seconds": round(time.monotonic() - t0, 3),
    }


def make_record(manifest: dict, files: dict[str, dict]) -> dict:
    names = {f["path"] for f in manifest["files"]}
    complete = all(rel in files for rel in names)
    return {
        "format": RECORD_FORMAT,
        "repo_id": manifest["repo_id"],
        "commit": manifest["commit"],
        "manifest_digest": manifest.get("digest"),
        "status": "complete" if complete else "incomplete",
        "files": {k: files[k] for k in sorted(files) if k in names},
        "total_size": manifest.get("total_size"),
    }


def record_add(record: dict, manifest: dict, dest: str, digests: dict[str, dict], now=time.time) -> dict:
    """``record`` plus entries for files whose digests were computed elsewhere (on arrival)."""
    files = dict(record.get("files") or {})
    stamp = round(now(), 3)
    by_path = {f["path"]: f for f in manifest["files"]}
    for rel, d in digests.items():
        if not matches(by_path[rel], d):
            raise ValueError(f"{rel}: digest does not match the manifest")
        st = os.stat(os.path.join(dest, rel))
        entry = {"file": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": d["sha256"],
                 "verified_at": stamp}
        if d.get("git_oid"):
            entry["git_oid"] = d["git_oid"]
        files[rel] = entry
    return make_record(manifest, files)


def record_differs(old: dict | None, new: dict) -> bool:
    """Whether writing ``new`` would change the record on disk (ignoring nothing: it is small)."""
    if old is None:
        return True
    keys = ("format", "repo_id", "commit", "manifest_digest", "status", "files", "total_size")
    return any(old.get(k) != new.get(k) for k in keys)
