"""Profiles: what one simulated node has (data in profiles/*.json, device models in _devices.json,
CPU models for lscpu/numactl in _cpus.json)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
DEVICES_FILE = "_devices.json"
CPUS_FILE = "_cpus.json"
# Fabric tools (fabric.py) ride with the GPU vendors: the kernel log, perftest, nccl-/rccl-tests.
FABRIC_TOOLS = ("dmesg", "ib_write_bw", "all_reduce_perf")
VENDOR_TOOLS = {
    "nvidia": ("nvidia-smi", *FABRIC_TOOLS),
    "ascend": ("npu-smi", "hccn_tool"),
    "amd": ("amd-smi", "rocm-smi", *FABRIC_TOOLS),
}


class ProfileError(Exception):
    """Unknown or malformed profile."""


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json") if not p.name.startswith("_"))


@cache
def devices() -> dict:
    data = json.loads((PROFILE_DIR / DEVICES_FILE).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


@cache
def cpus() -> dict:
    data = json.loads((PROFILE_DIR / CPUS_FILE).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


@cache
def load(name: str) -> dict:
    """The profile `name` with its device model merged in under ``device_spec``, its CPU model under ``cpu_spec``."""
    path = PROFILE_DIR / f"{name}.json"
    if name.startswith("_") or not path.is_file():
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(list_profiles())}")
    profile = json.loads(path.read_text())
    if profile.get("name") != name:
        raise ProfileError(f"{path}: 'name' is {profile.get('name')!r}, expected {name!r}")
    vendor = profile.get("vendor")
    if vendor not in VENDOR_TOOLS:
        raise ProfileError(f"{path}: vendor must be one of {sorted(VENDOR_TOOLS)}, found {vendor!r}")
    spec = devices().get(profile.get("device", ""))
    if spec is None:
        raise ProfileError(f"{path}: device {profile.get('device')!r} is not in {DEVICES_FILE}")
    if spec["vendor"] != vendor:
        raise ProfileError(
            f"{path}: device {profile['device']!r} is a {spec['vendor']} device, profile is {vendor}"
        )
    profile["device_spec"] = spec
    cpu = profile.get("cpu") or {}
    cpu_spec = cpus().get(cpu.get("model", ""))
    if cpu_spec is None:
        raise ProfileError(f"{path}: cpu.model {cpu.get('model')!r} is not in {CPUS_FILE}")
    memory = profile.get("numa_memory_mb")
    if not isinstance(memory, list) or len(memory) != len(profile.get("numa_nodes", ())):
        raise ProfileError(f"{path}: numa_memory_mb must list one size (MB) per entry of numa_nodes")
    profile["cpu_spec"] = cpu_spec
    return profile


def tools(profile: dict) -> tuple[str, ...]:
    """The simulated tools of a profile: its vendor's, plus ibstat where it has RDMA NICs."""
    return VENDOR_TOOLS[profile["vendor"]] + (("ibstat",) if profile.get("nics") else ())


def device_count(profile: dict) -> int:
    """Number of accelerator devices (GPUs, NPU chips) the profile has when nothing is missing."""
    if profile["vendor"] == "ascend":
        return sum(len(card["chips"]) for card in profile["cards"])
    return len(profile["gpus"])
