"""Parsers for host-side facts: numactl -H, lscpu (text and -J), /proc/sys/kernel/numa_balancing,
ibstat, ibv_devinfo, the sysfs PCI listing, os-release, systemctl is-active, and the small probes
(CUDA init via ctypes, torch info / peer access / copy bandwidth, nccl-tests)."""

from __future__ import annotations

import ast
import json
import re

from ._text import ParseError, clean_lines, load_json, na, nonblank_lines, parse_cpulist, to_int

# --------------------------------------------------------------------------- NUMA / CPU


def parse_numactl(text: str) -> dict:
    """`numactl -H` / `numactl --hardware`."""
    kind = "numactl"
    numbered = [(n, ln) for n, ln in enumerate(clean_lines(text), 1) if ln.strip()]
    lines = [ln for _, ln in numbered]
    if not lines:
        raise ParseError(kind, "empty output")
    if any("No NUMA available" in ln for ln in lines):
        return {"kind": kind, "available": 0, "nodes": [], "distances": [], "warnings": ["No NUMA available"]}
    m = re.match(r"^available:\s+(\d+) nodes?\s+\(([^)]*)\)", lines[0].strip())
    if not m:
        raise ParseError(kind, f"first line is not 'available: N nodes (...)': {lines[0].strip()!r}", numbered[0][0])
    available = int(m.group(1))
    node_ids = parse_cpulist(m.group(2), kind)
    nodes: dict[int, dict] = {n: {"node": n, "cpus": None, "size_mb": None, "free_mb": None} for n in node_ids}
    distances: list[list[int]] = []
    dist_cols: list[int] | None = None
    for n, raw in numbered[1:]:
        s = raw.strip()
        m = re.match(r"^node (\d+) cpus:\s*(.*)$", s)
        if m:
            node = nodes.get(int(m.group(1)))
            if node is None:
                raise ParseError(kind, f"node {m.group(1)} not in 'available' list", n)
            cpus = m.group(2).split()
            if not all(c.isdigit() for c in cpus):
                raise ParseError(kind, f"node {m.group(1)}: CPU list not understood: {m.group(2)!r}", n)
            node["cpus"] = [int(c) for c in cpus]
            continue
        m = re.match(r"^node (\d+) (size|free):\s*(\d+) MB$", s)
        if m:
            nodes[int(m.group(1))][f"{m.group(2)}_mb"] = int(m.group(3))
            continue
        if s == "node distances:":
            dist_cols = []
            continue
        m = re.match(r"^node(\s+\d+)+$", s)
        if m and dist_cols is not None:
            dist_cols = [int(x) for x in s.split()[1:]]
            continue
        m = re.match(r"^(\d+):((\s+\d+)+)$", s)
        if m and dist_cols:
            row = [int(x) for x in m.group(2).split()]
            if len(row) != len(dist_cols):
                raise ParseError(kind, f"distance row {m.group(1)} has {len(row)} values, expected {len(dist_cols)}", n)
            distances.append(row)
            continue
        raise ParseError(kind, f"unexpected line {s!r}", n)
    for node in nodes.values():
        if node["cpus"] is None:
            raise ParseError(kind, f"node {node['node']}: no 'cpus:' line (capture truncated?)")
    if len(nodes) != available:
        raise ParseError(kind, f"'available: {available} nodes' but {len(nodes)} node ids listed")
    if len(distances) != available:
        raise ParseError(kind, f"distance matrix has {len(distances)} rows, expected {available} (truncated?)")
    return {"kind": kind, "available": available, "nodes": [nodes[k] for k in sorted(nodes)],
            "distances": distances, "warnings": []}


def _lscpu_fields_from_json(data, kind) -> dict:
    if not isinstance(data, dict) or not isinstance(data.get("lscpu"), list):
        raise ParseError(kind, "expected {\"lscpu\": [...]}")
    fields: dict = {}

    def walk(items):
        for it in items:
            if not isinstance(it, dict) or "field" not in it:
                raise ParseError(kind, f"entry without 'field': {it!r}")
            fields.setdefault(it["field"].rstrip(":").strip(), it.get("data"))
            if it.get("children"):
                walk(it["children"])

    walk(data["lscpu"])
    return fields


