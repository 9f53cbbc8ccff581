"""A service's compile and kernel cache directory (the plan's cache_dir) before the serve stage starts it:
created when missing, and what it holds said in one word for the report's time to healthy.

- ``cold``: missing, or no file in it (empty subdirectories an engine left do not count);
- ``warm``: files this node's engine wrote;
- ``peer``: files copied from another node's cache of the same service, which leaves PEER_MARKER (JSON
  naming the peer) in the directory.

Stdlib only, python3 >= 3.9 (runs on the node inside llmb_compile_cache).
"""

from __future__ import annotations

import os

STATES = ("cold", "warm", "peer")
PEER_MARKER = ".llmb-cache-peer.json"


def _has_file(path: str) -> bool:
    """True at the first regular file (or link) under ``path``, the peer marker aside; stops there."""
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.name != PEER_MARKER:
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
