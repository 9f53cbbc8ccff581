"""Copy weights from a node that already holds a verified copy, over HTTP on the cluster network.

The source node serves its model directory with the standard library's HTTP file server (a
transient systemd unit, ``llmb.weights.relay``, that the role starts and stops). A receiver waits until the source's record
(``.llmb-weights.json``) says complete for the same manifest, then pulls the files it lacks in
parallel, hashing each while it arrives: a file is moved into place only when its size and hash
match the manifest, so a half-copied or corrupt file never lands in the model directory.

For a file patched in place on the source (``config.json``) the pristine ``<file>.orig`` is
fetched when the source has one: the manifest's hash is the original's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

from .verify import ORIG_SUFFIX, RECORD_NAME

PARTIAL_DIR = ".llmb-partial"
BUFSIZE = 4 * 1024 * 1024
# how often a receiver asks its sources' records: a GET of a small file on the cluster network, and
# what each relay round can lose between a source's completion and its receiver's start
POLL_S = 0.2


class PeerError(Exception):
    pass


def _get(url: str, timeout: float):
    return urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": "llmb-weights"}), timeout=timeout)


def peer_record(base_url: str, timeout: float = 10.0) -> dict | None:
    try:
        with _get(f"{base_url.rstrip('/')}/{RECORD_NAME}", timeout) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def wait_ready(urls: list[str], digest: str, timeout: float, poll: float = POLL_S, sleep=time.sleep,
               since: float | None = None) -> float:
    """Block until every url's record is complete for ``digest``; returns seconds waited.

    A source whose record says ``failed`` at or after ``since`` (default: now, less a minute of
    clock skew) ends the wait at once; an older failure is a previous run's, still being retried."""
    t0 = time.monotonic()
    since = (time.time() - 60) if since is None else since
    pending = list(urls)
    last: dict[str, str] = {}
    while pending:
        for url in list(pending):
            rec = peer_record(url)
            if rec is None:
                last[url] = "not answering (server not started, or no record yet)"
                continue
            if (rec.get("status") == "failed" and rec.get("manifest_digest") in (digest, None)
                    and float(rec.get("failed_at") or 0) >= since):
                raise PeerError(f"source {url} failed to get the weights: {rec.get('error') or 'see its own result'}")
            if rec.get("status") == "complete" and rec.get("manifest_digest") == digest:
                pending.remove(url)
            else:
                last[url] = f"status {rec.get('status')!r}, manifest {str(rec.get('manifest_digest'))[:12]}"
        if not pending:
            break
        if time.monotonic() - t0 > timeout:
            states = "; ".join(f"{u}: {last.get(u, '?')}" for u in pending)
            raise PeerError(f"sources not complete after {timeout:.0f}s: {states}")
        sleep(poll)
    return round(time.monotonic() - t0, 3)


def _pull(base_url: str, entry: dict, dest: str, timeout: float, originals: bool = True) -> dict:
    rel = entry["path"]
    partial_dir = os.path.join(dest, PARTIAL_DIR)
    tmp = os.path.join(partial_dir, rel.replace("/", "%2F"))
    base = base_url.rstrip("/")
    resp = None
    used = rel
    for name in ((rel + ORIG_SUFFIX, rel) if originals else (rel,)):
        try:
            resp = _get(f"{base}/{quote(name)}", timeout)
            used = name
            break
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise PeerError(f"{base}/{name}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PeerError(f"{base}/{name}: {exc}") from None
    if resp is None:
        raise PeerError(f"{base}/{rel}: not found on the source")
    sha = hashlib.sha256()
    git = None if entry.get("sha256") else hashlib.sha1(b"blob %d\0" % entry["size"])
    got = 0
    try:
        with resp, open(tmp, "wb") as out:
            while True:
                chunk = resp.read(BUFSIZE)
                if not chunk:
                    break
                sha.update(chunk)
                if git is not None:
                    git.update(chunk)
                out.write(chunk)
                got += len(chunk)
    except (OSError, urllib.error.URLError) as exc:
        _unlink(tmp)
        raise PeerError(f"{base}/{used}: transfer broke after {got} bytes: {exc}") from None
    if got != entry["size"]:
        _unlink(tmp)
        raise PeerError(f"{base}/{used}: got {got} bytes, manifest says {entry['size']}")
    if entry.get("sha256") and sha.hexdigest() != entry["sha256"]:
        _unlink(tmp)
        raise PeerError(f"{base}/{used}: sha256 {sha.hexdigest()} on arrival, manifest says {entry['sha256']}")
    if git is not None and git.hexdigest() != entry.get("git_oid"):
        _unlink(tmp)
        raise PeerError(f"{base}/{used}: git blob {git.hexdigest()} on arrival, manifest says {entry.get('git_oid')}")
    final = os.path.join(dest, rel)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    os.replace(tmp, final)
    digest = {"sha256": sha.hexdigest()}
    if git is not None:
        digest["git_oid"] = git.hexdigest()
    return {"path": rel, "bytes": got, "from": used, "digest": digest}


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fetch(base_url: str, entries: list[dict], dest: str, workers: int = 8, timeout: float = 60.0,
          originals: bool = True) -> dict:
    """Pull ``entries`` from the peer into ``dest``; every file verified on arrival. ``originals``: ask for a
    file's unpatched original (ORIG_SUFFIX) first, as the weights need; a compile cache has none (on 4x H200
    every file of the cache was asked for twice, once with a 404)."""
    t0 = time.monotonic()
    partial_dir = os.path.join(dest, PARTIAL_DIR)
    os.makedirs(partial_dir, exist_ok=True)
    try:
        n = max(1, min(workers, len(entries)))
        ordered = sorted(entries, key=lambda e: -e["size"])
        with ThreadPoolExecutor(max_workers=n) as ex:
            done = list(ex.map(lambda e: _pull(base_url, e, dest, timeout, originals), ordered))
    finally:
        shutil.rmtree(partial_dir, ignore_errors=True)
    return {"files": sorted(d["path"] for d in done), "bytes": sum(d["bytes"] for d in done),
            "digests": {d["path"]: d["digest"] for d in done}, "seconds": round(time.monotonic() - t0, 3)}
