"""Where a node's simulator state lives, and reading/writing it.

Everything is relative to ``ACCELSIM_ROOT`` (default ``/``) so that tests can run against a
temporary directory: ``$ACCELSIM_ROOT/etc/accelsim/{profile,faults.json,device_count,...}``.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

STATE_DIR = "etc/accelsim"
PROFILE_FILE = "profile"
FAULTS_FILE = "faults.json"
# Files the C stub of libcuda reads (kept in sync by write_derived()).
COUNT_FILE = "device_count"
CUDA_NOT_READY_FILE = "cuda_not_ready"
# Written by the install script on profiles with Fabric Manager: the path of its pid file.
FM_MARKER_FILE = "fabricmanager"
ASCEND_VERSION_INFO = "usr/local/Ascend/driver/version.info"
VERSION_INFO_MARKER = "version.info.managed"  # present while accelsim owns version.info


class StateError(Exception):
    """The node's simulator state is missing or unreadable."""


def root() -> Path:
    return Path(os.environ.get("ACCELSIM_ROOT", "/"))


def state_dir() -> Path:
    return root() / STATE_DIR


def hostname() -> str:
    return os.environ.get("ACCELSIM_HOSTNAME") or socket.gethostname()


def read_profile_name() -> str:
    path = state_dir() / PROFILE_FILE
    try:
        name = path.read_text().strip()
    except FileNotFoundError:
        raise StateError(f"no simulator profile at {path}: run install-accelsim.sh PROFILE first") from None
    if not name:
        raise StateError(f"{path} is empty")
    return name


def write_profile_name(name: str) -> None:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    (d / PROFILE_FILE).write_text(name + "\n")


def read_faults() -> list[dict]:
    path = state_dir() / FAULTS_FILE
    try:
        data = json.loads(path.read_text() or "[]")
    except FileNotFoundError:
        return []
    except json.JSONDecodeError as exc:
        raise StateError(f"{path} is not valid JSON ({exc}); fix it or run 'accelsim fault clear'") from None
    if isinstance(data, dict):  # tolerate {"faults": [...]}
        data = data.get("faults", [])
    if not isinstance(data, list):
        raise StateError(f"{path} must hold a JSON list of faults")
    return data


def write_faults(faults: list[dict]) -> None:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / (FAULTS_FILE + ".tmp")
    tmp.write_text(json.dumps(faults, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, d / FAULTS_FILE)


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def fabricmanager_alive() -> bool | None:
    """None when no simulated Fabric Manager is installed; else whether its daemon runs."""
    marker = state_dir() / FM_MARKER_FILE
    try:
        pidfile = marker.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        pid = int((root() / pidfile.lstrip("/")).read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
