"""An exclusive lock (flock) on a model directory, so two runs never write the same files."""

from __future__ import annotations

import fcntl
import os
import socket
import time

LOCK_NAME = ".llmb-weights.lock"


class LockTimeout(Exception):
    pass


class DirLock:
    """``with DirLock(dest, timeout=600): ...``; the holder's pid, host and start time are written
    into the lock file so a waiting run can say who holds it. The kernel drops the lock when the
    holder dies, so a crashed run never leaves a stale lock."""

    def __init__(self, directory: str, timeout: float = 600.0, poll: float = 0.5):
        self.path = os.path.join(directory, LOCK_NAME)
        self.timeout = timeout
        self.poll = poll
        self.fd: int | None = None

    def holder(self) -> str:
        try:
            with open(self.path, encoding="utf-8") as fh:
                return fh.read().strip() or "unknown"
        except OSError:
            return "unknown"

    def __enter__(self) -> DirLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockTimeout(
                        f"{self.path} is held by another run ({self.holder()}) for more than {self.timeout:.0f}s; "
                        "wait for it to finish or stop it, then run again"
                    ) from None
                time.sleep(self.poll)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None
