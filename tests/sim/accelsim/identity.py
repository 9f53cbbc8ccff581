"""Per-node identity (UUIDs, serial numbers, addresses) derived deterministically from the hostname."""

from __future__ import annotations

import hashlib
import re


def digest(*parts: object) -> bytes:
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()


def number(*parts: object, modulo: int) -> int:
    return int.from_bytes(digest(*parts)[:8], "big") % modulo


def nvidia_uuid(host: str, profile: str, index: int) -> str:
    h = digest("nvidia-uuid", host, profile, index).hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def nvidia_serial(host: str, profile: str, index: int) -> str:
    return "16528" + f"{number('nvidia-serial', host, profile, index, modulo=10**8):08d}"


def nvidia_pdi(host: str, profile: str, index: int) -> str:
    return "0x" + digest("nvidia-pdi", host, profile, index)[:8].hex()


def amd_uuid(host: str, profile: str, index: int, device_id: str) -> str:
    h = digest("amd-uuid", host, profile, index).hex()
    return f"{h[0:2]}ff{device_id[-4:].lower()}-0000-1000-80{h[2:4]}-{h[4:16]}"


def ascend_serial(host: str, profile: str, card: int) -> str:
    return "102" + f"{number('ascend-serial', host, profile, card, modulo=10**13):013d}"


def node_number(host: str) -> int:
    """1..250: the hostname's trailing number when it has one (node3 -> 3), else a hash of it."""
    match = re.search(r"(\d+)$", host)
    if match:
        return int(match.group(1)) % 250 or 250
    return number("node", host, modulo=250) + 1


def jitter(host: str, profile: str, index: int, key: str, spread: float) -> float:
    """A value in [-spread, spread], fixed for a node, device and key."""
    unit = number("jitter", host, profile, index, key, modulo=10_001) / 10_000
    return (unit * 2 - 1) * spread
