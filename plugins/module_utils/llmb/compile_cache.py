"""A service's compile and kernel cache directory (the plan's cache_dir) before the serve stage starts it:
created when missing, and what it holds said in one word for the report's time to healthy.

- ``cold``: missing, or no file in it (empty subdirectories an engine left do not count);
- ``warm``: files this node's engine wrote;
- ``peer``: files copied from another node's cache of the same service, which leaves PEER_MARKER (JSON
  naming the peer) in the directory, until the node's group has started whole on it (``adopt``: the marker
  becomes ADOPTED_MARKER, the cache this node's own, ``warm``; seen on 2x H200: without it, every later
  start of the group was filed as a peer start).

A cold cache can be filled from a peer (llmb_compile_cache_peer): the sender lists its files
(``manifest``: path, size, sha256; a cache with a link or a file the relay's unprivileged user cannot
read is not offered, ``unservable`` says why) and serves the directory through the weights relay; the
receiver (``receive``) pulls every file through the weights stage's verified fetch into a staging
directory beside the cache (INCOMING_SUFFIX), writes PEER_MARKER there last, and only then renames the
staging directory onto the cold cache. An interrupted copy leaves the cache cold, never ``warm`` (which
would make it a sender) nor ``peer``.

Stdlib only, python3 >= 3.9 (runs on the node inside llmb_compile_cache and llmb_compile_cache_peer).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat

STATES = ("cold", "warm", "peer")
PEER_MARKER = ".llmb-cache-peer.json"
# the peer marker once the node's group started whole on the copy (``adopt``): the cache is then this
# node's own (warm, and may be passed on); the file keeps where it came from
ADOPTED_MARKER = ".llmb-cache-peer.adopted.json"
INCOMING_SUFFIX = ".llmb-incoming"
BUFSIZE = 4 * 1024 * 1024


def _has_file(path: str) -> bool:
    """True at the first regular file (or link) under ``path``, the peer marker aside; stops there."""
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.name not in (PEER_MARKER, ADOPTED_MARKER):
                        return True
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
    return False


def classify(path: str) -> str:
    """cold, warm or peer for the cache directory ``path`` (see the module's docstring)."""
    if not os.path.isdir(path) or not _has_file(path):
        return "cold"
    return "peer" if os.path.isfile(os.path.join(path, PEER_MARKER)) else "warm"


def check_dirs(dirs: object) -> list[tuple[str, str]]:
    """[(service, absolute path)] from the module's ``dirs`` ({service: path}); ValueError naming the bad entry."""
    if not isinstance(dirs, dict):
        raise ValueError(f"dirs: expected a mapping of service name to cache directory, found {type(dirs).__name__}")
    out = []
    for name, path in dirs.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"dirs: expected a service name, found {name!r}")
        if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path or ".." in path.split("/"):
            raise ValueError(f"dirs[{name}]: expected an absolute path without '..', found {path!r}")
        out.append((name, os.path.normpath(path)))
    return out


def prepare(dirs: object, mode: int = 0o755, check: bool = False) -> dict:
    """Each service's state before its start, then its directory created when missing (not in check mode).
    Returns {"state": {service: state}, "created": [paths]}."""
    state, created = {}, []
    for name, path in check_dirs(dirs):
        state[name] = classify(path)
        if not os.path.isdir(path):
            if path not in created:
                created.append(path)
            if not check:
                os.makedirs(path, mode=mode, exist_ok=True)
                os.chmod(path, mode)
    return {"state": state, "created": created}


def adopt(dirs: object, check: bool = False) -> list[str]:
    """The ``peer`` caches of ``dirs`` made this node's own once its group started whole on them: the peer
    marker renamed to ADOPTED_MARKER (classify then says warm: the next start is a warm one, and the cache may
    be passed on, proven by a whole start). Returns the directories adopted (in ``check`` mode, that would be)."""
    done = []
    for _name, path in check_dirs(dirs):
        if classify(path) != "peer":
            continue
        done.append(path)
        if not check:
            os.replace(os.path.join(path, PEER_MARKER), os.path.join(path, ADOPTED_MARKER))
    return done


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(BUFSIZE), b""):
            h.update(chunk)
    return h.hexdigest()


def open_for_relay(path: str, check: bool = False) -> list[str]:
    """Give others read access (and search on directories) to what the engine wrote private in the cache
    ``path``, so the relay's DynamicUser can serve it: vLLM 0.26.0 writes some entries with mkstemp, 0600
    (its FlashInfer autotune configs). Adds the bits only (``o+r`` on a regular file, ``o+rx`` on a
    directory), follows no link and touches nothing else (a link or special file stays unservable: see
    ``manifest``). Returns the entries opened (relative; '.' for ``path`` itself), or in ``check`` mode
    those it would open."""
    root = os.path.normpath(path)
    opened = []
    for dirpath, _dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        targets = [(dirpath, rel_dir, True)]
        targets += [(os.path.join(dirpath, n), n if rel_dir == "." else f"{rel_dir}/{n}", False) for n in filenames]
        for full, rel, is_dir in targets:
            want = stat.S_IROTH | (stat.S_IXOTH if is_dir else 0)
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if is_dir else 0)
            try:
                lst = os.lstat(full)
                if not (stat.S_ISDIR(lst.st_mode) if is_dir else stat.S_ISREG(lst.st_mode)):
                    continue  # never open a device or a pipe
                fd = os.open(full, flags)
            except OSError:
                continue  # a link, gone meanwhile, or a special file: manifest says why it is not served
            try:
                st = os.fstat(fd)
                if (stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)) and st.st_mode & want != want:
                    opened.append(rel)
                    if not check:
                        os.fchmod(fd, stat.S_IMODE(st.st_mode) | want)
            finally:
                os.close(fd)
    return opened


