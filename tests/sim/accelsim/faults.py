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
    "xid": Kind(
        "device GPU logged Xid CODE in the kernel log (dmesg); 79 also means it fell off the bus",
        {"gpu": int, "code": int},
        identity=("gpu", "code"),
        vendors=("nvidia",),
    ),
    "throttle": Kind(
        "device GPU's clocks are slowed down for REASON (hw_thermal_slowdown, hw_power_brake_slowdown, "
        "sw_thermal_slowdown, hw_slowdown)",
        {"gpu": int},
        {"reason": str},
        identity=("gpu",),
        vendors=("nvidia",),
    ),
    "ecc_uncorrectable": Kind(
        "device GPU reports COUNT uncorrectable DRAM ECC errors (volatile and aggregate)",
        {"gpu": int},
        {"count": int},
        identity=("gpu",),
        vendors=("nvidia",),
    ),
    "rail_down": Kind(
        "RDMA rail NIC (e.g. mlx5_3) is down: ib_write_bw reports its port Down, NCCL leaves it out",
        {"nic": str},
        identity=("nic",),
        vendors=("nvidia", "amd"),
    ),
    "socket_fallback": Kind(
        "NCCL on this node finds no IB device and falls back to TCP sockets (NET/Socket)",
        vendors=("nvidia", "amd"),
    ),
    "slow_link": Kind(
        "RDMA rail NIC runs at GBPS Gb/s (default 100) in ib_write_bw",
        {"nic": str},
        {"gbps": int},
        identity=("nic",),
        vendors=("nvidia", "amd"),
    ),
    "ibstat_abort": Kind(
        "ibstat cannot stat RDMA device NIC: it prints the devices before it, then `ibpanic: ... stat of IB device "
        "'NIC' failed` on stderr and exits 255 (rdma-core before PR #1501; public capture: leptonai/gpud#752)",
        {"nic": str},
        identity=("nic",),
        vendors=("nvidia", "amd"),
    ),
    "hccn_ping_lost": Kind(
        "NPU DEVICE gets no answer from its peers: `hccn_tool -i DEVICE -ping -g address A` prints `recv time out "
        "seq=N` for every packet and 100% packet loss (its link, address and health stay fine)",
        {"device": int},
        identity=("device",),
        vendors=("ascend",),
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


THROTTLE_REASONS = ("hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "hw_slowdown",
                    "sw_power_cap")


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
    if kind == "throttle" and fault.get("reason", "hw_thermal_slowdown") not in THROTTLE_REASONS:
        raise FaultError(f"throttle: reason must be one of {', '.join(THROTTLE_REASONS)}, found {fault['reason']!r}")
    if kind in ("rail_down", "slow_link", "ibstat_abort"):
        nics = [n["name"] for n in profile.get("nics", [])]
        if fault["nic"] not in nics:
            raise FaultError(f"{kind}: nic={fault['nic']} but profile {profile['name']} has NICs {', '.join(nics) or 'none'}")
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
