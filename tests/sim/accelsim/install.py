"""Install the simulator into a node (what install-accelsim.sh runs). Idempotent; rerun to switch profile.

    install-accelsim.sh PROFILE          (as root, inside the node; ACCELSIM_ROOT relocates it for tests)

- copies this package to /usr/local/lib/accelsim/accelsim
- writes /etc/accelsim/profile (faults are kept when the profile is unchanged, reset otherwise)
- installs wrappers into /usr/local/bin for the profile's vendor tools only (removes other vendors'
  wrappers it installed earlier), plus `accelsim`, `numactl` and `lscpu` on every profile (these
  answer the machine-describing forms from the profile and exec /usr/bin/numactl, /usr/bin/lscpu
  for everything else; /usr/bin is never touched); Ascend also gets
  /usr/local/Ascend/driver/tools/hccn_tool and the driver's version.info
- NVSwitch profiles: a simulated `nvidia-fabricmanager.service` (enabled and started under systemd)
- a prebuilt libcuda stub (build/libcuda.so.1 next to this package) becomes
  /usr/lib/x86_64-linux-gnu/libcuda.so.1 on NVIDIA profiles
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import profiles, state
from .cli import sync_derived, systemd_running

MARKER = "# accelsim wrapper (managed by install-accelsim.sh)"
ALL_TOOLS = sorted({t for tools in profiles.VENDOR_TOOLS.values() for t in tools} | {"ibstat"})
HOST_TOOLS = ("lscpu", "numactl")  # every profile; the real tools stay in /usr/bin
LIB_DIR = "usr/local/lib/accelsim"
BIN_DIR = "usr/local/bin"
HCCN_TOOL = "usr/local/Ascend/driver/tools/hccn_tool"
LIBCUDA = "usr/lib/x86_64-linux-gnu/libcuda.so.1"
LIBCUDA_LINK = "usr/lib/x86_64-linux-gnu/libcuda.so"
FM_DAEMON = "usr/local/sbin/nv-fabricmanager"
FM_UNIT = "etc/systemd/system/nvidia-fabricmanager.service"
FM_PIDFILE = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"
FM_DAEMON_TEXT = f"""#!/bin/sh
# Simulated NVIDIA Fabric Manager (accelsim): holds the fabric ready while it runs.
mkdir -p {os.path.dirname(FM_PIDFILE)}
echo $$ > {FM_PIDFILE}
exec sleep infinity
"""
FM_UNIT_TEXT = f"""[Unit]
Description=NVIDIA fabric manager service (simulated by accelsim)
After=network-online.target

[Service]
Type=simple
ExecStart=/{FM_DAEMON}
ExecStopPost=/bin/rm -f {FM_PIDFILE}
KillMode=process
Restart=no

[Install]
WantedBy=multi-user.target
"""


def wrapper(root: Path, tool: str) -> str:
    if tool in HOST_TOOLS:  # decides before touching any state: other argv go to the real tool at once
        return (
            f"#!/usr/bin/python3 -S\n{MARKER}\n"
            "import sys\n\n"
            f"sys.path.insert(0, {str(root / LIB_DIR)!r})\n"
            "from accelsim import host  # noqa: E402\n\n"
            f"sys.exit(host.entry({tool!r}, {str(root)!r}))\n"
        )
    call = "cli.entry()" if tool == "accelsim" else f"main.entry({tool!r})"
    module = "cli" if tool == "accelsim" else "main"
    return (
        f"#!/usr/bin/python3 -S\n{MARKER}\n"
        "import os\nimport sys\n\n"
        f"os.environ.setdefault('ACCELSIM_ROOT', {str(root)!r})\n"
        f"sys.path.insert(0, {str(root / LIB_DIR)!r})\n"
        f"from accelsim import {module}  # noqa: E402\n\n"
        f"sys.exit({call})\n"
    )


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    if path.is_file() and not path.is_symlink() and path.read_text() == text:
        if path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".accelsim-tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


def ours(path: Path) -> bool:
    try:
        return MARKER in path.read_text(errors="replace")[:200]
    except (FileNotFoundError, IsADirectoryError):
        return False


def copy_package(src: Path, dest: Path) -> None:
    """Replace dest with a copy of src (no __pycache__), unless identical already."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if dest.is_dir():
        cmp = filecmp.dircmp(src, dest, ignore=["__pycache__"])
        if _same_tree(cmp):
            return
    tmp = dest.with_name(dest.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=ignore)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def _same_tree(cmp: filecmp.dircmp) -> bool:
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(_same_tree(sub) for sub in cmp.subdirs.values())


def systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["systemctl", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"systemctl {' '.join(args)} failed (rc={proc.returncode}): {proc.stderr.strip()}")
    return proc