def manifest(path: str, modes: bool = True) -> dict:
    """{"files": [{path, size, sha256}] (sorted, relative), "unservable": [reasons]} of the cache ``path``.
    Unservable: a link (the relay would follow it out of the cache), a special file, or a file or
    directory the relay's DynamicUser cannot read (no read bit for others; no search bit on a directory;
    not looked at with ``modes`` false: what ``open_for_relay`` would give)."""
    files, bad = [], []
    root = os.path.normpath(path)
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        st = os.stat(dirpath)
        if modes and (not st.st_mode & stat.S_IXOTH or not st.st_mode & stat.S_IROTH):
            bad.append(f"{dirpath}: directory mode {stat.S_IMODE(st.st_mode):04o} (others cannot list it)")
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                bad.append(f"{os.path.join(dirpath, d)}: a link")
                dirnames.remove(d)
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel in (PEER_MARKER, ADOPTED_MARKER):
                continue
            lst = os.lstat(full)
            if stat.S_ISLNK(lst.st_mode) or not stat.S_ISREG(lst.st_mode):
                bad.append(f"{full}: {'a link' if stat.S_ISLNK(lst.st_mode) else 'not a regular file'}")
                continue
            if modes and not lst.st_mode & stat.S_IROTH:
                bad.append(f"{full}: mode {stat.S_IMODE(lst.st_mode):04o} (others cannot read it)")
                continue
            files.append({"path": rel, "size": lst.st_size, "sha256": _sha256(full)})
    files.sort(key=lambda e: e["path"])
    return {"files": files, "unservable": bad}


def manifest_sha256(files: list) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_manifest(files: object) -> list[dict]:
    """The receiver's ``files`` checked: relative paths inside the cache, sizes, sha256; ValueError naming the entry."""
    if not isinstance(files, list) or not files:
        raise ValueError(f"files: expected a non-empty list of {{path, size, sha256}}, found {files!r:.80}")
    out = []
    for i, e in enumerate(files):
        p = e.get("path") if isinstance(e, dict) else None
        if (not isinstance(p, str) or not p or p.startswith("/") or "\x00" in p
                or any(part in ("", ".", "..") for part in p.split("/")) or p == PEER_MARKER):
            raise ValueError(f"files[{i}].path: expected a relative path inside the cache, found {p!r}")
        size, sha = e.get("size"), e.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"files[{i}] ({p}): size: expected a byte count, found {size!r}")
        if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise ValueError(f"files[{i}] ({p}): sha256: expected 64 hex digits, found {sha!r}")
        out.append({"path": p, "size": size, "sha256": sha})
    return out


def _drop_empty_tree(path: str) -> None:
    """Remove a cold cache (directories only); OSError if a file appeared in it meanwhile."""
    for dirpath, _dirs, _files in os.walk(path, topdown=False):
        os.rmdir(dirpath)


def receive(base_url: str, files: object, path: str, source: str, digest: str, fetch, mode: int = 0o755) -> dict:
    """Fill the cold cache ``path`` from ``base_url`` (see the module's docstring). ``fetch`` is the weights
    stage's peer.fetch(base_url, entries, dest): verified on arrival. Returns what the marker says plus
    the fetch's files, bytes and seconds. ValueError when the cache is no longer cold."""
    entries = check_manifest(files)
    path = os.path.normpath(path)
    if classify(path) != "cold":
        raise ValueError(f"{path}: expected a cold cache to fill from {source}, found {classify(path)}")
    staging = path + INCOMING_SUFFIX
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging, mode=mode)
    os.chmod(staging, mode)
    got = fetch(base_url, entries, staging)
    marker = {"peer": source, "digest": digest, "manifest_sha256": manifest_sha256(entries),
              "files": len(entries), "bytes": sum(e["size"] for e in entries)}
    tmp = os.path.join(staging, PEER_MARKER + ".tmp")
    with open(tmp, "w") as f:
        json.dump(marker, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(staging, PEER_MARKER))
    if os.path.isdir(path):
        _drop_empty_tree(path)
    os.rename(staging, path)
    return dict(marker, seconds=got.get("seconds"))


def read_marker(path: str) -> dict | None:
    try:
        with open(os.path.join(path, PEER_MARKER)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
