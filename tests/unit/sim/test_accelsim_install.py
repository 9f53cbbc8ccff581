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
    assert sorted(p.name for p in (root / "usr/local/bin").iterdir()) == [
        "accelsim",
        "all_reduce_perf",  # the fabric tools (accelsim/fabric.py)
        "dmesg",
        "ib_write_bw",
        "ibstat",  # the profile has RDMA NICs
        "lscpu",
        "numactl",
        "nvidia-smi",
    ]
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
    assert names == ["accelsim", "hccn_tool", "lscpu", "npu-smi", "numactl", "other-tool"]
    assert not (root / "etc/systemd/system/nvidia-fabricmanager.service").exists()
    assert (root / "usr/local/Ascend/driver/version.info").read_text().startswith("Version=25.2.0\n")
    proc = tool(root, "hccn_tool", "-i", "3", "-ip", "-g", path="usr/local/Ascend/driver/tools")
    assert proc.stdout == "ipaddr:192.168.103.7\nnetmask:255.255.255.0\n"
    install(src, root, "mi300x-8")
    names = sorted(p.name for p in (root / "usr/local/bin").iterdir())
    assert names == ["accelsim", "all_reduce_perf", "amd-smi", "dmesg", "ib_write_bw", "lscpu", "numactl",
                     "other-tool", "rocm-smi"]
    assert not (root / "usr/local/Ascend/driver/version.info").exists()
    assert tool(root, "rocm-smi", "--showtopo").returncode == 0


FAKE_REAL_TOOL = """#!/bin/sh
echo "real $(basename "$0") args=$* root=${ACCELSIM_ROOT:-unset}"
"""


def fake_real_tools(root: Path) -> None:
    """Stand-ins for /usr/bin/numactl and /usr/bin/lscpu that report how they were called."""
    for name in ("numactl", "lscpu"):
        path = root / "usr/bin" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(FAKE_REAL_TOOL)
        path.chmod(0o755)


def test_host_tools_answer_from_the_profile_and_pass_the_rest_through(src, root):
    fake_real_tools(root)
    install(src, root, "h800-hgx8")
    proc = tool(root, "numactl", "-H")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("available: 2 nodes (0-1)\nnode 0 cpus: 0 1 2 ")
    assert tool(root, "lscpu").stdout.startswith("Architecture:                         x86_64\n")
    assert '"data": "Intel(R) Xeon(R) Platinum 8462Y+"' in tool(root, "lscpu", "-J").stdout
    # Anything else runs the real tool with the same argv, without the simulator's environment.
    proc = tool(root, "numactl", "--cpunodebind=0", "--membind=0", "echo", "hi")
    assert proc.stdout == "real numactl args=--cpunodebind=0 --membind=0 echo hi root=unset\n"
    assert tool(root, "lscpu", "-p=cpu,node").stdout == "real lscpu args=-p=cpu,node root=unset\n"
    # Another vendor keeps the host wrappers and never touches /usr/bin.
    install(src, root, "a3-16npu")
    assert tool(root, "numactl", "-H").stdout.startswith("available: 8 nodes (0-7)\n")
    install(src, root, "mi300x-8")
    assert (root / "usr/bin/numactl").read_text() == FAKE_REAL_TOOL
    assert (root / "usr/bin/lscpu").read_text() == FAKE_REAL_TOOL


def test_host_tools_without_the_real_binary(src, root):
    install(src, root, "h100-x1")
    proc = tool(root, "numactl", "--physcpubind=0", "true")
    assert proc.returncode == 127
    assert "cannot run the real tool" in proc.stderr and "-H/--hardware" in proc.stderr
    assert tool(root, "numactl", "-H").stdout.startswith("available: 1 nodes (0)\n")
    (root / "etc/accelsim/profile").unlink()  # the simulated forms fail loudly without a profile
    proc = tool(root, "lscpu", "-J")
    assert proc.returncode == 2 and "no simulator profile" in proc.stderr and not proc.stdout


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