def _lscpu(fields: dict, kind: str) -> dict:
    if "Architecture" not in fields or "CPU(s)" not in fields:
        raise ParseError(kind, "no 'Architecture' or 'CPU(s)' field (capture truncated?)")
    numa = []
    for key, value in fields.items():
        m = re.match(r"^NUMA node(\d+) CPU\(s\)$", key)
        if m:
            numa.append({"node": int(m.group(1)), "cpus": parse_cpulist(value or "", kind)})
    numa.sort(key=lambda n: n["node"])
    declared = to_int(fields.get("NUMA node(s)")) if fields.get("NUMA node(s)") else None
    if declared is not None and declared != len(numa):
        raise ParseError(kind, f"'NUMA node(s): {declared}' but {len(numa)} 'NUMA nodeN CPU(s)' lines (truncated?)")
    model = na(fields.get("Model name"))
    if model is None:
        model = na(fields.get("BIOS Model name"))
    online = fields.get("On-line CPU(s) list")
    return {
        "kind": "lscpu",
        "architecture": fields.get("Architecture"),
        "cpus": to_int(fields.get("CPU(s)")),
        "online_cpus": parse_cpulist(online, kind) if online else None,
        "model_name": model,
        "vendor_id": fields.get("Vendor ID"),
        "sockets": to_int(fields.get("Socket(s)")) if fields.get("Socket(s)") else None,
        "cores_per_socket": to_int(fields.get("Core(s) per socket")) if fields.get("Core(s) per socket") else None,
        "threads_per_core": to_int(fields.get("Thread(s) per core")) if fields.get("Thread(s) per core") else None,
        "hypervisor_vendor": fields.get("Hypervisor vendor"),
        "numa_nodes": numa,
        "amx": {"amx_tile", "amx_int8", "amx_bf16"} <= set(str(fields.get("Flags") or "").split()),
        "fields": fields,
    }


def parse_lscpu(text: str) -> dict:
    """`lscpu`. A line that is not 'Field: value' after a field (a Flags value hard-wrapped by a narrow
    terminal) is read as the rest of that field's value, with a warning naming the line: the facts
    before and after it are kept. Such a line before any field is refused."""
    kind = "lscpu"
    fields: dict = {}
    warnings: list[str] = []
    last = None
    for n, raw in enumerate(clean_lines(text), 1):
        if not raw.strip():
            continue
        key, sep, value = raw.partition(":")
        if not sep:
            if last is None:
                raise ParseError(kind, f"expected a 'Field: value' line, found {raw.strip()[:60]!r}", n)
            warnings.append(f"line {n}: expected a 'Field: value' line; read as the rest of {last!r} "
                            "(a value wrapped onto the next line by a narrow terminal?)")
            fields[last] = (fields[last] + " " + raw.strip()).strip()
            continue
        last = key.strip()
        fields.setdefault(last, value.strip())
    out = _lscpu(fields, kind)
    if warnings:
        out["warnings"] = warnings
    return out


def parse_lscpu_json(text: str) -> dict:
    kind = "lscpu-json"
    return _lscpu(_lscpu_fields_from_json(load_json(text, kind), kind), kind)


def parse_numa_balancing(text: str) -> dict:
    kind = "numa-balancing"
    s = text.strip()
    if not re.fullmatch(r"\d+", s):
        raise ParseError(kind, f"expected one integer from /proc/sys/kernel/numa_balancing, found {s[:40]!r}")
    return {"kind": kind, "value": int(s)}


# --------------------------------------------------------------------------- RDMA


def parse_ibstat(text: str) -> dict:
    """`ibstat`. When ibstat cannot stat a device it prints `ibpanic: [pid] main: stat of IB device 'X'
    failed: ...` and exits 255 before the remaining devices (rdma-core before PR #1501): that line is a
    tool failure (tool_errors, a finding), never a field of the previous device; `...` is an elision."""
    kind = "ibstat"
    cas: list[dict] = []
    port = None
    tool_errors: list[dict] = []
    elisions: list[int] = []
    for n, s in nonblank_lines(text):
        if re.match(r"^(ibpanic|ibwarn|ibstat):|^ibstat: ", s) or re.match(r"^(ibpanic|ibwarn)\b", s):
            m = re.search(r"IB device '([^']+)'", s)
            tool_errors.append({"line": n, "text": s[:200], "device": m.group(1) if m else None})
            port = None
            continue
        if s in ("...", "\u2026"):
            elisions.append(n)
            continue
        m = re.match(r"^CA '([^']+)'$", s)
        if m:
            cas.append({"name": m.group(1), "ports": []})
            port = None
            continue
        if not cas:
            raise ParseError(kind, f"line before the first \"CA '<name>'\": {s!r}", n)
        m = re.match(r"^Port (\d+):$", s)
        if m:
            port = {"port": int(m.group(1))}
            cas[-1]["ports"].append(port)
            continue
        key, sep, value = s.partition(":")
        if not sep:
            raise ParseError(kind, f"not a 'Key: value' line: {s!r}", n)
        key = re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")
        value = value.strip()
        target = port if port is not None else cas[-1]
        if value in ("...", "\u2026"):
            elisions.append(n)
            continue
        if key in ("rate", "base_lid", "sm_lid", "lmc", "number_of_ports"):
            target[key if key != "rate" else "rate_gbps"] = to_int(value, kind)
        else:
            target[key] = value
    if not cas and not tool_errors:
        raise ParseError(kind, "expected \"CA '<name>'\" blocks, found none")
    for ca in cas:
        if ca.get("number_of_ports") is not None and len(ca["ports"]) != ca["number_of_ports"]:
            raise ParseError(kind, f"{ca['name']}: {ca['number_of_ports']} ports declared, {len(ca['ports'])} listed")
    return {"kind": kind, "cas": cas, "tool_errors": tool_errors, "elisions": elisions}


