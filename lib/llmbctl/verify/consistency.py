"""consistency.* checks: driver and firmware equal on every node of one platform."""

from __future__ import annotations

from .base import _check


def consistency_checks(nodes: dict) -> dict:
    """Driver and firmware equal on every node of one platform.

    nodes: {host: {"platform", "driver_version", "vbios": [...], "inforom": [...]}} -> {host: [checks]}:
    the value most nodes have is expected; a host with another one fails, naming which nodes have what.
    """
    out: dict = {h: [] for h in nodes}
    groups: dict = {}
    for host, n in nodes.items():
        groups.setdefault(n.get("platform"), []).append(host)
    for members in groups.values():
        if len(members) < 2:
            continue
        for key, what, hint in (
                ("driver_version", "driver", "install the same driver on every node (NCCL and the engine expect one "
                 "version across the instance)"),
                ("vbios", "VBIOS", "flash the same VBIOS / firmware bundle on every node (nvfwupd / the vendor's "
                 "firmware package)"),
                ("inforom", "InfoROM image", "update the GPU firmware so every node has the same InfoROM")):
            values = {}
            for h in members:
                v = nodes[h].get(key)
                v = ", ".join(v) if isinstance(v, list) else v
                if v:
                    values[h] = v
            if len(set(values.values())) <= 1:
                continue
            count: dict = {}
            for h, v in sorted(values.items()):
                count.setdefault(v, []).append(h)
            ranked = sorted(count.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            listing = "; ".join(f"{v} on {', '.join(hs)}" for v, hs in ranked)
            majority = ranked[0][0] if len(ranked[0][1]) > len(ranked[1][1]) else None
            for h, v in values.items():
                if v == majority:
                    continue
                out[h].append(_check(f"consistency.{key}", False,
                                     f"{what} {majority} as on {', '.join(count[majority])}" if majority
                                     else f"one {what} on every node", f"{v} (nodes: {listing})", hint))
    return out


def node_firmware(facts: dict, platform: str | None = None) -> dict:
    devs = facts.get("devices") or []
    return {"platform": platform, "driver_version": facts.get("driver_version"),
            "vbios": sorted({d["vbios_version"] for d in devs if d.get("vbios_version")}),
            "inforom": sorted({d["inforom_image"] for d in devs if d.get("inforom_image")})}
