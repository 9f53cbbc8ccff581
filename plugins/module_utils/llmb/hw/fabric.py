"""Cross-node fabric parsers: the transport NCCL really used (from `NCCL_DEBUG=INFO` lines of an
nccl-tests / rccl-tests run) and perftest's `ib_write_bw` (stdlib only).

Formats (facts; the socket lines are from the real H100 run in docs/examples/health-real-h100/,
the IB lines from public nccl-tests / perftest reports):
- `<host>:<pid>:<tid> [<dev>] NCCL INFO <message>`, optionally behind an mpirun tag (`[1,0]<stdout>:`).
  `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ... ; OOB ib0:10.0.0.1<0>`, `NET/IB : No device
  found.`, `NET/Socket : Using [0]eth0:192.0.2.2<0>`, `Using network IB|IBext|Socket`,
  `Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA` (NET/<transport>/<nic index>[/GDRDMA]).
- ib_write_bw: the banner (`Device : mlx5_0`, `Link type : IB|Ethernet`, `GID index : 3`, `Mtu`),
  then `#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]` (or `[MB/sec]`) rows;
  failures print ` Port number 1 state is Down`, `Couldn't connect to ...`, `IB device ... not found`.
"""

from __future__ import annotations

import re

from ._text import ParseError, clean_lines

_INFO = re.compile(r"(?:^|\s|>:?)([\w.-]+):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN) (.*)$")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$")
_IB_DEV = re.compile(r"\[(\d+)\]([\w.-]+):(\d+)/([A-Za-z]+)")
_SOCK_DEV = re.compile(r"\[(\d+)\]([\w.-]+):([^<\s]+)")
_VIA_NET = re.compile(r"via NET/([A-Za-z_0-9]+)/(\d+)(/GDRDMA)?")


def _host_rec(hosts: dict, host: str) -> dict:
    return hosts.setdefault(host, {"host": host, "network": None, "ib_devices": [], "ib_missing": False,
                                   "socket_ifaces": [], "net_channels": {}, "gdr_channels": 0, "nics_used": [],
                                   "warnings": []})


def parse_nccl_debug(text: str) -> dict:
    """The ranks, per-host transports and NICs of one nccl-tests run with NCCL_DEBUG=INFO."""
    kind = "nccl-debug"
    hosts: dict = {}
    ranks = []
    info = 0
    for raw in clean_lines(text):
        s = raw.strip()
        m = _RANK.match(s)
        if m:
            ranks.append({"rank": int(m.group(1)), "host": m.group(2), "device": int(m.group(3)),
                          "bus": m.group(4), "model": m.group(5).strip()})
            continue
        m = _INFO.search(s)
        if not m:
            continue
        info += 1
        rec = _host_rec(hosts, m.group(1))
        msg = m.group(6).strip()
        if m.group(5) == "WARN":
            if len(rec["warnings"]) < 20:
                rec["warnings"].append(msg[:300])
            continue
        if msg.startswith("NET/IB : Using"):
            devs = [{"index": int(d[0]), "name": d[1], "port": int(d[2]), "link_layer": d[3]}
                    for d in _IB_DEV.findall(msg.split(";")[0])]
            if devs and not rec["ib_devices"]:
                rec["ib_devices"] = devs
        elif msg.startswith("NET/IB : No device found"):
            rec["ib_missing"] = True
        elif msg.startswith("NET/Socket : Using"):
            if not rec["socket_ifaces"]:
                rec["socket_ifaces"] = [{"index": int(d[0]), "name": d[1], "address": d[2]} for d in _SOCK_DEV.findall(msg)]
        elif msg.startswith("Using network "):
            rec["network"] = msg[len("Using network "):].split()[0]
        else:
            v = _VIA_NET.search(msg)
            if v:
                rec["net_channels"][v.group(1)] = rec["net_channels"].get(v.group(1), 0) + 1
                idx = int(v.group(2))
                if idx not in rec["nics_used"]:
                    rec["nics_used"].append(idx)
                if v.group(3):
                    rec["gdr_channels"] += 1
    for rec in hosts.values():
        rec["nics_used"].sort()
        rec["transport"] = transport_of(rec)
    if not info and not ranks:
        raise ParseError(kind, "no 'NCCL INFO' lines and no '# Rank' lines (run the test with NCCL_DEBUG=INFO)")
    nodes = sorted({r["host"] for r in ranks}) or sorted(hosts)
    return {"kind": kind, "ranks": ranks, "nodes": nodes, "hosts": hosts}