def parse_ibv_devinfo(text: str) -> dict:
    kind = "ibv-devinfo"
    hcas: list[dict] = []
    port = None
    for n, s in nonblank_lines(text):
        key, sep, value = s.partition(":")
        if not sep:
            raise ParseError(kind, f"not a 'key: value' line: {s!r}", n)
        key = key.strip()
        value = value.strip()
        if key == "hca_id":
            hcas.append({"name": value, "ports": []})
            port = None
            continue
        if not hcas:
            raise ParseError(kind, f"line before the first 'hca_id:': {s!r}", n)
        if key == "port":
            port = {"port": to_int(value, kind)}
            hcas[-1]["ports"].append(port)
            continue
        target = port if port is not None else hcas[-1]
        if key == "state":
            m = re.match(r"^(\S+)", value)
            value = m.group(1) if m else value
        target[key] = value
    if not hcas:
        raise ParseError(kind, "no 'hca_id:' block")
    return {"kind": kind, "hcas": hcas}


# --------------------------------------------------------------------------- sysfs / OS / services


_PCI_LINE = re.compile(r"^/sys/bus/pci/devices/(\S+)((?:\s+\w+=\S*)+)\s*$")


def parse_pci_devices(text: str) -> dict:
    """Lines '/sys/bus/pci/devices/<bdf> class=0x030200 numa=-1 vendor=0x10de device=0x2335 cpus=0-31'.

    `ls -la` lines of /sys/devices/system/node (as in some captures) are read for node names.
    """
    kind = "pci-devices"
    devices = []
    sysfs_nodes = []
    for n, s in nonblank_lines(text):
        m = _PCI_LINE.match(s)
        if m:
            attrs = dict(kv.split("=", 1) for kv in m.group(2).split())
            numa = to_int(attrs.get("numa")) if attrs.get("numa") not in (None, "") else None
            cpus = attrs.get("cpus")
            devices.append(
                {"address": m.group(1), "class": attrs.get("class"), "vendor": attrs.get("vendor"),
                 "device": attrs.get("device"), "numa_node": None if numa is None or numa < 0 else numa,
                 "cpus": parse_cpulist(cpus, kind) if cpus else None}
            )
            continue
        if re.match(r"^(total \d+|[-dlrwxs]{10}\S*\s)", s):
            m = re.search(r"\s(node\d+)$", s)
            if m:
                sysfs_nodes.append(m.group(1))
            continue
        raise ParseError(kind, f"unexpected line {s!r}", n)
    return {"kind": kind, "devices": devices, "sysfs_nodes": sysfs_nodes}


def parse_os_release(text: str) -> dict:
    kind = "os-release"
    fields = {}
    extra = 0
    for raw in clean_lines(text):
        s = raw.strip()
        if not s:
            continue
        m = re.match(r'^([A-Z_][A-Z0-9_]*)=(.*)$', s)
        if m and not extra:
            v = m.group(2)
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                v = v[1:-1]
            fields[m.group(1)] = v
        else:
            extra += 1
    if "ID" not in fields:
        raise ParseError(kind, "no ID= line")
    warnings = [f"{extra} lines after os-release ignored"] if extra else []
    return {"kind": kind, "id": fields.get("ID"), "version_id": fields.get("VERSION_ID"),
            "pretty_name": fields.get("PRETTY_NAME"), "fields": fields, "warnings": warnings}


SYSTEMD_STATES = ("active", "inactive", "failed", "activating", "deactivating", "reloading", "unknown", "maintenance")


def parse_systemctl_is_active(text: str) -> dict:
    kind = "systemctl-is-active"
    s = text.strip().splitlines()[0].strip() if text.strip() else ""
    if s not in SYSTEMD_STATES:
        raise ParseError(kind, f"expected one of {', '.join(SYSTEMD_STATES)}, found {s[:60]!r}")
    return {"kind": kind, "state": s}


