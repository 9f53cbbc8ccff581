"""install-accelsim.sh into a temporary root, the installed wrappers, and the libcuda stub.

Runs the real script and wrappers as subprocesses (python3 must be /usr/bin/python3 as on a node).
The source is copied first, as scripts/sim-cluster copies tests/sim to /opt/accelsim-src.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SIM_SRC = Path(__file__).resolve().parents[2] / "sim"
pytestmark = pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="wrappers run /usr/bin/python3")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    dest = tmp_path / "accelsim-src"
    shutil.copytree(SIM_SRC, dest, ignore=shutil.ignore_patterns("__pycache__", "build"))
    return dest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


def env_for(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELSIM_")}
    env.update(ACCELSIM_ROOT=str(root), ACCELSIM_HOSTNAME="node7")
    return env


def install(src: Path, root: Path, profile: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["bash", str(src / "install-accelsim.sh"), profile],
        env=env_for(root),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def tool(root: Path, name: str, *argv: str, path: str = "usr/local/bin") -> subprocess.CompletedProcess:
    env = env_for(root)
    del env["ACCELSIM_ROOT"]  # the wrapper knows its root
    return subprocess.run(
        [str(root / path / name), *argv], env=env, capture_output=True, text=True, timeout=60
    )


def test_install_nvswitch_profile(src, root):
    out = install(src, root, "h800-hgx8").stdout
    assert "installed" in out
    assert (root / "etc/accelsim/profile").read_text() == "h800-hgx8\n"
    assert sorted(p.name for p in (root / "usr/local/bin").iterdir()) == ["accelsim", "nvidia-smi"]
    unit = (root / "etc/systemd/system/nvidia-fabricmanager.service").read_text()
    assert "ExecStart=/usr/local/sbin/nv-fabricmanager" in unit
    proc = tool(root, "nvidia-smi", "topo", "-m")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].split("\t")[1:9] == [" X "] + ["NV8"] * 7


def test_install_is_idempotent(src, root):
    install(src, root, "h100-hgx8")
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file() and "faults" not in p.name}
    second = install(src, root, "h100-hgx8").stdout
    assert "installed" not in second and "removed" not in second
    after = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file() and "faults" not in p.name}
    changed = [p for p in before if before[p] != after.get(p)]
    assert all(p.parent.name == "accelsim" and p.parent.parent.name == "etc" for p in changed), changed


def test_faults_survive_reinstall_but_not_a_profile_change(src, root):
    install(src, root, "h100-hgx8")
    assert tool(root, "accelsim", "fault", "add", "link_down", "gpu=0", "link=1").returncode == 0
    install(src, root, "h100-hgx8")
    assert tool(root, "accelsim", "fault", "list").stdout == "link_down gpu=0 link=1\n"
    out = install(src, root, "h200-hgx8").stdout
    assert "faults reset" in out
    assert tool(root, "accelsim", "fault", "list").stdout == ""


def test_switching_vendor_swaps_the_tools(src, root):
    install(src, root, "h100-hgx8")
    (root / "usr/local/bin/other-tool").write_text("#!/bin/sh\n")  # not ours: must stay
    out = install(src, root, "a3-16npu").stdout
    assert "removed" in out
    names = sorted(p.name for p in (root / "usr/local/bin").iterdir())
    assert names == ["accelsim", "hccn_tool", "npu-smi", "other-tool"]
    assert not (root / "etc/systemd/system/nvidia-fabricmanager.service").exists()
    assert (root / "usr/local/Ascend/driver/version.info").read_text().startswith("Version=25.2.0\n")
    proc = tool(root, "hccn_tool", "-i", "3", "-ip", "-g", path="usr/local/Ascend/driver/tools")
    assert proc.stdout == "ipaddr:192.168.103.7\nnetmask:255.255.255.0\n"
    install(src, root, "mi300x-8")
    names = sorted(p.name for p in (root / "usr/local/bin").iterdir())
    assert names == ["accelsim", "amd-smi", "other-tool", "rocm-smi"]
    assert not (root / "usr/local/Ascend/driver/version.info").exists()
    assert tool(root, "rocm-smi", "--showtopo").returncode == 0


def test_unknown_profile_is_refused(src, root):
    proc = subprocess.run(
        ["bash", str(src / "install-accelsim.sh"), "h999"], env=env_for(root), capture_output=True, text=True
    )
    assert proc.returncode == 2 and "unknown profile 'h999'" in proc.stderr
    assert not (root / "etc/accelsim/profile").exists()


CUDA_PROBE = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    rc = lib.cuInit(0)
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    lib.cuGetErrorName(rc, ctypes.byref(name))
    lib.cuGetErrorString(rc, ctypes.byref(text))
    count = ctypes.c_int(-1)
    lib.cuDeviceGetCount(ctypes.byref(count))
    print(rc, name.value.decode(), text.value.decode(), count.value, sep="|")
""")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the libcuda stub")
def test_libcuda_stub(src, root):
    build = subprocess.run(["bash", str(src / "build-libcuda-stub.sh")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    install(src, root, "h800-hgx8")
    lib = root / "usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert lib.is_file() and os.readlink(root / "usr/lib/x86_64-linux-gnu/libcuda.so") == "libcuda.so.1"

    def probe() -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", CUDA_PROBE, str(lib)],
            env=env_for(root),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().split("|")

    # Fabric Manager installed but its daemon not running (no systemd in a temporary root): not ready.
    assert probe() == ["802", "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized", "-1"]
    pidfile = root / "run/nvidia-fabricmanager/nv-fabricmanager.pid"
    pidfile.parent.mkdir(parents=True)
    pidfile.write_text(f"{os.getpid()}\n")  # a live process stands in for the daemon
    assert probe() == ["0", "CUDA_SUCCESS", "no error", "8"]
    tool(root, "accelsim", "fault", "add", "device_missing", "index=5")
    assert probe()[3] == "7"
    tool(root, "accelsim", "fault", "add", "fabricmanager_stopped")
    assert probe()[0] == "802"
    tool(root, "accelsim", "fault", "clear")
    assert probe() == ["0", "CUDA_SUCCESS", "no error", "8"]

    install(src, root, "h100-x1")  # no Fabric Manager on this profile
    tool(root, "accelsim", "fault", "add", "device_missing", "index=0")
    assert probe()[:2] == ["100", "CUDA_ERROR_NO_DEVICE"]
    install(src, root, "mi300x-8")
    assert not lib.exists()