def transport_of(rec: dict) -> str | None:
    """'ib', 'roce', 'socket' or None (not seen): what the host's inter-node traffic used."""
    channels = rec.get("net_channels") or {}
    net = (rec.get("network") or "").lower()
    used = {k.lower() for k in channels}
    if any(k.startswith("socket") for k in used) or (not used and net == "socket"):
        return "socket"
    if any(k.startswith("ib") for k in used) or net.startswith("ib"):
        layers = {d["link_layer"] for d in rec.get("ib_devices") or []}
        return "roce" if layers == {"RoCE"} else "ib"
    return None


# --------------------------------------------------------------------------- ib_write_bw

_BANNER = {"Device": "device", "Link type": "link_type", "Transport type": "transport", "GID index": "gid_index",
           "Mtu": "mtu", "Number of qps": "qps", "Connection type": "connection"}
_ERRORS = re.compile(r"(Port number \d+ state is \w+|Couldn't|Unable to|IB device .* not found|Failed to|"
                     r"No IB devices found|ethernet_read_keys|Error|error)", re.I)


def parse_ib_write_bw(text: str) -> dict:
    """One `ib_write_bw` side (server or client): banner facts, result rows in Gb/s, error lines."""
    kind = "ib-write-bw"
    out: dict = {"kind": kind, "test": None, "device": None, "link_type": None, "transport": None,
                 "gid_index": None, "mtu": None, "qps": None, "connection": None, "unit": None, "rows": [],
                 "avg_gbps": None, "peak_gbps": None, "errors": []}
    unit = None
    for i, raw in enumerate(clean_lines(text), 1):
        s = raw.strip()
        if not s or set(s) <= set("-*"):
            continue
        if re.match(r"^RDMA_Write .*BW Test$", s):
            out["test"] = s
            continue
        for part in re.split(r"\t+|\s{3,}(?=[A-Z])", s):
            m = re.match(r"^([A-Za-z][A-Za-z .]*?)\s*:\s*(\S+)", part.strip())
            if m and m.group(1) in _BANNER and out[_BANNER[m.group(1)]] is None:
                v = m.group(2)
                key = _BANNER[m.group(1)]
                out[key] = int(v) if key in ("gid_index", "qps") and v.isdigit() else v
        m = re.match(r"^#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(Gb|MB)/sec\]", s)
        if m:
            unit = m.group(2)
            out["unit"] = unit + "/sec"
            continue
        parts = s.split()
        if unit and len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            try:
                peak, avg = float(parts[2]), float(parts[3])
            except ValueError:
                raise ParseError(kind, "result row not understood", i) from None
            scale = 1.0 if unit == "Gb" else 1048576 * 8 / 1e9
            out["rows"].append({"bytes": int(parts[0]), "iterations": int(parts[1]), "peak_gbps": round(peak * scale, 3),
                                "avg_gbps": round(avg * scale, 3),
                                "msg_rate_mpps": float(parts[4]) if len(parts) > 4 and re.fullmatch(r"[\d.]+", parts[4]) else None})
            continue
        if _ERRORS.search(s) and not s.startswith(("#", "Data ex.")) and "WARNING" not in s:
            out["errors"].append({"line": i, "text": s[:300]})
    if out["rows"]:
        out["avg_gbps"] = max(r["avg_gbps"] for r in out["rows"])
        out["peak_gbps"] = max(r["peak_gbps"] for r in out["rows"])
    if not out["rows"] and not out["errors"] and out["device"] is None:
        raise ParseError(kind, "no banner, no result rows and no error line: not an ib_write_bw output")
    return out
