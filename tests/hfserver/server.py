#!/usr/bin/env python3
"""A Hugging Face Hub-compatible test server for local directories (test code, controller side).

    python tests/hfserver/server.py --root DIR [--bind 0.0.0.0] [--port 0] [--token T]
        [--throttle-bps N] [--state-dir D] [--idle-exit S] [--generate]

Serves every ``DIR/<org>/<name>/`` as model repository ``<org>/<name>`` (no git needed) with the
endpoints ``huggingface_hub`` 2.4.0 calls for metadata and downloads:

    GET  /api/models/{repo}[/revision/{rev}]     model info (siblings; ?blobs=1 adds sizes + LFS)
    GET  /api/models/{repo}/tree/{rev}[/{path}]  tree listing, paginated with a Link header
    POST /api/models/{repo}/paths-info/{rev}     metadata of given paths
    HEAD /{repo}/resolve/{rev}/{file}            ETag, X-Repo-Commit, X-Linked-Size/-Etag
    GET  /{repo}/resolve/{rev}/{file}            content, with Range (206 / 416)

LFS files (per the repository's .gitattributes, else *.safetensors / *.model / *.bin) carry their
sha256 as LFS oid and ETag; other files their git blob id, as on the real hub. The commit id is the
sha1 over the sorted (path, blob id) pairs, so a generated repository keeps its commit id.

Test controls (JSON) under /_test/:

    GET  /_test/stats    bytes of file content sent, per repository file and in total; requests
    POST /_test/reset    zero the counters
    GET/POST /_test/config  {"throttle_bps": N|0, "token": "..."|null,
                             "drop": [{"path": "model-00002-...", "after_bytes": N, "count": 1}],
                             "page_size": 1000}

``throttle_bps`` limits the bandwidth of all downloads together (one token bucket: a hub or an
uplink shared by every node). ``drop`` closes the connection after ``after_bytes`` bytes of that
file's body, ``count`` times. With a ``token`` set every request needs ``Authorization: Bearer
<token>``; a wrong one gets 401 "Invalid credentials in Authorization header", a missing one 401.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

DEFAULT_LFS = ("*.safetensors", "*.model", "*.bin")
CHUNK = 64 * 1024


# ----------------------------------------------------------------------------- repositories


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_patterns(repo_dir: Path) -> list[str]:
    ga = repo_dir / ".gitattributes"
    if not ga.is_file():
        return list(DEFAULT_LFS)
    pats = []
    for line in ga.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and "filter=lfs" in parts[1:]:
            pats.append(parts[0])
    return pats


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class Repo:
    """A directory served as one repository at one commit (files indexed at load time)."""

    def __init__(self, repo_id: str, path: Path):
        self.repo_id = repo_id
        self.path = path
        self.files: dict[str, dict] = {}
        pats = lfs_patterns(path)
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            rel = f.relative_to(path).as_posix()
            if rel.startswith(".git/") or rel.startswith(".cache/"):
                continue
            data = f.read_bytes()
            entry: dict = {"path": rel, "size": len(data), "abs": f}
            if any(fnmatch.fnmatch(f.name, p) or fnmatch.fnmatch(rel, p) for p in pats):
                sha = hashlib.sha256(data).hexdigest()
                pointer = lfs_pointer(sha, len(data))
                entry.update(oid=git_blob_id(pointer), lfs={"oid": sha, "size": len(data), "pointerSize": len(pointer)})
                entry["etag"] = sha
            else:
                entry.update(oid=git_blob_id(data), lfs=None)
                entry["etag"] = entry["oid"]
            self.files[rel] = entry
        h = hashlib.sha1()
        for rel in sorted(self.files):
            h.update(f"{rel}\0{self.files[rel]['oid']}\n".encode())
        self.sha = h.hexdigest()

    def api_entry(self, rel: str) -> dict:
        e = self.files[rel]
        out = {"type": "file", "oid": e["oid"], "size": e["size"], "path": rel}
        if e["lfs"]:
            out["lfs"] = dict(e["lfs"])
        return out

    def folders(self) -> set[str]:
        out = set()
        for rel in self.files:
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                out.add("/".join(parts[:i]))
        return out


def load_repos(root: Path) -> dict[str, Repo]:
    repos = {}
    if not root.is_dir():
        return repos
    for org in sorted(p for p in root.iterdir() if p.is_dir()):
        for name in sorted(p for p in org.iterdir() if p.is_dir()):
            rid = f"{org.name}/{name.name}"
            repos[rid] = Repo(rid, name)
    return repos


# ----------------------------------------------------------------------------- state


class Throttle:
    """One token bucket for every connection together (bytes per second; 0 = unlimited)."""

    def __init__(self, rate: int = 0):
        self.rate = rate
        self.lock = threading.Lock()
        self.next_free = time.monotonic()

    def consume(self, n: int) -> None:
        if self.rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_free)
            self.next_free = start + n / self.rate
            wait = self.next_free - now
        if wait > 0:
            time.sleep(wait)


class State:
    def __init__(self, root: Path, token: str | None, throttle_bps: int, page_size: int = 1000):
        self.root = root
        self.repos = load_repos(root)
        self.token = token
        self.throttle = Throttle(throttle_bps)
        self.page_size = page_size
        self.drops: list[dict] = []
        self.lock = threading.Lock()
        self.last_request = time.monotonic()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.bytes_by_file: dict[str, int] = {}
            self.gets_by_file: dict[str, int] = {}
            self.requests: list[dict] = []
            self.api_calls = 0
            self.auth_failures = 0

    def count(self, key: str, n: int) -> None:
        with self.lock:
            self.bytes_by_file[key] = self.bytes_by_file.get(key, 0) + n

    def stats(self) -> dict:
        with self.lock:
            return {
                "bytes_total": sum(self.bytes_by_file.values()),
                "bytes_by_file": dict(sorted(self.bytes_by_file.items())),
                "gets_by_file": dict(sorted(self.gets_by_file.items())),
                "requests": list(self.requests),
                "api_calls": self.api_calls,
                "auth_failures": self.auth_failures,
                "repos": {rid: {"sha": r.sha, "size": sum(f["size"] for f in r.files.values())}
                          for rid, r in self.repos.items()},
            }

    def config(self) -> dict:
        return {"throttle_bps": self.throttle.rate, "token_set": self.token is not None,
                "drop": self.drops, "page_size": self.page_size}

    def take_drop(self, rel: str) -> int | None:
        with self.lock:
            for d in self.drops:
                if d.get("count", 1) > 0 and (d["path"] == rel or fnmatch.fnmatch(rel, d["path"])):
                    d["count"] = d.get("count", 1) - 1
                    return int(d.get("after_bytes", 0))
        return None


# ----------------------------------------------------------------------------- HTTP

RESOLVE_RE = re.compile(r"^/(?:(?P<type>datasets|spaces)/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
API_RE = re.compile(
    r"^/api/(?P<type>models|datasets|spaces)/(?P<repo>[^/]+/[^/]+)"
    r"(?:/(?P<kind>revision|tree|paths-info)/(?P<rev>[^/]+)(?:/(?P<path>.*))?)?$"
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmb-hfserver/1"
    state: State  # set on the class by make_server

    def log_message(self, fmt: str, *args) -> None:  # quiet unless asked
        if os.environ.get("HFSERVER_LOG"):
            sys.stderr.write(f"{self.address_string()} - {fmt % args}\n")

    # -- helpers
    def _send_json(self, code: int, obj, headers: dict | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code: int, message: str, error_code: str | None = None, extra: dict | None = None) -> None:
        headers = {"X-Error-Message": message}
        if error_code:
            headers["X-Error-Code"] = error_code
        headers.update(extra or {})
        self._send_json(code, {"error": message}, headers)

    def _authorized(self) -> bool:
        st = self.state
        if st.token is None:
            return True
        auth = self.headers.get("Authorization", "")
        if auth == f"Bearer {st.token}":
            return True
        with st.lock:
            st.auth_failures += 1
        if auth:
            self._error(401, "Invalid credentials in Authorization header")
        else:
            self._error(401, "Authentication required: this mirror needs a token")
        return False

    def _read_body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _repo(self, repo_id: str, rev: str | None) -> Repo | None:
        repo = self.state.repos.get(repo_id)
        if repo is None:
            self._error(404, "Repository not found", "RepoNotFound")
            return None
        if rev is not None and unquote(rev) not in ("main", repo.sha):
            self._error(404, f"Invalid rev id: {unquote(rev)}", "RevisionNotFound", {"X-Repo-Commit": repo.sha})
            return None
        return repo

    # -- verbs
    def do_HEAD(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        self.state.last_request = time.monotonic()
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        try:
            if path.startswith("/_test/"):
                return self._control(path, query)
            if not self._authorized():
                return None
            m = RESOLVE_RE.match(path)
            if m and self.command in ("GET", "HEAD"):
                return self._resolve(m.group("repo"), m.group("rev"), m.group("path"))
            m = API_RE.match(path)
            if m:
                with self.state.lock:
                    self.state.api_calls += 1
                return self._api(m, query)
            return self._error(404, f"no route for {self.command} {path}")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return None

    def _control(self, path: str, query: dict) -> None:
        st = self.state
        if path == "/_test/stats":
            return self._send_json(200, st.stats())
        if path == "/_test/reset" and self.command == "POST":
            self._read_body()
            st.reset()
            return self._send_json(200, {"ok": True})
        if path == "/_test/config":
            if self.command == "POST":
                cfg = json.loads(self._read_body() or b"{}")
                if "throttle_bps" in cfg:
                    st.throttle.rate = int(cfg["throttle_bps"] or 0)
                if "token" in cfg:
                    st.token = cfg["token"]
                if "drop" in cfg:
                    st.drops = [dict(d) for d in cfg["drop"] or []]
                if "page_size" in cfg:
                    st.page_size = int(cfg["page_size"])
                if cfg.get("reload"):
                    st.repos = load_repos(st.root)
            return self._send_json(200, st.config())
        return self._error(404, f"no test route {path}")

    def _api(self, m: re.Match, query: dict) -> None:
        if m.group("type") != "models":
            return self._error(404, "only model repositories are served", "RepoNotFound")
        kind = m.group("kind")
        repo = self._repo(m.group("repo"), m.group("rev"))
        if repo is None:
            return None
        if kind in (None, "revision") and self.command in ("GET", "HEAD"):
            blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
            siblings = []
            for rel in sorted(repo.files):
                s: dict = {"rfilename": rel}
                if blobs:
                    e = repo.api_entry(rel)
                    s.update(size=e["size"], blobId=e["oid"])
                    if "lfs" in e:
                        s["lfs"] = {"sha256": e["lfs"]["oid"], "size": e["lfs"]["size"],
                                    "pointerSize": e["lfs"]["pointerSize"]}
                siblings.append(s)
            return self._send_json(200, {
                "_id": repo.sha[:24], "id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.sha,
                "private": self.state.token is not None, "gated": False, "disabled": False,
                "lastModified": "2026-11-01T00:00:00.000Z", "tags": ["safetensors", "kimi_k2"],
                "library_name": "transformers", "siblings": siblings,
                "usedStorage": sum(f["size"] for f in repo.files.values()),
            })
        if kind == "tree" and self.command == "GET":
            return self._tree(repo, m.group("path") or "", query)
        if kind == "paths-info" and self.command == "POST":
            body = self._read_body().decode()
            ctype = self.headers.get("Content-Type", "")
            if "json" in ctype:
                paths = json.loads(body or "{}").get("paths", [])
            else:
                paths = parse_qs(body).get("paths", [])
            out = []
            folders = repo.folders()
            for p in paths:
                p = p.strip("/")
                if p in repo.files:
                    out.append(repo.api_entry(p))
                elif p in folders:
                    out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p})
            return self._send_json(200, out)
        return self._error(405, f"{self.command} not supported on {kind}")

    def _tree(self, repo: Repo, sub: str, query: dict) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        sub = sub.strip("/")
        prefix = sub + "/" if sub else ""
        entries: list[dict] = []
        seen_dirs = set()
        for rel in sorted(repo.files):
            if not rel.startswith(prefix):
                continue
            rest = rel[len(prefix):]
            if "/" in rest and not recursive:
                d = prefix + rest.split("/")[0]
                if d not in seen_dirs:
                    seen_dirs.add(d)
                    entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
                continue
            if recursive:
                parts = rest.split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    d = prefix + "/".join(parts[:i])
                    if d not in seen_dirs:
                        seen_dirs.add(d)
                        entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(),
                                        "size": 0, "path": d})
            entries.append(repo.api_entry(rel))
        if sub and not entries:
            return self._error(404, f"{sub} not found", "EntryNotFound", {"X-Repo-Commit": repo.sha})
        start = int(query.get("cursor", ["0"])[0] or 0)
        size = max(1, self.state.page_size)
        page = entries[start:start + size]
        headers = {}
        if start + size < len(entries):
            q = f"recursive={str(recursive).lower()}&cursor={start + size}"
            host = self.headers.get("Host", "localhost")
            nxt = f"http://{host}{quote(urlsplit(self.path).path)}?{q}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return self._send_json(200, page, headers)

    def _resolve(self, repo_id: str, rev: str, rel: str) -> None:
        repo = self._repo(repo_id, rev)
        if repo is None:
            return None
        e = repo.files.get(rel)
        if e is None:
            return self._error(404, f"Entry not found: {rel}", "EntryNotFound", {"X-Repo-Commit": repo.sha})
        size = e["size"]
        start, end = 0, size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not m or (not m.group(1) and not m.group(2)):
                return self._error(416, f"bad Range {rng}", extra={"Content-Range": f"bytes */{size}"})
            if m.group(1):
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else size - 1
            else:
                start = max(0, size - int(m.group(2)))
            end = min(end, size - 1)
            if start >= size or start > end:
                return self._error(416, f"Range {rng} not satisfiable", extra={"Content-Range": f"bytes */{size}"})
            status = 206
        length = end - start + 1 if size else 0
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{e["etag"]}"')
        self.send_header("X-Repo-Commit", repo.sha)
        if e["lfs"]:
            self.send_header("X-Linked-Etag", f'"{e["etag"]}"')
            self.send_header("X-Linked-Size", str(size))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Disposition", f'inline; filename="{Path(rel).name}";')
        self.end_headers()
        if self.command == "HEAD":
            return None
        st = self.state
        key = f"{repo.repo_id}/{rel}"
        with st.lock:
            st.gets_by_file[key] = st.gets_by_file.get(key, 0) + 1
        drop_after = st.take_drop(rel)
        sent = 0
        dropped = False
        try:
            with open(e["abs"], "rb") as fh:
                fh.seek(start)
                remaining = length
                while remaining > 0:
                    n = min(CHUNK, remaining)
                    if drop_after is not None and sent + n > drop_after:
                        n = drop_after - sent
                        if n > 0:
                            st.throttle.consume(n)
                            self.wfile.write(fh.read(n))
                            sent += n
                            st.count(key, n)
                        dropped = True
                        break
                    data = fh.read(n)
                    st.throttle.consume(len(data))
                    self.wfile.write(data)
                    sent += len(data)
                    st.count(key, len(data))
                    remaining -= len(data)
        finally:
            with st.lock:
                st.requests.append({"file": key, "start": start, "status": status, "bytes": sent,
                                    "dropped": dropped, "client": self.client_address[0]})
        if dropped:
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return None


def make_server(root: Path, bind: str = "127.0.0.1", port: int = 0, token: str | None = None,
                throttle_bps: int = 0, page_size: int = 1000) -> ThreadingHTTPServer:
    state = State(root, token, throttle_bps, page_size)
    handler = type("BoundHandler", (Handler,), {"state": state})
    srv = ThreadingHTTPServer((bind, port), handler)
    srv.daemon_threads = True
    srv.state = state  # type: ignore[attr-defined]
    return srv


class Running:
    """A server in a background thread (for pytest): ``with Running(root) as hub: hub.url``."""

    def __init__(self, root: Path, **kwargs):
        self.server = make_server(root, **kwargs)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def state(self) -> State:
        return self.server.state  # type: ignore[attr-defined]

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True, help="directory of <org>/<name>/ repositories")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", default=os.environ.get("HFSERVER_TOKEN"))
    ap.add_argument("--throttle-bps", type=int, default=0)
    ap.add_argument("--state-dir", type=Path, help="write url and pid files here")
    ap.add_argument("--idle-exit", type=float, default=0, help="exit after this many seconds without requests")
    ap.add_argument("--generate", metavar="ORG/NAME", help="generate the test model into ROOT/ORG/NAME if missing")
    args = ap.parse_args(argv)
    if args.generate:
        target = args.root / args.generate
        if not (target / "model.safetensors.index.json").exists():
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from genmodel import generate

            generate(target)
    srv = make_server(args.root, args.bind, args.port, args.token, args.throttle_bps)
    host, port = srv.server_address[:2]
    url = f"http://{host}:{port}"
    if args.state_dir:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        (args.state_dir / "port").write_text(f"{port}\n")
        (args.state_dir / "pid").write_text(f"{os.getpid()}\n")
    print(url, flush=True)

    def stop(*_):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.idle_exit > 0:
        def watchdog():
            while True:
                time.sleep(min(5.0, args.idle_exit))
                if time.monotonic() - srv.state.last_request > args.idle_exit:  # type: ignore[attr-defined]
                    stop()
                    return

        threading.Thread(target=watchdog, daemon=True).start()
    srv.serve_forever()
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
