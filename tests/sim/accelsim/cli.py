"""`accelsim`: the node-side control command.

    accelsim profile                      print the node's profile name
    accelsim profiles                     list the profiles this simulator knows
    accelsim fault add KIND [key=value ...]
    accelsim fault clear [KIND [key=value ...]]
    accelsim fault list [--json]
    accelsim fault kinds                  list fault kinds and their keys
    accelsim sync                         rewrite derived files (device count, CUDA flag, version.info)

Exit status 2 on any usage error (unknown kind, bad key, value out of range for the profile).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import faults as fault_kinds
from . import profiles, state
from .faults import FaultError
from .main import load_node

FM_UNIT = "nvidia-fabricmanager.service"


def run(argv: list[str]) -> tuple[int, str, str]:
    out: list[str] = []
    try:
        rc = _dispatch(argv, out)
    except (FaultError, state.StateError, profiles.ProfileError) as exc:
        return 2, "".join(out), f"accelsim: {exc}\n"
    except UsageError as exc:
        return 2, "".join(out), f"accelsim: {exc}\n{__doc__}"
    return rc, "".join(out), ""


class UsageError(Exception):
    pass


def _dispatch(argv: list[str], out: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        out.append(__doc__.lstrip("\n"))
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "profile" and not rest:
        out.append(state.read_profile_name() + "\n")
        return 0
    if cmd == "profiles" and not rest:
        out.extend(f"{name}\t{profiles.load(name)['description']}\n" for name in profiles.list_profiles())
        return 0
    if cmd == "sync" and not rest:
        sync_derived()
        return 0
    if cmd == "fault" and rest:
        return _fault(rest[0], rest[1:], out)
    raise UsageError(f"unknown command: {' '.join(argv)}")


def _fault(sub: str, args: list[str], out: list[str]) -> int:
    if sub == "kinds" and not args:
        for kind, spec in fault_kinds.KINDS.items():
            out.append(f"{fault_kinds.usage(kind):45} {spec.help} [{', '.join(spec.vendors)}]\n")
        return 0
    if sub == "list":
        current = state.read_faults()
        if args == ["--json"]:
            out.append(json.dumps(current, indent=2, sort_keys=True) + "\n")
        elif not args:
            out.extend(fault_kinds.describe(f) + "\n" for f in current)
        else:
            raise UsageError("fault list takes only --json")
        return 0
    if sub == "add":
        if not args:
            raise UsageError("fault add needs a KIND")
        node = load_node()
        new = fault_kinds.parse(args[0], args[1:])
        fault_kinds.check(new, node.profile)
        current = [f for f in node.faults if not fault_kinds.same_instance(f, new)]
        current.append(new)
        state.write_faults(current)
        sync_derived(node.profile, current)
        out.append(f"added: {fault_kinds.describe(new)}\n")
        return 0
    if sub == "clear":  # works even when faults.json holds a fault that no longer checks
        profile = profiles.load(state.read_profile_name())
        kind = args[0] if args else None
        try:
            current = state.read_faults()
        except state.StateError:
            if kind is not None:
                raise
            current = []  # an unreadable faults.json: clearing everything repairs it
        selectors: dict = {}
        if kind is not None:
            if kind not in fault_kinds.KINDS:
                raise FaultError(f"unknown fault kind {kind!r}; known kinds: {', '.join(fault_kinds.KINDS)}")
            if args[1:]:
                selectors = {k: v for k, v in fault_kinds.parse(kind, args[1:]).items() if k != "kind"}
        kept = [f for f in current if not fault_kinds.matches(f, kind, selectors)]
        state.write_faults(kept)
        sync_derived(profile, kept)
        removed = len(current) - len(kept)
        out.append(f"cleared {removed} fault{'s' if removed != 1 else ''}\n")
        return 0
    raise UsageError(f"unknown fault command {sub!r}")


def sync_derived(profile: dict | None = None, faults: list[dict] | None = None) -> None:
    """Bring every file and service that mirrors the faults in line with them.

    - device_count: present devices (read by the libcuda stub's cuDeviceGetCount)
    - cuda_not_ready: exists while fabricmanager_stopped is set (the stub's cuInit returns 802)
    - the Ascend driver's version.info (driver_version fault)
    - the nvidia-fabricmanager unit: stopped while fabricmanager_stopped is set, started otherwise
    """
    if profile is None or faults is None:
        node = load_node()
        profile, faults = node.profile, node.faults
    d = state.state_dir()
    missing = {f["index"] for f in fault_kinds.active(faults, "device_missing")}
    count = profiles.device_count(profile) - len(missing)
    state.write_text_atomic(d / state.COUNT_FILE, f"{count}\n")
    flag = d / state.CUDA_NOT_READY_FILE
    fm_stopped = bool(fault_kinds.active(faults, "fabricmanager_stopped"))
    if fm_stopped:
        state.write_text_atomic(flag, "fabricmanager_stopped\n")
    elif flag.exists():
        flag.unlink()
    if profile["vendor"] == "ascend":
        from . import ascend

        path = state.root() / state.ASCEND_VERSION_INFO
        state.write_text_atomic(path, ascend.render_version_info(profile, faults))
        state.write_text_atomic(d / state.VERSION_INFO_MARKER, f"{path}\n")
    if profile.get("fabricmanager"):
        _set_fabricmanager(running=not fm_stopped)


def _set_fabricmanager(running: bool) -> None:
    """Start/stop the simulated Fabric Manager unit on a real node root with systemd."""
    if not systemd_running() or not (state.root() / "etc/systemd/system" / FM_UNIT).exists():
        return
    alive = state.fabricmanager_alive()
    if running == bool(alive):
        return
    action = "start" if running else "stop"
    proc = subprocess.run(["systemctl", action, FM_UNIT], capture_output=True, text=True)
    if proc.returncode != 0:
        raise state.StateError(f"systemctl {action} {FM_UNIT} failed: {proc.stderr.strip()}")
    # The daemon writes its pid file just after systemd forks it: wait for the state to show.
    deadline = time.monotonic() + 5
    while bool(state.fabricmanager_alive()) != running and time.monotonic() < deadline:
        time.sleep(0.02)


def systemd_running() -> bool:
    """True on a real node root whose PID 1 is systemd (not in unit tests with a temporary root)."""
    return (
        str(state.root()) == "/" and Path("/run/systemd/system").is_dir() and bool(shutil.which("systemctl"))
    )


def entry() -> int:
    rc, out, err = run(sys.argv[1:])
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc
