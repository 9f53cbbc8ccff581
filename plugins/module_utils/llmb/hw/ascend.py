"""Parsers for Huawei Ascend tools: npu-smi info, npu-smi info -t topo, hccn_tool, version.info."""

from __future__ import annotations

import re

from ._matrix import links_from_rows, read_first_matrix, require_rows
from ._text import ParseError, clean_lines, na, parse_cpulist, to_float, to_int

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
    for n, ln in enumerate(lines, 1):
        s = ln.strip()
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
    return out


def parse_npu_topo(text: str) -> dict:
    """`npu-smi info -t topo`: NPUn (A2) or Phy-IDn (A3) matrix, optional CPU Affinity column."""
    kind = "npu-smi-topo"
    _lines, _start, columns, affinity, rows, _end = read_first_matrix(
        text, kind, "an NPU matrix", lambda c: bool(NPU_TOPO_LABEL_RE.match(c))
    )
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


def parse_hccn(text: str, device: int | None = None) -> dict:
    """hccn_tool -i N -link -g / -ip -g / -net_health -g / -lldp -g, one or several outputs.

    Echoed command lines (`hccn_tool -i 3 -ip -g`) switch the device; otherwise `device` names it.
    """
    kind = "hccn-tool"
    devices: dict = {}
    warnings: list[str] = []
    current = device
    lldp: dict | None = None
    lldp_key = None

    def rec():
        return devices.setdefault(current, {"device": current})

    for n, raw in enumerate(clean_lines(text), 1):
        s = raw.strip()
        if not s:
            continue
        m = re.search(r"hccn_tool\s+-i\s+(\d+)\s+(-\S+)", s)
        if m:
            current = int(m.group(1))
            lldp = None
            continue
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
        m = re.match(r"^(.+?) TLV$", s)
        if m:
            lldp = rec().setdefault("lldp", {})
            lldp_key = re.sub(r"[^a-z0-9]+", "_", m.group(1).lower()).strip("_")
            if lldp_key != "end_of_lldpdu":
                lldp[lldp_key] = ""
            continue
        if lldp is not None and lldp_key:
            if s in ("...", "…") or s.endswith(": ..."):
                warnings.append(f"line {n}: LLDP content elided ({s!r})")
            lldp[lldp_key] = (lldp[lldp_key] + "\n" + s).strip() if lldp.get(lldp_key) else s
            continue
        raise ParseError(kind, f"unexpected line {s!r}", n)
    if not devices:
        raise ParseError(kind, "no hccn_tool result line (link status / ipaddr / net health status / LLDP TLV)")
    return {"kind": kind, "devices": [devices[k] for k in devices], "warnings": warnings}


def parse_version_info(text: str) -> dict:
    """/usr/local/Ascend/driver/version.info (key=value)."""
    kind = "ascend-version-info"
    fields: dict = {}
    for n, raw in enumerate(clean_lines(text), 1):
        s = raw.strip()
        if not s:
            continue
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
