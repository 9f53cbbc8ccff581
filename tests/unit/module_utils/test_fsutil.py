"""llmb.fsutil: the atomic writer behind deployment.json, the pins lock, results and reports."""

from __future__ import annotations

import os
import stat

import pytest
from llmb import fsutil


def test_atomic_write_creates_parents_with_mode_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "a" / "b" / "doc.json"
    fsutil.atomic_write_text(target, "{}\n")
    assert target.read_text(encoding="utf-8") == "{}\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(target.parent) == ["doc.json"]
    fsutil.atomic_write_text(str(target), "[]\n", mode=0o600)
    assert target.read_text(encoding="utf-8") == "[]\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "doc.json"
    target.write_text("old\n", encoding="utf-8")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(fsutil.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        fsutil.atomic_write_text(target, "new\n")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["doc.json"]


def test_write_text_if_changed_writes_only_a_difference(tmp_path):
    target = tmp_path / "lock.json"
    assert fsutil.write_text_if_changed(target, "x\n") is True
    before = target.stat().st_mtime_ns, target.stat().st_ino
    assert fsutil.write_text_if_changed(target, "x\n") is False
    assert (target.stat().st_mtime_ns, target.stat().st_ino) == before
    assert fsutil.write_text_if_changed(target, "y\n") is True
    assert target.read_text(encoding="utf-8") == "y\n"


def test_fsync_dir_tolerates_a_missing_directory(tmp_path):
    fsutil.fsync_dir(tmp_path / "missing")
    fsutil.fsync_dir(tmp_path)
