"""Device-health parsers: kernel-log Xid events, NVLink error counters, NVIDIA module parameters,
loaded kernel modules, PCIe ACS state (stdlib only; controller side, also offline in scripts/hwfacts).

Formats (facts, checked against the real H100 captures in docs/examples/health-real-h100/):
- kernel log (`dmesg`, `journalctl -k`): `NVRM: Xid (PCI:0000:1b:00): 79, pid=..., name=..., GPU has
  fallen off the bus.`; the older `NVRM: GPU at 0000:01:00.0 has fallen off the bus.` and the
  multi-line `NVRM: The NVIDIA GPU 0000:b3:00.0 ... fallen off the bus` count as Xid 79.
- `nvidia-smi nvlink -e`: `GPU n: <name> (UUID: ...)` then `Link L: <Counter> Errors: <value>` lines
  (or `Link L: <Counter>: <value>`); empty when NVLink is absent or disabled (the lent H100).
- `/proc/driver/nvidia/params`: `Name: value` lines; `RegistryDwords: "A=1;B=2"`.
- `/proc/modules`: `name size refcount deps state address`.
- pci-acs (llmb.hw.probes.acs_listing): `<bdf> class=0x060400 acs=none|cap=0x...,ctrl=0x...`.
"""

from __future__ import annotations

import re

from ._text import ParseError, clean_lines, nonblank_lines

# --------------------------------------------------------------------------- kernel log: Xid

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\):\s*(\d+)\s*,?\s*(.*)$")
_FALLEN = re.compile(r"NVRM: (?:GPU at|The NVIDIA GPU)\s+(?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]|^(\S+T\S+|\w{3}\s+\d+\s+[\d:]+)")

# Xid codes that mean the GPU or its memory needs attention (NVIDIA's Xid catalogue); others
# (13 graphics engine exception, 31 MMU fault, 43 reset channel) are usually an application's fault.
XID_SEVERE = {48: "double-bit ECC error", 61: "internal micro-controller breakpoint", 62: "internal micro-controller halt",
              63: "ECC page retirement / row remapping event", 64: "ECC page retirement / row remapping failure",
              74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
              94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
              140: "unrecovered ECC error", 154: "GPU recovery action changed"}


def bus_prefix(bus: str) -> str:
    """'00000000:1B:00.0' / '0000:1b:00' -> '0000:1b:00' (domain:bus:device, as Xid lines print it)."""
    m = re.match(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})", bus.strip())
    if not m:
        return bus.strip().lower()
    return f"{int(m.group(1), 16):04x}:{m.group(2)}:{m.group(3)}".lower()


def parse_kernel_log(text: str) -> dict:
    """Xid events and fallen-off-the-bus lines of a kernel log since boot."""
    kind = "kernel-log"
    events = []
    n = 0
    for i, ln in enumerate(clean_lines(text), 1):
        if not ln.strip():
            continue
        n += 1
        m = _XID.search(ln)
        if m:
            stamp = _STAMP.search(ln)
            events.append({"bus": bus_prefix(m.group(1)), "xid": int(m.group(2)), "message": m.group(3).strip()[:300],
                           "time": (stamp.group(1) or stamp.group(2)) if stamp else None, "line": i})
            continue
        m = _FALLEN.search(ln)
        if m:
            stamp = _STAMP.search(ln)
            events.append({"bus": bus_prefix(m.group(1)), "xid": 79, "message": "GPU has fallen off the bus",
                           "time": (stamp.group(1) or stamp.group(2)) if stamp else None, "line": i})
    return {"kind": kind, "lines": n, "events": events}


# --------------------------------------------------------------------------- nvidia-smi nvlink -e

_GPU_HEAD = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$")
_LINK_ERR = re.compile(r"^Link (\d+):\s*(.+?)(?:\s+Errors)?\s*:\s*(\S+)\s*$")


