"""Atomic file writes: the one temp-file + rename writer of the controller's documents (deployment.json,
the pins lock, per-host results, reports). Stdlib only, python3 >= 3.9 (module_utils may ship to nodes).

llmb.jsonpatch keeps its own writer: it edits files in place and keeps their owner, mode and times.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(directory: str | Path) -> None:
    """Make a rename in ``directory`` durable; a filesystem that cannot fsync a directory is left as is."""
    try:
        fd = os.open(str(directory), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same directory: written, fsynced,
    given ``mode``, renamed over ``path``, and the directory fsynced. A reader sees the old file or the
    new one, never half of one; on any error the temporary file is removed and ``path`` is untouched.
    Missing parent directories are created."""
    target = Path(path)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(directory), prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, str(target))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def write_text_if_changed(path: str | Path, text: str, mode: int = 0o644) -> bool:
    """``atomic_write_text`` unless ``path`` already holds exactly ``text``; True when it wrote."""
    try:
        if Path(path).read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    atomic_write_text(path, text, mode)
    return True
