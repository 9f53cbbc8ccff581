"""Fault kinds: what can be injected into a node, and how `KIND key=value ...` is parsed and checked.

A fault is stored as a flat dict ``{"kind": KIND, key: value, ...}`` in faults.json. What each kind
does to the outputs is implemented by the vendor models (nvidia.py, ascend.py, amd.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .profiles import device_count


class FaultError(Exception):
    """A fault that cannot be parsed or does not fit the node's profile."""


@dataclass(frozen=True)
class Kind:
    help: str
    required: dict[str, type] = field(default_factory=dict)
    optional: dict[str, type] = field(default_factory=dict)
    # Keys that identify one instance: adding a fault with the same identity replaces the old one.
    identity: tuple[str, ...] = ()
    vendors: tuple[str, ...] = ("nvidia", "ascend", "amd")


KINDS: dict[str, Kind] = {
    "device_missing": Kind(
        "device INDEX (profile numbering) disappears from every output", {"index": int}, identity=("index",)
    ),
    "link_down": Kind(
        "link LINK of device GPU is down (nvlink <inactive>; topology loses a link or the pair falls back)",
        {"gpu": int, "link": int},
        identity=("gpu", "link"),
    ),
    "link_degraded": Kind(
        "link LINK of device GPU runs slower (nvlink -s shows SPEED, default half the nominal speed)",
        {"gpu": int, "link": int},
        {"speed": str},
        identity=("gpu", "link"),
        vendors=("nvidia",),
    ),
    "driver_version": Kind("the driver reports VERSION", {"version": str}),
    "numa_wrong": Kind(
        "device GPU reports NUMA node NUMA (default: the next node) and that node's CPUs",
        {"gpu": int},
        {"numa": int},
        identity=("gpu",),
    ),
    "hccn_down": Kind(
        "HCCN port of device DEVICE is down (link DOWN, no address, net health Fault)",
        {"device": int},
        identity=("device",),
        vendors=("ascend",),
    ),
    "fabricmanager_stopped": Kind(
        "nvidia-fabricmanager is stopped: fabric state In Progress, CUDA init fails with 802",
        vendors=("nvidia",),
    ),
    "ecc_off": Kind(
        "ECC disabled (on device GPU, or on all)",
        optional={"gpu": int},
        identity=("gpu",),
        vendors=("nvidia",),
    ),
    "persistence_off": Kind(
        "persistence mode disabled (on device GPU, or on all)",
        optional={"gpu": int},
        identity=("gpu",),
        vendors=("nvidia",),
    ),
}


def parse(kind: str, args: list[str]) -> dict:
    """`KIND key=value ...` -> fault dict, with types checked (not yet against a profile)."""
    spec = KINDS.get(kind)
    if spec is None:
        raise FaultError(f"unknown fault kind {kind!r}; known kinds: {', '.join(KINDS)}")
    fault: dict = {"kind": kind}
    allowed = {**spec.required, **spec.optional}
    for arg in args:
        key, sep, raw = arg.partition("=")
        if not sep or not key:
            raise FaultError(f"{kind}: expected key=value, found {arg!r}")
        if key not in allowed:
            known = ", ".join(allowed) or "none"
            raise FaultError(f"{kind}: unknown key {key!r} (keys of {kind}: {known})")
        if key in fault:
            raise FaultError(f"{kind}: key {key!r} given twice")
        if allowed[key] is int:
            try:
                value: object = int(raw)
            except ValueError:
                raise FaultError(f"{kind}: {key} must be an integer, found {raw!r}") from None
            if value < 0:
                raise FaultError(f"{kind}: {key} must be >= 0, found {value}")
        else:
            if not raw:
                raise FaultError(f"{kind}: {key} must not be empty")
            value = raw
        fault[key] = value
    missing = [k for k in spec.required if k not in fault]
    if missing:
        raise FaultError(f"{kind}: missing {', '.join(k + '=' for k in missing)} (usage: {usage(kind)})")
    return fault


def check(fault: dict, profile: dict) -> None:
    """Raise FaultError when the fault cannot apply to this profile (wrong vendor, index out of range)."""
    kind = fault.get("kind")
    spec = KINDS.get(kind)
    if spec is None:
        raise FaultError(f"unknown fault kind {kind!r}")
    if profile["vendor"] not in spec.vendors:
        raise FaultError(f"{kind} does not apply to {profile['vendor']} profile {profile['name']}")
    count = device_count(profile)
    for key in ("index", "gpu", "device"):
        if key in fault and fault[key] >= count:
            raise FaultError(
                f"{kind}: {key}={fault[key]} but profile {profile['name']} has devices 0-{count - 1}"
            )
    if kind in ("link_down", "link_degraded"):
        links = link_count(profile, fault["gpu"])
        if fault["link"] >= links:
            raise FaultError(
                f"{kind}: link={fault['link']} but device {fault['gpu']} of {profile['name']} has links 0-{links - 1}"
                if links
                else f"{kind}: device {fault['gpu']} of {profile['name']} has no links"
            )
    if kind == "numa_wrong":
        nodes = numa_node_count(profile)
        if nodes < 2:
            raise FaultError(
                f"numa_wrong: profile {profile['name']} has a single NUMA node; nothing to move to"
            )
        if fault.get("numa", 0) >= nodes:
            raise FaultError(
                f"numa_wrong: numa={fault['numa']} but {profile['name']} has NUMA nodes 0-{nodes - 1}"
            )


def link_count(profile: dict, device: int) -> int:
    vendor = profile["vendor"]
    if vendor == "nvidia":
        if profile.get("nvlink", {}).get("fabric", "none") == "none":
            return 0
        return profile["device_spec"]["nvlink"]["links"]
    # Point-to-point meshes: one link to every other device.
    return device_count(profile) - 1


def numa_node_count(profile: dict) -> int:
    return len(profile["numa_nodes"])


def same_instance(a: dict, b: dict) -> bool:
    if a.get("kind") != b.get("kind"):
        return False
    spec = KINDS.get(a["kind"])
    keys = spec.identity if spec else ()
    return all(a.get(k) == b.get(k) for k in keys)


def matches(fault: dict, kind: str | None, selectors: dict) -> bool:
    if kind is not None and fault.get("kind") != kind:
        return False
    return all(fault.get(k) == v for k, v in selectors.items())


def describe(fault: dict) -> str:
    rest = " ".join(f"{k}={v}" for k, v in fault.items() if k != "kind")
    return f"{fault['kind']} {rest}".strip()


def usage(kind: str) -> str:
    spec = KINDS[kind]
    parts = [kind] + [f"{k}={'N' if t is int else 'X'}" for k, t in spec.required.items()]
    parts += [f"[{k}={'N' if t is int else 'X'}]" for k, t in spec.optional.items()]
    return " ".join(parts)


def active(faults: list[dict], kind: str) -> list[dict]:
    return [f for f in faults if f.get("kind") == kind]