def _counter_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def parse_nvlink_errors(text: str) -> dict:
    """`nvidia-smi nvlink -e`: per GPU, per link, the error counters (replay, recovery, crc, ...)."""
    kind = "nvidia-smi-nvlink-errors"
    gpus: list[dict] = []
    cur = None
    for i, s in nonblank_lines(text):
        m = _GPU_HEAD.match(s)
        if m:
            cur = {"index": int(m.group(1)), "name": m.group(2).strip(), "uuid": m.group(3), "links": {}}
            gpus.append(cur)
            continue
        m = _LINK_ERR.match(s)
        if m and cur is not None:
            value = m.group(3)
            if not re.fullmatch(r"\d+|N/A", value):
                raise ParseError(kind, f"counter value {value!r} is not a number", i)
            link = cur["links"].setdefault(int(m.group(1)), {})
            link[_counter_name(m.group(2))] = int(value) if value.isdigit() else None
            continue
        if m:
            raise ParseError(kind, "a link counter before any 'GPU n:' line", i)
        if re.match(r"^(NVML|Failed|No devices|Unable)", s):
            raise ParseError(kind, f"the tool reported an error: {s[:120]}", i)
    return {"kind": kind, "gpus": [dict(g, links=[dict(link=k, **v) for k, v in sorted(g["links"].items())])
                                   for g in gpus]}


# --------------------------------------------------------------------------- /proc/driver/nvidia/params


def parse_nvidia_params(text: str) -> dict:
    """`cat /proc/driver/nvidia/params`: every `Name: value`; RegistryDwords split into its settings."""
    kind = "nvidia-params"
    params: dict = {}
    for i, s in nonblank_lines(text):
        m = re.match(r"^([A-Za-z][A-Za-z0-9_]*):\s*(.*)$", s)
        if not m:
            raise ParseError(kind, "line is not 'Name: value'", i)
        value = m.group(2).strip()
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = value[1:-1]
        elif re.fullmatch(r"\d+", value):
            value = int(value)
        params[m.group(1)] = value
    if not params:
        raise ParseError(kind, "no 'Name: value' lines (is the nvidia module loaded?)")
    dwords = {}
    for item in str(params.get("RegistryDwords") or "").split(";"):
        if "=" in item:
            k, v = item.split("=", 1)
            dwords[k.strip()] = v.strip()
    return {"kind": kind, "params": params, "registry_dwords": dwords}


# --------------------------------------------------------------------------- /proc/modules


def parse_proc_modules(text: str) -> dict:
    """`cat /proc/modules` (or `lsmod`): the loaded module names."""
    kind = "proc-modules"
    mods = []
    for i, raw in enumerate(clean_lines(text), 1):
        s = raw.strip()
        if not s or s.startswith("Module "):
            continue
        parts = s.split()
        if not re.fullmatch(r"[A-Za-z0-9_-]+", parts[0]) or len(parts) < 3 or not parts[1].isdigit():
            raise ParseError(kind, "line is not 'name size refcount ...'", i)
        mods.append(parts[0].replace("-", "_"))
    return {"kind": kind, "modules": mods}


# --------------------------------------------------------------------------- PCIe ACS

ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")


def parse_pci_acs(text: str) -> dict:
    """The pci-acs probe's listing: every PCI function, its class and its ACS control bits."""
    kind = "pci-acs"
    devices = []
    for i, s in nonblank_lines(text):
        m = re.match(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+class=(0x[0-9a-fA-F]+)\s+"
                     r"acs=(none|unreadable|cap=0x[0-9a-fA-F]{4},ctrl=0x[0-9a-fA-F]{4})$", s)
        if not m:
            raise ParseError(kind, "line is not '<bdf> class=0x... acs=none|unreadable|cap=0x....,ctrl=0x....'", i)
        acs = m.group(3)
        rec = {"bdf": m.group(1).lower(), "class": m.group(2).lower(), "bridge": m.group(2).lower().startswith("0x0604"),
               "acs": acs if acs in ("none", "unreadable") else "present", "ctrl": None, "enabled": []}
        if rec["acs"] == "present":
            ctrl = int(acs.split("ctrl=")[1], 16)
            rec["ctrl"] = ctrl
            rec["enabled"] = [name for bit, name in enumerate(ACS_BITS) if ctrl & (1 << bit)]
        devices.append(rec)
    return {"kind": kind, "devices": devices}
