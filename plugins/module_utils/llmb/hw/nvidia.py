"""Parsers for NVIDIA tools: nvidia-smi (table, --query-gpu CSV, -q, -q -x), topo -m / -p2p,
nvlink -s / --status / -c, and /proc/driver/nvidia/version."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

from ._matrix import links_from_rows, read_first_matrix, require_rows
from ._text import ParseError, clean_lines, grab, na, nonblank_lines, parse_cpulist, to_float, to_int

TOPO_LABEL_RE = re.compile(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|PCI|NV\d+|C2C)$")
P2P_LABEL_RE = re.compile(r"^(X|OK|CNS|GNS|TNS|NS|U)$")


# --------------------------------------------------------------------------- topo -m


def parse_topo(text: str) -> dict:
    kind = "nvidia-smi-topo"
    lines, start, columns, affinity, rows, end = read_first_matrix(
        text, kind, "a GPU matrix", TOPO_LABEL_RE.match
    )
    warnings: list[str] = []
    gpu_cols = [c for c in columns if c.startswith("GPU")]
    if not gpu_cols:
        raise ParseError(kind, "matrix header has no GPU column", start + 1)
    require_rows(kind, gpu_cols, rows)
    row_names = [r[0] for r in rows]
    for name, cells, _ex, ln in rows:
        if name in columns and cells[columns.index(name)] != "X":
            raise ParseError(kind, f"row {name}: diagonal cell is {cells[columns.index(name)]!r}, expected 'X'", ln)

    # NIC legend ("NIC Legend:" then "  NIC0: mlx5_0").
    nic_names: dict[str, str] = {}
    for ln in lines[end:]:
        m = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", ln)
        if m:
            nic_names[m.group(1)] = m.group(2)

    gpus = []
    raw_cpu: dict[str, str] = {}
    for name, _cells, extras, ln in rows:
        if not name.startswith("GPU"):
            continue
        try:
            gpus.append(_topo_gpu(kind, name, dict(zip(affinity, extras, strict=False)), warnings, raw_cpu))
        except ParseError as exc:
            raise ParseError(kind, f"row {name}: {exc.reason}", ln) from None

    # A value clipped exactly at a digit boundary still parses ('2-63,96-127' for '32-63,96-127'):
    # it shows as a proper suffix of another GPU's value on the same NUMA node.
    for g in gpus:
        name = f"GPU{g['index']}"
        mine = raw_cpu.get(name)
        if mine is None:
            continue
        for other in gpus:
            theirs = raw_cpu.get(f"GPU{other['index']}")
            if (
                theirs
                and theirs != mine
                and theirs.endswith(mine)
                and other["_numa_raw"] == g["_numa_raw"]
            ):
                warnings.append(
                    f"{name}: CPU Affinity {mine!r} looks clipped (GPU{other['index']} on the same NUMA node has"
                    f" {theirs!r}); using {theirs!r}"
                )
                g["cpu_affinity"] = parse_cpulist(theirs, kind)
                break
    for g in gpus:
        del g["_numa_raw"]

    nics = []
    for name, *_ in rows:
        if name.startswith("NIC"):
            nics.append({"index": int(name[3:]), "name": nic_names.get(name)})
        elif name.startswith("mlx5_"):
            nics.append({"index": len(nics), "name": name})
    for col in columns:
        if col.startswith("NIC") and col not in row_names:
            nics.append({"index": int(col[3:]), "name": nic_names.get(col)})
    if any(n["name"] is None for n in nics):
        warnings.append("NIC Legend missing: NIC names unknown")
    links, filled = links_from_rows(columns, rows)
    if filled:
        warnings.append(f"{filled} matrix cells missing from rows (clipped columns) were filled from the reverse direction")
    return {"kind": kind, "gpus": gpus, "nics": nics, "links": links, "warnings": warnings}


def _topo_gpu(kind: str, name: str, values: dict, warnings: list, raw_cpu: dict) -> dict:
    cpu_raw = values.get("CPU Affinity")
    numa_raw = values.get("NUMA Affinity")
    entry = {"index": int(name[3:]), "cpu_affinity": None, "numa_affinity": None, "gpu_numa_id": None}
    if cpu_raw is not None and na(cpu_raw) is not None:
        if cpu_raw[0] in "-,":
            warnings.append(f"{name}: CPU Affinity {cpu_raw!r} is clipped at the left (narrow-terminal copy)")
        else:
            entry["cpu_affinity"] = parse_cpulist(cpu_raw, kind)
            raw_cpu[name] = cpu_raw
    if numa_raw is not None and na(numa_raw) is not None:
        entry["numa_affinity"] = parse_cpulist(numa_raw, kind)
    if values.get("GPU NUMA ID") is not None:
        entry["gpu_numa_id"] = to_int(values["GPU NUMA ID"], kind)
    entry["_numa_raw"] = numa_raw
    return entry


def parse_topo_p2p(text: str) -> dict:
    kind = "nvidia-smi-topo-p2p"
    _, _, columns, _, rows, _ = read_first_matrix(text, kind, "a P2P matrix", P2P_LABEL_RE.match)
    status, _ = links_from_rows(columns, rows)
    return {"kind": kind, "gpus": [int(c[3:]) for c in columns if c.startswith("GPU")], "status": status}


# --------------------------------------------------------------------------- nvlink


_GPU_HEAD_RE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$")


def _gpu_sections(text: str, gpus: list[dict]) -> Iterator[tuple[int, str]]:
    """(line number, stripped line) of each non-blank line of `nvidia-smi nvlink` output that is not a
    `GPU n: ...` header; each header appends its GPU (with an empty links list) to gpus first."""
    for n, line in nonblank_lines(text):
        m = _GPU_HEAD_RE.match(line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3), "links": []})
            continue
        yield n, line


def parse_nvlink(text: str) -> dict:
    """`nvidia-smi nvlink -s` / `--status`: per-link speed, or inactive."""
    kind = "nvidia-smi-nvlink"
    gpus: list[dict] = []
    warnings: list[str] = []
    for n, line in _gpu_sections(text, gpus):
        if line in ("...", "…"):
            warnings.append(f"line {n}: output elided ('...') after GPU {gpus[-1]['index'] if gpus else '?'}")
            continue
        m = re.match(r"^Link (\d+): (.*)$", line)
        if m and gpus:
            value = m.group(2).strip()
            sm = re.match(r"^(\d+(?:\.\d+)?) GB/s$", value)
            if sm:
                link = {"link": int(m.group(1)), "speed_gbps": float(sm.group(1)), "active": True}
            elif value.strip("<>").lower() in ("inactive", "down", "n/a", "disabled"):
                link = {"link": int(m.group(1)), "speed_gbps": None, "active": False}
            else:
                raise ParseError(kind, f"link state {value!r} not understood", n)
            gpus[-1]["links"].append(link)
            continue
        raise ParseError(kind, f"unexpected line {line!r}", n)
    return {"kind": kind, "gpus": gpus, "warnings": warnings}


def parse_nvlink_caps(text: str) -> dict:
    """`nvidia-smi nvlink -c`: capabilities per link."""
    kind = "nvidia-smi-nvlink-caps"
    gpus: list[dict] = []
    for n, line in _gpu_sections(text, gpus):
        m = re.match(r"^Link (\d+), (.+?): (true|false)$", line)
        if m and gpus:
            num = int(m.group(1))
            links = gpus[-1]["links"]
            if not links or links[-1]["link"] != num:
                links.append({"link": num, "caps": {}})
            key = re.sub(r"[^a-z0-9]+", "_", m.group(2).lower()).strip("_")
            links[-1]["caps"][key] = m.group(3) == "true"
            continue
        raise ParseError(kind, f"unexpected line {line!r}", n)
    return {"kind": kind, "gpus": gpus}


# --------------------------------------------------------------------------- --query-gpu CSV


def _csv_key(header: str) -> tuple[str, str | None]:
    m = re.match(r"^(.*?)\s*\[(.+)\]$", header.strip())
    name, unit = (m.group(1), m.group(2)) if m else (header.strip(), None)
    key = name.replace(".", "_")
    if unit:
        key += "_" + re.sub(r"[^a-z0-9]+", "", unit.lower())
    return key, unit


def parse_query(text: str) -> dict:
    """`nvidia-smi --query-gpu=... --format=csv` (with header; units are stripped into keys)."""
    kind = "nvidia-smi-query"
    numbered = [(n, ln) for n, ln in enumerate(clean_lines(text), 1) if ln.strip()]
    if not numbered:
        raise ParseError(kind, "empty output (expected a CSV header line)")
    head_n, head = numbered[0]
    headers = [h.strip() for h in head.split(",")]
    if not all(re.match(r"^[a-z_][a-z0-9_.]*(\s*\[.+\])?$", h) for h in headers):
        raise ParseError(kind, f"first line is not a --query-gpu CSV header: {head!r}", head_n)
    keys = [_csv_key(h) for h in headers]
    gpus = []
    for n, line in numbered[1:]:
        values = [v.strip() for v in line.split(", ")]
        if len(values) != len(keys):
            values = [v.strip() for v in line.split(",")]
        if len(values) != len(keys):
            raise ParseError(kind, f"row has {len(values)} values, header names {len(keys)}", n)
        row = {}
        for (key, unit), value in zip(keys, values, strict=True):
            v = na(value)
            if v is not None and unit:
                v = to_float(v, kind)
                if v is not None and v.is_integer():
                    v = int(v)
            elif v is not None and key == "index":
                v = to_int(v, kind)
            row[key] = v
        gpus.append(row)
    return {"kind": kind, "fields": [k for k, _ in keys], "gpus": gpus}


# --------------------------------------------------------------------------- default table


_TABLE_GPU1 = re.compile(
    r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(\S+)\s+\|\s+(.+?)\s+\|$"
)
_TABLE_GPU2 = re.compile(
    r"^\|\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s+\|\s+(\d+)MiB\s*/\s*(\d+)MiB\s+\|\s+(\S+)\s+(.+?)\s*\|$"
)


def parse_smi_table(text: str) -> dict:
    """Default `nvidia-smi` output."""
    kind = "nvidia-smi"
    lines = clean_lines(text)
    head = next((ln for ln in lines if "NVIDIA-SMI" in ln and "Driver Version" in ln), None)
    if head is None:
        msg = next((ln.strip() for ln in lines if ln.strip()), "")
        if "No devices were found" in msg:
            return {"kind": kind, "smi_version": None, "driver_version": None, "cuda_version": None, "gpus": []}
        raise ParseError(kind, f"no 'NVIDIA-SMI ... Driver Version' banner; the tool said: {msg!r}")
    out = {
        "kind": kind,
        "smi_version": grab(r"NVIDIA-SMI\s+(\S+)", head),
        "driver_version": grab(r"Driver Version:\s+(\S+)", head),
        "cuda_version": na(grab(r"CUDA Version:\s+(\S+)", head)),
        "gpus": [],
        "processes": [],
    }
    i = 0
    in_procs = False
    while i < len(lines):
        ln = lines[i].strip()
        if "Processes:" in ln:
            in_procs = True
        m = None if in_procs else _TABLE_GPU1.match(ln)
        if m:
            if i + 1 >= len(lines) or not _TABLE_GPU2.match(lines[i + 1].strip()):
                raise ParseError(kind, f"GPU {m.group(1)}: second row missing or damaged", i + 2)
            m2 = _TABLE_GPU2.match(lines[i + 1].strip())
            gpu = {
                "index": int(m.group(1)),
                "name": m.group(2).strip(),
                "persistence_mode": "Enabled" if m.group(3) == "On" else "Disabled",
                "bus_id": m.group(4),
                "display_active": m.group(5),
                "ecc_uncorrected": to_int(m.group(6)),
                "fan": na(m2.group(1)),
                "temp_c": to_int(m2.group(2).rstrip("C")),
                "perf": m2.group(3),
                "power_w": to_int(m2.group(4).rstrip("W")),
                "power_cap_w": to_int(m2.group(5).rstrip("W")),
                "memory_used_mib": int(m2.group(6)),
                "memory_total_mib": int(m2.group(7)),
                "gpu_util_pct": to_int(m2.group(8).rstrip("%")),
                "compute_mode": m2.group(9).strip(),
                "mig_mode": None,
            }
            if i + 2 < len(lines):
                m3 = re.match(r"^\|\s+\|\s+\|\s+(\S+)\s+\|$", lines[i + 2].strip())
                if m3:
                    gpu["mig_mode"] = na(m3.group(1))
            out["gpus"].append(gpu)
            i += 2
            continue
        if in_procs:
            pm = re.match(r"^\|\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(.*?)\s+(\d+)MiB\s+\|$", ln)
            if pm:
                out["processes"].append(
                    {"gpu": int(pm.group(1)), "pid": int(pm.group(4)), "type": pm.group(5),
                     "name": pm.group(6), "memory_mib": int(pm.group(7))}
                )
        i += 1
    if not out["gpus"]:
        raise ParseError(kind, "banner found but no GPU rows (capture truncated?)")
    return out


# --------------------------------------------------------------------------- -q and -q -x


GPU_FIELDS = (
    "index", "bus_id", "product_name", "uuid", "persistence_mode", "ecc_mode_current", "ecc_mode_pending",
    "memory_total_mib", "fabric_state", "fabric_status", "mig_mode_current", "performance_state",
    "power_limit_w", "module_id", "virtualization_mode", "pcie_gen_current", "pcie_width_current",
    "remapped_rows_pending", "remapped_rows_failure", "ecc_dram_uncorrectable_volatile",
)


def _gpu_record(get) -> dict:
    def mib(v):
        return to_int(v) if na(v) else None

    width = na(get("pcie_width_current"))
    return {
        "index": None,
        "bus_id": get("bus_id"),
        "product_name": na(get("product_name")),
        "uuid": na(get("uuid")),
        "persistence_mode": na(get("persistence_mode")),
        "ecc_mode_current": na(get("ecc_mode_current")),
        "ecc_mode_pending": na(get("ecc_mode_pending")),
        "memory_total_mib": mib(get("memory_total")),
        "fabric_state": na(get("fabric_state")),
        "fabric_status": na(get("fabric_status")),
        "mig_mode_current": na(get("mig_mode_current")),
        "performance_state": na(get("performance_state")),
        "power_limit_w": to_float(get("power_limit")) if na(get("power_limit")) else None,
        "module_id": to_int(get("module_id")) if na(get("module_id")) else None,
        "virtualization_mode": na(get("virtualization_mode")),
        "pcie_gen_current": to_int(get("pcie_gen_current")) if na(get("pcie_gen_current")) else None,
        "pcie_width_current": to_int(width.rstrip("x")) if width else None,
        "remapped_rows_pending": na(get("remapped_rows_pending")),
        "remapped_rows_failure": na(get("remapped_rows_failure")),
        "ecc_dram_uncorrectable_volatile": to_int(get("ecc_dram_unc")) if na(get("ecc_dram_unc")) else None,
        # Device health (verify's health.* checks): maxima of the PCIe link, uncorrectable ECC counts
        # (volatile: since the last driver load; aggregate: lifetime), firmware.
        "pcie_gen_max": to_int(get("pcie_gen_max")) if na(get("pcie_gen_max")) else None,
        "pcie_width_max": to_int(na(get("pcie_width_max")).rstrip("x")) if na(get("pcie_width_max")) else None,
        "ecc_uncorrectable_volatile": _sum_counts(get, ("ecc_dram_unc", "ecc_sram_unc", "ecc_sram_unc_parity",
                                                        "ecc_sram_unc_secded")),
        "ecc_uncorrectable_aggregate": _sum_counts(get, ("ecc_dram_unc_agg", "ecc_sram_unc_agg",
                                                         "ecc_sram_unc_parity_agg", "ecc_sram_unc_secded_agg")),
        "vbios_version": na(get("vbios_version")),
        "inforom_image": na(get("inforom_image")),
        "clocks_event_reasons_active": None,
    }


def _sum_counts(get, fields) -> int | None:
    """Sum of the counters that are numbers; None when none is (ECC off: N/A)."""
    vals = [get(f) for f in fields]
    nums = [to_int(v) for v in vals if na(v) and re.fullmatch(r"\d+", str(v).strip())]
    return sum(nums) if nums else None


_REASON_ALIAS = {"idle": "gpu_idle", "display_clock_setting": "display_clocks_setting"}


def reason_name(name: str) -> str:
    """'HW Thermal Slowdown' / 'clocks_event_reason_hw_thermal_slowdown' -> 'hw_thermal_slowdown'."""
    key = re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")
    key = re.sub(r"^clocks_(event|throttle)_reasons?_", "", key)
    return _REASON_ALIAS.get(key, key)


_Q_PATHS = {
    "product_name": ("Product Name",),
    "uuid": ("GPU UUID",),
    "persistence_mode": ("Persistence Mode",),
    "ecc_mode_current": ("Ecc Mode", "Current"),
    "ecc_mode_pending": ("Ecc Mode", "Pending"),
    "memory_total": ("FB Memory Usage", "Total"),
    "fabric_state": ("Fabric", "State"),
    "fabric_status": ("Fabric", "Status"),
    "mig_mode_current": ("MIG Mode", "Current"),
    "performance_state": ("Performance State",),
    "power_limit": ("Power Readings", "Power Limit"),
    "module_id": ("Module ID",),
    "virtualization_mode": ("GPU Virtualization Mode", "Virtualization Mode"),
    "pcie_gen_current": ("PCI", "GPU Link Info", "PCIe Generation", "Current"),
    "pcie_width_current": ("PCI", "GPU Link Info", "Link Width", "Current"),
    "remapped_rows_pending": ("Remapped Rows", "Pending"),
    "remapped_rows_failure": ("Remapped Rows", "Remapping Failure Occurred"),
    "ecc_dram_unc": ("ECC Errors", "Volatile", "DRAM Uncorrectable"),
    "ecc_sram_unc": ("ECC Errors", "Volatile", "SRAM Uncorrectable"),
    "ecc_sram_unc_parity": ("ECC Errors", "Volatile", "SRAM Uncorrectable Parity"),
    "ecc_sram_unc_secded": ("ECC Errors", "Volatile", "SRAM Uncorrectable SEC-DED"),
    "ecc_dram_unc_agg": ("ECC Errors", "Aggregate", "DRAM Uncorrectable"),
    "ecc_sram_unc_agg": ("ECC Errors", "Aggregate", "SRAM Uncorrectable"),
    "ecc_sram_unc_parity_agg": ("ECC Errors", "Aggregate", "SRAM Uncorrectable Parity"),
    "ecc_sram_unc_secded_agg": ("ECC Errors", "Aggregate", "SRAM Uncorrectable SEC-DED"),
    "pcie_gen_max": ("PCI", "GPU Link Info", "PCIe Generation", "Max"),
    "pcie_width_max": ("PCI", "GPU Link Info", "Link Width", "Max"),
    "vbios_version": ("VBIOS Version",),
    "inforom_image": ("Inforom Version", "Image Version"),
}


def parse_smi_q(text: str) -> dict:
    """`nvidia-smi -q` (text). Reads the indentation tree, then picks the fields verify needs."""
    kind = "nvidia-smi-q"
    lines = clean_lines(text)
    top: dict = {}
    gpus: list[tuple[str, dict]] = []
    stack: list[tuple[int, dict]] = []
    seen_banner = False
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if "NVSMI LOG" in raw:
            seen_banner = True
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        body = raw.strip()
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$", body)
        if m and indent == 0:
            node: dict = {}
            gpus.append((m.group(1), node))
            stack = [(0, node)]
            continue
        key, sep, value = body.partition(" : ")
        if not sep and body.endswith(" :"):
            key, sep, value = body[:-2], " :", ""
        key = key.strip()
        if indent == 0 and not gpus:
            if sep:
                top[key] = value.strip()
            continue
        if not stack:
            raise ParseError(kind, f"unexpected line before any GPU section: {body!r}", n)
        while stack and indent <= stack[-1][0] and len(stack) > 1:
            stack.pop()
        parent = stack[-1][1]
        if sep:
            parent[key] = value.strip()
        else:
            child: dict = {}
            parent[key] = child
            stack.append((indent, child))
    if not seen_banner and "Driver Version" not in top:
        raise ParseError(kind, "no 'NVSMI LOG' banner and no 'Driver Version' line")
    out_gpus = []
    for bus, node in gpus:
        def get(field, node=node, bus=bus):
            if field == "bus_id":
                return bus
            cur = node
            for part in _Q_PATHS[field]:
                if not isinstance(cur, dict):
                    return None
                match = next((k for k in cur if k.lower() == part.lower()), None)
                if match is None:
                    return None
                cur = cur[match]
            return cur if isinstance(cur, str) else None
        rec = _gpu_record(get)
        reasons = next((v for k, v in node.items() if k.lower() in ("clocks event reasons", "clocks throttle reasons")
                        and isinstance(v, dict)), None)
        if reasons is not None:
            active = []
            for k, v in reasons.items():
                if isinstance(v, str) and v == "Active":
                    active.append(reason_name(k))
                elif isinstance(v, dict):  # HW Slowdown's sub-reasons sit one level down
                    active += [reason_name(k2) for k2, v2 in v.items() if v2 == "Active"]
            rec["clocks_event_reasons_active"] = active
        out_gpus.append(rec)
    for i, g in enumerate(out_gpus):
        g["index"] = i
    return _query_doc(kind, top.get("Driver Version"), top.get("CUDA Version"), top.get("Attached GPUs"), out_gpus)


def _query_doc(kind: str, driver: str | None, cuda: str | None, attached: str | None, gpus: list[dict]) -> dict:
    """What `nvidia-smi -q` reports, read from its text form or its XML form (-x)."""
    return {
        "kind": kind,
        "driver_version": na(driver),
        "cuda_version": na(cuda),
        "attached_gpus": to_int(attached) if na(attached) else None,
        "gpus": gpus,
    }


_X_PATHS = {
    "product_name": "product_name",
    "uuid": "uuid",
    "persistence_mode": "persistence_mode",
    "ecc_mode_current": "ecc_mode/current_ecc",
    "ecc_mode_pending": "ecc_mode/pending_ecc",
    "memory_total": "fb_memory_usage/total",
    "fabric_state": "fabric/state",
    "fabric_status": "fabric/status",
    "mig_mode_current": "mig_mode/current_mig",
    "performance_state": "performance_state",
    "power_limit": "gpu_power_readings/current_power_limit",
    "module_id": "platformInfo/module_id",
    "virtualization_mode": "gpu_virtualization_mode/virtualization_mode",
    "pcie_gen_current": "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    "pcie_width_current": "pci/pci_gpu_link_info/link_widths/current_link_width",
    "remapped_rows_pending": "remapped_rows/remapped_row_pending",
    "remapped_rows_failure": "remapped_rows/remapped_row_failure",
    "ecc_dram_unc": "ecc_errors/volatile/dram_uncorrectable",
    "ecc_sram_unc": "ecc_errors/volatile/sram_uncorrectable",
    "ecc_sram_unc_parity": "ecc_errors/volatile/sram_uncorrectable_parity",
    "ecc_sram_unc_secded": "ecc_errors/volatile/sram_uncorrectable_secded",
    "ecc_dram_unc_agg": "ecc_errors/aggregate/dram_uncorrectable",
    "ecc_sram_unc_agg": "ecc_errors/aggregate/sram_uncorrectable",
    "ecc_sram_unc_parity_agg": "ecc_errors/aggregate/sram_uncorrectable_parity",
    "ecc_sram_unc_secded_agg": "ecc_errors/aggregate/sram_uncorrectable_secded",
    "pcie_gen_max": "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    "pcie_width_max": "pci/pci_gpu_link_info/link_widths/max_link_width",
    "vbios_version": "vbios_version",
    "inforom_image": "inforom_version/img_version",
}
_X_FALLBACK = {
    "power_limit": "power_readings/power_limit",
    "module_id": "module_id",
}


def parse_smi_xml(text: str) -> dict:
    """`nvidia-smi -q -x`."""
    kind = "nvidia-smi-q-xml"
    body = text.strip()
    if not body:
        raise ParseError(kind, "empty output (expected <nvidia_smi_log>)")
    # The DOCTYPE names an external DTD; ElementTree ignores it.
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise ParseError(kind, f"XML is not well-formed ({exc}); capture truncated or damaged?") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(kind, f"root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        def get(field, g=g):
            if field == "bus_id":
                return g.get("id")
            node = g.find(_X_PATHS[field])
            if node is None and field in _X_FALLBACK:
                node = g.find(_X_FALLBACK[field])
            return node.text.strip() if node is not None and node.text else None
        rec = _gpu_record(get)
        reasons = g.find("clocks_event_reasons")
        if reasons is None:
            reasons = g.find("clocks_throttle_reasons")
        if reasons is not None:
            rec["clocks_event_reasons_active"] = [reason_name(c.tag) for c in reasons
                                                  if (c.text or "").strip() == "Active"]
        minor = g.findtext("minor_number")
        rec["minor_number"] = to_int(minor) if na(minor) else None
        rec["index"] = i
        gpus.append(rec)
    return _query_doc(kind, root.findtext("driver_version"), root.findtext("cuda_version"),
                      root.findtext("attached_gpus"), gpus)


# --------------------------------------------------------------------------- /proc/driver/nvidia/version


def parse_proc_version(text: str) -> dict:
    kind = "nvidia-proc-version"
    out = {"kind": kind, "driver_version": None, "kernel_module": None, "gcc_version": None, "dev_nodes": []}
    for ln in clean_lines(text):
        m = re.match(r"^NVRM version:\s+NVIDIA UNIX\s+(.*?Kernel Module)(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)*)", ln)
        if m:
            out["driver_version"] = m.group(2)
            out["kernel_module"] = "open" if "Open" in m.group(1) else "proprietary"
            continue
        m = re.match(r"^GCC version:\s+(.*)$", ln)
        if m:
            out["gcc_version"] = m.group(1).strip()
            continue
        if re.match(r"^/dev/nvidia[\w-]*$", ln.strip()):
            out["dev_nodes"].append(ln.strip())
    if out["driver_version"] is None:
        raise ParseError(kind, "no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line")
    return out