def install(profile_name: str, root: Path, src: Path, log: list[str]) -> None:
    profile = profiles.load(profile_name)
    vendor = profile["vendor"]
    copy_package(src / "accelsim", root / LIB_DIR / "accelsim")

    os.environ["ACCELSIM_ROOT"] = str(root)
    previous = None
    try:
        previous = state.read_profile_name()
    except state.StateError:
        pass
    state.write_profile_name(profile_name)
    if previous != profile_name or not (state.state_dir() / state.FAULTS_FILE).exists():
        state.write_faults([])
        if previous and previous != profile_name:
            log.append(f"profile changed {previous} -> {profile_name}: faults reset")

    wanted = {*profiles.tools(profile), *HOST_TOOLS, "accelsim"}
    for tool in [*ALL_TOOLS, *HOST_TOOLS, "accelsim"]:
        path = root / BIN_DIR / tool
        if tool in wanted:
            if write_if_changed(path, wrapper(root, tool), 0o755):
                log.append(f"installed {path}")
        elif ours(path):
            path.unlink()
            log.append(f"removed {path} (profile {profile_name} is {vendor})")
    hccn = root / HCCN_TOOL
    if vendor == "ascend":
        write_if_changed(hccn, wrapper(root, "hccn_tool"), 0o755)
    elif ours(hccn):
        hccn.unlink()
    managed = state.state_dir() / state.VERSION_INFO_MARKER
    if vendor != "ascend" and managed.exists():
        (root / state.ASCEND_VERSION_INFO).unlink(missing_ok=True)
        managed.unlink()

    _install_libcuda(root, src, vendor == "nvidia", log)
    _install_fabricmanager(root, bool(profile.get("fabricmanager")), log)

    sync_derived()  # after the profile and the Fabric Manager unit are in place


def _install_libcuda(root: Path, src: Path, wanted: bool, log: list[str]) -> None:
    stub = src / "build" / "libcuda.so.1"
    dest = root / LIBCUDA
    link = root / LIBCUDA_LINK
    marker = state.state_dir() / "libcuda.managed"
    changed = False
    if wanted and stub.is_file():
        if not dest.is_file() or not filecmp.cmp(stub, dest, shallow=False):
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".accelsim-tmp")
            shutil.copyfile(stub, tmp)
            tmp.chmod(0o755)
            os.replace(tmp, dest)
            changed = True
            log.append(f"installed {dest}")
        if not link.is_symlink():
            if link.exists():
                link.unlink()
            link.symlink_to("libcuda.so.1")
        marker.write_text(str(dest) + "\n")
    elif marker.exists():
        for path in (dest, link):
            if path.is_symlink() or path.exists():
                path.unlink()
        marker.unlink()
        changed = True
        log.append(f"removed {dest}")
    if changed and str(root) == "/" and shutil.which("ldconfig"):
        subprocess.run(["ldconfig"], check=False)


def _install_fabricmanager(root: Path, wanted: bool, log: list[str]) -> None:
    unit = root / FM_UNIT
    marker = state.state_dir() / state.FM_MARKER_FILE
    live = systemd_running()
    if wanted:
        write_if_changed(root / FM_DAEMON, FM_DAEMON_TEXT, 0o755)
        existed = unit.exists()
        unit_changed = write_if_changed(unit, FM_UNIT_TEXT)
        write_if_changed(marker, FM_PIDFILE + "\n")
        if live:
            if unit_changed and existed:
                systemctl("daemon-reload")  # rare: the unit text changed; enable alone would not reload
            if systemctl("is-enabled", "--quiet", unit.name, check=False).returncode != 0:
                systemctl("enable", unit.name)  # reloads the manager itself (new unit file)
                log.append(f"enabled {unit.name}")
        return
    if unit.exists() and "accelsim" in unit.read_text():
        if live:
            systemctl("stop", unit.name, check=False)
        (root / "etc/systemd/system/multi-user.target.wants" / unit.name).unlink(missing_ok=True)
        unit.unlink()
        if live:
            systemctl("daemon-reload")  # one reload for both the unit and its enablement link
        log.append(f"removed {unit.name}")
    for path in (root / FM_DAEMON, marker):
        if path.exists():
            path.unlink()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print(
            f"usage: install-accelsim.sh PROFILE\nprofiles: {', '.join(profiles.list_profiles())}",
            file=sys.stderr,
        )
        return 2
    root = Path(os.environ.get("ACCELSIM_ROOT", "/"))
    src = Path(__file__).resolve().parent.parent
    log: list[str] = []
    try:
        install(argv[0], root, src, log)
    except profiles.ProfileError as exc:
        print(f"install-accelsim: {exc}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError, state.StateError) as exc:
        print(f"install-accelsim: {exc}", file=sys.stderr)
        return 1
    for line in log:
        print(line)
    print(f"accelsim: profile {argv[0]} ready under {root}")
    return 0
