"""Free space on the filesystem that will hold the weights, checked before a download."""

from __future__ import annotations

import os


class DiskSpaceError(Exception):
    def __init__(self, message: str, needed: int, free: int, mount: str):
        super().__init__(message)
        self.needed = needed
        self.free = free
        self.mount = mount


def human(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _climb(p: str, found) -> str:
    """p or its nearest ancestor for which found(...) is true; the root when none is."""
    while not found(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def existing_parent(path: str) -> str:
    """``path`` or its nearest existing ancestor (the directory may not exist yet)."""
    return _climb(os.path.abspath(path), os.path.exists)


def mount_point(path: str) -> str:
    return _climb(existing_parent(path), os.path.ismount)


def free_bytes(path: str) -> int:
    st = os.statvfs(existing_parent(path))
    return st.f_bavail * st.f_frsize


def check_space(needed: int, path: str, reclaim: int = 0, what: str = "the download") -> dict:
    """Raise DiskSpaceError when ``needed`` bytes do not fit; ``reclaim``: bytes of files that will
    be deleted first (corrupt copies). Returns {needed, free, mount}."""
    free = free_bytes(path)
    mount = mount_point(path)
    available = free + reclaim
    if needed > available:
        raise DiskSpaceError(
            f"not enough disk space for {what} into {path}: needed {needed} bytes ({human(needed)}), "
            f"free {available} bytes ({human(available)}) on {mount}; free {needed - available} bytes "
            "or point llmb_model_dir at a larger filesystem",
            needed, available, mount,
        )
    return {"needed": needed, "free": available, "mount": mount}