def parse_process_list(text: str) -> dict:
    """`pgrep -a NAME`-style lines '<pid> <cmdline>' (empty when none)."""
    kind = "process-list"
    procs = []
    for n, s in nonblank_lines(text):
        m = re.match(r"^(\d+)\s+(.*)$", s)
        if not m:
            raise ParseError(kind, f"expected '<pid> <command>', found {s!r}", n)
        procs.append({"pid": int(m.group(1)), "command": m.group(2)})
    return {"kind": kind, "processes": procs}


# --------------------------------------------------------------------------- small probes


def parse_cuda_probe(text: str) -> dict:
    """JSON printed by the CUDA-init probe (cuInit + cuDeviceGetCount through ctypes)."""
    kind = "cuda-probe"
    line = next((ln for ln in reversed(text.strip().splitlines()) if ln.strip().startswith("{")), None)
    if line is None:
        raise ParseError(kind, f"no JSON line in probe output: {text.strip()[:80]!r}")
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ParseError(kind, f"probe output is not JSON ({exc})") from None
    if "present" not in data:
        raise ParseError(kind, "probe JSON lacks 'present'")
    data["kind"] = kind
    return data


def parse_torch_info(text: str) -> dict:
    """'2.11.0+cu130 13.0 1 NVIDIA H100 80GB HBM3 (9, 0)' (version, cuda, count, name of device 0, capability)."""
    kind = "torch-info"
    s = text.strip()
    m = re.match(r"^(\S+)\s+(\S+)\s+(\d+)\s+(.+?)\s+\((\d+),\s*(\d+)\)$", s)
    if not m:
        raise ParseError(kind, f"expected '<torch> <cuda> <count> <name> (<major>, <minor>)', found {s[:80]!r}")
    return {"kind": kind, "torch": m.group(1), "cuda": na(m.group(2)), "device_count": int(m.group(3)),
            "device_name": m.group(4), "capability": [int(m.group(5)), int(m.group(6))]}


def parse_torch_p2p(text: str) -> dict:
    """Matrix printed by torch.cuda.can_device_access_peer for every pair (None on the diagonal)."""
    kind = "torch-p2p"
    s = text.strip()
    try:
        matrix = ast.literal_eval(s)
    except (ValueError, SyntaxError):
        raise ParseError(kind, f"not a Python list of lists: {s[:80]!r}") from None
    if not isinstance(matrix, list) or any(not isinstance(r, list) or len(r) != len(matrix) for r in matrix):
        raise ParseError(kind, "not a square matrix")
    return {"kind": kind, "matrix": matrix}


def parse_torch_bw(text: str) -> dict:
    """Lines 'gpu0->gpu1 GB/s 394.8' and 'allreduce busbw GB/s 360.1' (other lines ignored)."""
    kind = "torch-bw"
    copies = []
    allreduce = None
    for raw in clean_lines(text):
        m = re.match(r"^gpu(\d+)->gpu(\d+) GB/s ([\d.]+)\s*$", raw.strip())
        if m:
            copies.append({"src": int(m.group(1)), "dst": int(m.group(2)), "gbps": float(m.group(3))})
            continue
        m = re.match(r"^allreduce busbw GB/s ([\d.]+)\s*$", raw.strip())
        if m:
            allreduce = float(m.group(1))
    if not copies and allreduce is None:
        raise ParseError(kind, "no 'gpuA->gpuB GB/s X' or 'allreduce busbw GB/s X' line")
    return {"kind": kind, "copies": copies, "allreduce_busbw_gbps": allreduce}


def parse_nccl_tests(text: str) -> dict:
    """nccl-tests (all_reduce_perf ...): data rows and the '# Avg bus bandwidth' line."""
    kind = "nccl-tests"
    rows = []
    avg = None
    wrong = None
    for raw in clean_lines(text):
        s = raw.strip()
        m = re.match(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)", s)
        if m:
            avg = float(m.group(1))
            continue
        m = re.match(r"^#\s*Out of bounds values\s*:\s*(\d+)", s)
        if m:
            wrong = int(m.group(1))
            continue
        parts = s.split()
        if len(parts) >= 12 and parts[0].isdigit() and parts[1].isdigit():
            try:
                rows.append({"size_bytes": int(parts[0]), "type": parts[2], "op": parts[3],
                             "algbw_gbps": float(parts[6]), "busbw_gbps": float(parts[7]),
                             "inplace_busbw_gbps": float(parts[11])})
            except ValueError:
                raise ParseError(kind, f"data row not understood: {s!r}") from None
    if avg is None and not rows:
        raise ParseError(kind, "no data rows and no '# Avg bus bandwidth' line")
    peak = max((max(r["busbw_gbps"], r["inplace_busbw_gbps"]) for r in rows), default=None)
    return {"kind": kind, "rows": rows, "avg_busbw_gbps": avg, "peak_busbw_gbps": peak, "out_of_bounds": wrong}
