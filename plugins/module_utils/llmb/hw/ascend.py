"""Parsers for Huawei Ascend tools: npu-smi info, npu-smi info -t topo, hccn_tool, version.info."""

from __future__ import annotations

import re

from ._matrix import links_from_rows, read_first_matrix, require_rows
from ._text import ParseError, clean_lines, na, nonblank_lines, parse_cpulist, to_float, to_int

BUS_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
NPU_TOPO_LABEL_RE = re.compile(r"^(X|SYS|PHB|PIX|PXB|HCCS|HCCS_SW|SIO|NA|NODE)$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_npu_smi(text: str) -> dict:
    """`npu-smi info`: A2 layout (NPU / Chip) and A3 layout (NPU / Chip Phy-ID)."""
    kind = "npu-smi-info"
    lines = clean_lines(text)
    out: dict = {"kind": kind, "version": None, "npus": [], "processes": []}
    for ln in lines:
        m = re.search(r"npu-smi\s+(\S+)\s+Version:\s+(\S+)", ln)
        if m:
            out["version"] = m.group(2)
            break
    if out["version"] is None:
        first = next((ln.strip() for ln in lines if ln.strip()), "")
        raise ParseError(kind, f"no 'npu-smi <v> Version: <v>' banner; the tool said: {first!r}")
    in_procs = False
    pending: dict | None = None
    pending_line = 0
    elisions: list[int] = []
    for n, ln in enumerate(lines, 1):
        s = ln.strip()
        if s in ("...", "\u2026") or (s.startswith("|") and all(c in ("...", "\u2026", "") for c in _cells(s))
                                       and any(c for c in _cells(s))):
            elisions.append(n)  # an author's cut: NPUs left out (a finding, never skipped silently)
            continue
        if not s.startswith("|"):
            continue
        cells = _cells(s)
        if re.match(r"^NPU\s+Chip$", cells[0]) and len(cells) > 1 and "Process" in cells[1]:
            in_procs = True
            continue
        if in_procs:
            if len(cells) >= 4 and re.match(r"^\d+\s+\d+$", cells[0]):
                npu, chip = cells[0].split()
                out["processes"].append(
                    {"npu": int(npu), "chip": int(chip), "pid": to_int(cells[1]), "name": na(cells[2]),
                     "memory_mb": to_int(cells[3])}
                )
            continue
        if len(cells) != 3:
            continue
        c0 = cells[0].split()
        if pending is None:
            # First row of a device: "<npu> <name> | <health> | <power> <temp> <hp used> / <hp total>"
            if len(c0) >= 2 and c0[0].isdigit() and not BUS_RE.match(cells[1]):
                m = re.match(r"^(\S+)\s+(\S+)", cells[2])
                if not m:
                    raise ParseError(kind, f"NPU {c0[0]}: power/temperature cell not understood: {cells[2]!r}", n)
                pending = {
                    "npu": int(c0[0]),
                    "name": " ".join(c0[1:]),
                    "health": cells[1],
                    "power_w": to_float(m.group(1)),
                    "temp_c": to_int(m.group(2)),
                }
                pending_line = n
            elif c0 and c0[0].isdigit() and BUS_RE.match(cells[1]):
                raise ParseError(kind, f"chip row without its NPU row: {s!r}", n)
            continue
        # Second row: "<chip> [<phy-id>] | <bus-id> | <aicore> <mem used> / <mem total> <hbm used> / <hbm total>"
        if not (c0 and c0[0].isdigit() and BUS_RE.match(cells[1])):
            raise ParseError(kind, f"NPU {pending['npu']}: second row (chip, bus id) missing or damaged", n)
        m = re.match(r"^(\S+)\s+(\d+)\s*/\s*(\d+)\s+(\d+)\s*/\s*(\d+)$", cells[2])
        if not m:
            m2 = re.match(r"^(\S+)\s+(\d+)\s*/\s*(\d+)$", cells[2])
            if not m2:
                raise ParseError(kind, f"NPU {pending['npu']}: memory cell not understood: {cells[2]!r}", n)
            aicore, hbm_used, hbm_total, mem_used, mem_total = m2.group(1), m2.group(2), m2.group(3), None, None
        else:
            aicore, mem_used, mem_total, hbm_used, hbm_total = m.groups()
        pending.update(
            {
                "chip": int(c0[0]),
                "phy_id": int(c0[1]) if len(c0) > 1 and c0[1].isdigit() else None,
                "bus_id": cells[1],
                "aicore_pct": to_int(aicore),
                "memory_used_mb": to_int(mem_used),
                "memory_total_mb": to_int(mem_total),
                "hbm_used_mb": int(hbm_used),
                "hbm_total_mb": int(hbm_total),
            }
        )
        out["npus"].append(pending)
        pending = None
    if pending is not None:
        raise ParseError(kind, f"NPU {pending['npu']}: output ends after its first row", pending_line)
    if not out["npus"]:
        raise ParseError(kind, "banner found but no NPU rows (capture truncated?)")
    out["elisions"] = elisions
    return out


def parse_npu_topo(text: str) -> dict:
    """`npu-smi info -t topo`: NPUn (A2) or Phy-IDn (A3) matrix, optional CPU Affinity column."""
    kind = "npu-smi-topo"
    _, _, columns, affinity, rows, _ = read_first_matrix(text, kind, "an NPU matrix", NPU_TOPO_LABEL_RE.match)
    require_rows(kind, columns, rows)
    devices = []
    for name, _cells, extras, ln in rows:
        values = dict(zip(affinity, extras, strict=False))
        cpu = values.get("CPU Affinity")
        try:
            cpus = parse_cpulist(cpu, kind) if cpu and na(cpu) else None
        except ParseError as exc:
            raise ParseError(kind, f"row {name}: {exc.reason}", ln) from None
        devices.append({"name": name, "index": int(re.sub(r"\D", "", name)), "cpu_affinity": cpus})
    links, _ = links_from_rows(columns, rows)
    return {"kind": kind, "devices": devices, "links": links}


_PING_HEAD = re.compile(r"^device\s+(\d+)\s+PING6?\s+(\S+)$")
_PING_OK = re.compile(r"^recv seq[=:]\s*(\d+)\s*,\s*time\s*[=:-]\s*([\d.]+)\s*ms$")
_PING_LOST = re.compile(r"^(recv time out|pkt send fail) seq[=:]\s*(\w+)$")
_PING_SUM = re.compile(r"^(\d+) packets transmitted, (\d+) received, ([\d.]+)% packet loss$")
_TOOL_FAILED = re.compile(r"(error|fail|invalid|busy|not support|unreachable|timed? ?out)", re.I)


def parse_hccn(text: str, device: int | None = None) -> dict:
    """hccn_tool -i N -link|-ip|-net_health|-lldp|-gateway|-netdetect|-route|-hw_stats -g and -ping -g address A, one or
    several outputs (a shell loop's).

    Echoed command lines (`hccn_tool -i 3 -ip -g`) and ping headers (`device 3 PING 10.0.0.2`) switch
    the device; otherwise `device` names it. Lines the tool prints when it fails (`... failed`,
    `Device id 5 is invalid`, `hccn_tool is busy`) are findings (tool_errors) and the device's errors,
    never skipped; an author's `...` is an elision.
    """
    kind = "hccn-tool"
    devices: dict = {}
    warnings: list[str] = []
    tool_errors: list[dict] = []
    elisions: list[int] = []
    current = device
    lldp: dict | None = None
    lldp_key = None
    ping: dict | None = None
    routes: list | None = None

    def rec():
        return devices.setdefault(current, {"device": current})

    def new_ping(address, n):
        p = {"address": address, "line": n, "replies": 0, "lost": [], "transmitted": None, "received": None,
             "loss_pct": None}
        rec().setdefault("pings", []).append(p)
        return p

    for n, s in nonblank_lines(text):
        m = re.search(r"hccn_tool\s+-i\s+(\d+)\s+(-\S+)", s)
        if m:
            current = int(m.group(1))
            lldp = ping = None
            m2 = re.search(r"-ping6?\s+-g\s+(?:ipv6_)?address\s+(\S+)", s)
            if m2:
                ping = new_ping(m2.group(1), n)
            continue
        m = _PING_HEAD.match(s)
        if m:
            current = int(m.group(1))
            lldp = None
            ping = new_ping(m.group(2), n)
            continue
        m = _PING_OK.match(s) or _PING_LOST.match(s) or _PING_SUM.match(s)
        if m:
            if ping is None:
                ping = new_ping(None, n)  # the output starts at the first reply (the header not captured)
            if m.re is _PING_OK:
                ping["replies"] += 1
            elif m.re is _PING_LOST:
                ping["lost"].append({"line": n, "text": s})
            else:
                ping.update(transmitted=int(m.group(1)), received=int(m.group(2)), loss_pct=float(m.group(3)))
                ping = None
            continue
        if s in ("...", "\u2026"):
            elisions.append(n)
            continue
        if s == "route table:":
            routes = rec().setdefault("routes", [])
            lldp = ping = None
            continue
        if routes is not None and re.match(r"^Destination\s+Gateway\s+Genmask\s+Flags", s):
            continue
        m = re.match(r"^(\S+)\s+(\S+)\s+(\d+\.\d+\.\d+\.\d+)\s+([A-Z!]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)$", s)
        if routes is not None and m:
            routes.append({"destination": m.group(1), "gateway": None if m.group(2) == "*" else m.group(2),
                           "genmask": m.group(3), "flags": m.group(4), "metric": int(m.group(5)),
                           "iface": m.group(8)})
            continue
        m = re.match(r"^\[devid (\d+)\]\s+(\w+):\s*(\d+)$", s)
        if m:
            current = int(m.group(1))
            rec().setdefault("hw_stats", {})[m.group(2)] = int(m.group(3))
            continue
        routes = None  # any other line ends the route table
        m = re.match(r"^link status:\s*(\S+)$", s, re.IGNORECASE)
        if m:
            rec()["link"] = m.group(1).upper()
            continue
        m = re.match(r"^net health status:\s*(.+)$", s, re.IGNORECASE)
        if m:
            rec()["net_health"] = m.group(1).strip()
            continue
        m = re.match(r"^(ipaddr|netmask):\s*(\S*)$", s)
        if m:
            rec()[m.group(1)] = m.group(2) or None  # 'ipaddr:' alone: no address configured
            continue
        m = re.match(r"^default gateway:\s*([^,\s]*)\s*(?:,\s*Iface:\s*(\S+))?$", s, re.IGNORECASE)
        if m:
            eth = re.fullmatch(r"eth(\d+)", m.group(2) or "")
            if device is None and eth and (current is None or current != int(eth.group(1))) and not re.search(
                    r"hccn_tool", text):
                current = int(eth.group(1))  # a loop's output without echoed commands: Iface ethN is device N
            rec()["gateway"] = m.group(1) or None
            rec()["gateway_iface"] = m.group(2)
            continue
        m = re.match(r"^netdetect address:\s*(\S*)$", s, re.IGNORECASE)
        if m:
            rec()["netdetect"] = m.group(1) or None
            continue
        m = re.match(r"^(.+?) TLV$", s)
        if m:
            lldp = rec().setdefault("lldp", {})
            lldp_key = re.sub(r"[^a-z0-9]+", "_", m.group(1).lower()).strip("_")
            if lldp_key != "end_of_lldpdu":
                lldp[lldp_key] = ""
            continue
        if lldp is not None and lldp_key:
            if s.endswith(": ..."):
                warnings.append(f"line {n}: LLDP content elided ({s!r})")
            lldp[lldp_key] = (lldp[lldp_key] + "\n" + s).strip() if lldp.get(lldp_key) else s
            continue
        if _TOOL_FAILED.search(s):
            tool_errors.append({"line": n, "text": s[:200]})
            rec().setdefault("errors", []).append(s[:200])
            continue
        raise ParseError(kind, "expected a hccn_tool result line (link status / ipaddr / net health status / default "
                               f"gateway / netdetect address / LLDP TLV / ping), found {s[:80]!r}", n)
    for dev in devices.values():
        for p in dev.get("pings", []):
            if p["transmitted"] is None:
                tool_errors.append({"line": p["line"], "text": f"ping to {p['address']}: no 'packets transmitted' "
                                                               "summary (the tool stopped or the capture was cut)"})
            p["ok"] = p["received"] is not None and p["received"] == p["transmitted"] and p["transmitted"] > 0 \
                and not p["lost"]
    if not devices:
        raise ParseError(kind, "expected a hccn_tool result line (link status / ipaddr / net health status / LLDP TLV "
                               "/ default gateway / netdetect address / ping), found none")
    return {"kind": kind, "devices": [devices[k] for k in devices], "warnings": warnings, "tool_errors": tool_errors,
            "elisions": elisions}


def parse_version_info(text: str) -> dict:
    """/usr/local/Ascend/driver/version.info (key=value)."""
    kind = "ascend-version-info"
    fields: dict = {}
    for n, s in nonblank_lines(text):
        key, sep, value = s.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ParseError(kind, f"not a key=value line: {s!r}", n)
        fields[key] = value.strip()
    version = fields.get("Version") or fields.get("package_version")
    if not version:
        raise ParseError(kind, "no Version= or package_version= line")
    compat = re.findall(r"\[([^\]]*)\]", fields.get("compatible_version", ""))
    return {
        "kind": kind,
        "version": version,
        "package_version": fields.get("package_version"),
        "innerversion": fields.get("Innerversion"),
        "compatible_version": compat,
        "fields": fields,
    }
