"""llmb.weights.disk and llmb.weights.lock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from llmb.weights import disk
from llmb.weights.lock import DirLock, LockTimeout


@pytest.mark.parametrize(("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
                                         (7_612_471, "7.3 MiB"), (554 * 10**9, "516.0 GiB")])
def test_human(n, text):
    assert disk.human(n) == text


def test_check_space_fails_with_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(disk.os, "statvfs", lambda p: SimpleNamespace(f_bavail=256, f_frsize=4096))
    with pytest.raises(disk.DiskSpaceError) as err:
        disk.check_space(7_612_471, str(tmp_path / "not" / "yet"), what="16 file(s) of llmb-test/kimi-k2-sim")
    msg = str(err.value)
    assert "needed 7612471 bytes (7.3 MiB), free 1048576 bytes (1.0 MiB)" in msg
    assert err.value.needed == 7_612_471 and err.value.free == 1_048_576
    # corrupt files about to be deleted count as free
    assert disk.check_space(2_000_000, str(tmp_path), reclaim=1_000_000)["free"] == 2_048_576


def test_existing_parent_and_mount(tmp_path):
    assert disk.existing_parent(str(tmp_path / "a" / "b")) == str(tmp_path)
    assert os.path.ismount(disk.mount_point(str(tmp_path / "a")))


def test_lock_excludes_a_second_holder_and_says_who(tmp_path):
    with DirLock(str(tmp_path), timeout=1):
        t0 = time.monotonic()
        with pytest.raises(LockTimeout, match=r"held by another run \(pid \d+ on "):
            with DirLock(str(tmp_path), timeout=0.3, poll=0.05):
                pass
        assert time.monotonic() - t0 >= 0.3
    with DirLock(str(tmp_path), timeout=0.1):  # released
        pass


def test_lock_held_by_another_process_then_released(tmp_path):
    code = ("import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR|os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(0.6)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / ".llmb-weights.lock")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    with DirLock(str(tmp_path), timeout=10, poll=0.05):
        waited = time.monotonic() - t0
    proc.wait()
    assert 0.2 < waited < 5
