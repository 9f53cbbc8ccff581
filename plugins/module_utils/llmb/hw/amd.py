"""Parsers for AMD tools: amd-smi (default table, version, partition, static/topology/list --json)
and rocm-smi (concise table, --showtopo)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from ._text import ParseError, clean_lines, grab, load_json, na, to_float, to_int

ROCM_LINK_RE = re.compile(r"^(0|XGMI|PCIE|SELF|N/A)$")


# --------------------------------------------------------------------------- rocm-smi


def _rocm_sections(lines: list[str]):
    """Yield (title, [lines]) for each '==== title ====' section."""
    title = None
    body: list[str] = []
    for ln in lines:
        m = re.match(r"^=+\s*(.*?)\s*=+$", ln.strip())
        if m and ln.strip().startswith("="):
            if title is not None:
                yield title, body
            title, body = m.group(1), []
            continue
        body.append(ln)
    if title is not None:
        yield title, body


def _rocm_matrix(kind: str, title: str, body: list[str], cast):
    rows = [ln.split() for ln in body if ln.strip()]
    if not rows:
        raise ParseError(kind, f"section {title!r} is empty")
    header = rows[0]
    if not all(re.match(r"^GPU\d+$", h) for h in header):
        raise ParseError(kind, f"section {title!r}: header is not GPU0 GPU1 ...: {' '.join(header)!r}")
    matrix: dict = {}
    for r in rows[1:]:
        if not re.match(r"^GPU\d+$", r[0]):
            raise ParseError(kind, f"section {title!r}: row {' '.join(r)!r} does not start with GPUn")
        if len(r) - 1 != len(header):
            raise ParseError(kind, f"section {title!r}: row {r[0]} has {len(r) - 1} cells, header has {len(header)}")
        matrix[r[0]] = {}
        for col, cell in zip(header, r[1:], strict=True):
            if col != r[0]:
                matrix[r[0]][col] = cast(cell)
    missing = [h for h in header if h not in matrix]
    if missing:
        raise ParseError(kind, f"section {title!r}: no row for {', '.join(missing)} (capture truncated?)")
    return header, matrix


def parse_rocm_showtopo(text: str) -> dict:
    kind = "rocm-smi-topo"
    lines = clean_lines(text)
    out: dict = {"kind": kind, "gpus": [], "links": {}, "weights": {}, "hops": {}}
    numa: dict[int, dict] = {}
    header = None
    for title, body in _rocm_sections(lines):
        t = title.lower()
        if t.startswith("weight between"):
            header, out["weights"] = _rocm_matrix(kind, title, body, lambda c: to_int(c, kind))
        elif t.startswith("hops between"):
            _, out["hops"] = _rocm_matrix(kind, title, body, lambda c: to_int(c, kind))
        elif t.startswith("link type between"):
            def label(c):
                if not ROCM_LINK_RE.match(c):
                    raise ParseError(kind, f"unknown link type {c!r}")
                return c
            header, out["links"] = _rocm_matrix(kind, title, body, label)
        elif t.startswith("numa nodes"):
            for ln in body:
                m = re.match(r"^GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa (Node|Affinity):\s*(-?\d+)", ln.strip())
                if m:
                    numa.setdefault(int(m.group(1)), {})[m.group(2).lower()] = int(m.group(3))
                elif ln.strip():
                    raise ParseError(kind, f"Numa Nodes section: line not understood: {ln.strip()!r}")
    if header is None:
        raise ParseError(kind, "no 'Weight/Link Type between two GPUs' section")
    if not out["links"]:
        raise ParseError(kind, "no 'Link Type between two GPUs' section (capture truncated?)")
    for h in header:
        idx = int(h[3:])
        n = numa.get(idx, {})
        out["gpus"].append({"index": idx, "numa_node": n.get("node"), "numa_affinity": n.get("affinity")})
    return out


_ROCM_ROW_RE = re.compile(
    r"^(\d+)\s+(\d+)\s+(0x[0-9a-fA-F]+),\s+(\d+)\s+(\S+)\s+(\S+)\s+(.+?)\s+(\S+hz|N/A)\s+(\S+hz|N/A)\s+(\S+)\s+(\S+)"
    r"\s+(\S+)\s+(\S+)\s+(\S+)$",
    re.IGNORECASE,
)
_ROCM_ROW_MODEL_RE = re.compile(
    r"^(\d+)\s+\[(0x[0-9a-fA-F]+)\s*:\s*(0x[0-9a-fA-F]+)\]\s+(\S+)\s+(\S+)\s+(.+?)\s+(\S+hz|N/A)\s+(\S+hz|N/A)"
    r"\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$",
    re.IGNORECASE,
)


def parse_rocm_smi(text: str) -> dict:
    """Default (concise) `rocm-smi` table; two layouts (Node/IDs columns, or [Model : Revision])."""
    kind = "rocm-smi"
    lines = clean_lines(text)
    if not any("ROCm System Management Interface" in ln for ln in lines):
        raise ParseError(kind, "no 'ROCm System Management Interface' banner")
    gpus = []
    for n, ln in enumerate(lines, 1):
        s = ln.strip()
        m = _ROCM_ROW_RE.match(s)
        if m:
            g = m.groups()
            gpus.append(
                {"device": int(g[0]), "node": int(g[1]), "device_id": g[2], "guid": g[3], "name": None,
                 "temp_c": to_float(g[4]), "power_w": to_float(g[5]), "partitions": g[6],
                 "power_cap_w": to_float(g[11]), "vram_pct": to_int(g[12]), "gpu_pct": to_int(g[13])}
            )
            continue
        m = _ROCM_ROW_MODEL_RE.match(s)
        if m:
            g = m.groups()
            gpus.append(
                {"device": int(g[0]), "node": None, "device_id": g[1], "guid": None, "name": None,
                 "temp_c": to_float(g[3]), "power_w": to_float(g[4]), "partitions": g[5],
                 "power_cap_w": to_float(g[10]), "vram_pct": to_int(g[11]), "gpu_pct": to_int(g[12])}
            )
            continue
        if gpus and s and not s.startswith("=") and gpus[-1]["name"] is None and not re.match(r"^\d", s):
            gpus[-1]["name"] = s
            continue
        if re.match(r"^\d+\s", s):
            raise ParseError(kind, f"device row not understood: {s!r}", n)
    if not gpus:
        at = next((n for n, ln in enumerate(lines, 1) if re.match(r"^=+\s*\w", ln.strip())
                   and "ROCm System Management Interface" not in ln), None)
        raise ParseError(kind, "expected the concise table's device rows ('Device Node IDs Temp ...'), found none"
                         + (f" (section {lines[at - 1].strip(' =')!r}: another rocm-smi form?)" if at else ""), at)
    return {"kind": kind, "gpus": gpus}


# --------------------------------------------------------------------------- amd-smi text


def parse_amd_smi_table(text: str) -> dict:
    """Default `amd-smi` table (amd-smi 26.x)."""
    kind = "amd-smi"
    lines = clean_lines(text)
    head = next((ln for ln in lines if "AMD-SMI" in ln), None)
    if head is None:
        raise ParseError(kind, "no 'AMD-SMI <version>' banner")
    out = {
        "kind": kind,
        "version": grab(r"AMD-SMI\s+(\S+)", head),
        "amdgpu_version": grab(r"amdgpu version:\s+(\S+)", head),
        "rocm_version": grab(r"ROCm version:\s+(\S+)", head),
        "platform": None,
        "gpus": [],
    }
    for ln in lines:
        m = re.search(r"Platform:\s+(.+?)\s*\|?$", ln)
        if m:
            out["platform"] = m.group(1).strip()
    rows = [ln.strip() for ln in lines if ln.strip().startswith("|")]
    i = 0
    while i < len(rows):
        cells = [c.strip() for c in rows[i].strip("|").split("|")]
        m = re.match(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F])\s+(.+)$", cells[0])
        if m and len(cells) == 2:
            if i + 1 >= len(rows):
                raise ParseError(kind, f"{m.group(1)}: second row missing")
            c2 = [c.strip() for c in rows[i + 1].strip("|").split("|")]
            m2 = re.match(r"^(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$", c2[0]) if c2 else None
            if not m2 or len(c2) != 2:
                raise ParseError(kind, f"{m.group(1)}: second row damaged: {rows[i + 1]!r}")
            pw = re.search(r"(\S+)/(\S+)\s*W$", cells[1])
            mem = re.search(r"(\d+)/(\d+)\s*MB$", c2[1])
            temp = re.search(r"(\d+)\s*°C", cells[1])
            out["gpus"].append(
                {"gpu": int(m2.group(1)), "bdf": m.group(1), "name": m.group(2).strip(),
                 "hip_id": to_int(m2.group(2)), "oam_id": to_int(m2.group(3)), "partition_mode": m2.group(4),
                 "power_w": to_float(pw.group(1)) if pw else None,
                 "power_cap_w": to_float(pw.group(2)) if pw else None,
                 "temp_c": int(temp.group(1)) if temp else None,
                 "mem_used_mb": int(mem.group(1)) if mem else None,
                 "mem_total_mb": int(mem.group(2)) if mem else None}
            )
            i += 2
            continue
        i += 1
    if not out["gpus"] and not any("No GPUs" in ln for ln in lines):
        raise ParseError(kind, "banner found but no GPU rows (capture truncated?)")
    return out


def parse_amd_smi_version(text: str) -> dict:
    """`amd-smi version`: 'AMDSMI Tool: x | AMDSMI Library version: y | ROCm version: z | ...'."""
    kind = "amd-smi-version"
    line = " ".join(ln.strip() for ln in clean_lines(text) if ln.strip())
    if "AMDSMI Tool" not in line:
        raise ParseError(kind, "no 'AMDSMI Tool:' field")
    fields = {}
    for part in line.split(" | "):
        key, sep, value = part.partition(":")
        if not sep:
            raise ParseError(kind, f"field without ':' {part!r}")
        fields[re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")] = na(value.strip())
    return {
        "kind": kind,
        "tool": fields.get("amdsmi_tool"),
        "library": fields.get("amdsmi_library_version"),
        "rocm_version": fields.get("rocm_version"),
        "amdgpu_version": fields.get("amdgpu_version"),
        "fields": fields,
    }


def _table(lines: list[str], kind: str, title: str):
    """Rows under 'TITLE:' as dicts keyed by the header words (blank cells inherit from the row above)."""
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == title + ":")
    except StopIteration:
        return None
    if start + 1 >= len(lines):
        raise ParseError(kind, f"{title}: header missing")
    header_line = lines[start + 1]
    names = header_line.split()
    starts = [header_line.index(n) for n in names]
    rows = []
    prev: dict = {}
    for ln in lines[start + 2 :]:
        if not ln.strip() or ln.strip().endswith(":"):
            break
        row = {}
        for j, name in enumerate(names):
            a = starts[j]
            b = starts[j + 1] if j + 1 < len(names) else len(ln)
            row[name.lower()] = ln[a:b].strip() if a < len(ln) else ""
        for k, v in row.items():
            if v == "" and k in prev:
                row[k] = prev[k]
            elif re.fullmatch(r"\d+", row[k]):
                row[k] = int(row[k])
        rows.append(row)
        prev = row
    return rows


def parse_amd_smi_partition(text: str) -> dict:
    kind = "amd-smi-partition"
    lines = clean_lines(text)
    current = _table(lines, kind, "CURRENT_PARTITION")
    if current is None:
        raise ParseError(kind, "no CURRENT_PARTITION: table")
    profiles = _table(lines, kind, "ACCELERATOR_PARTITION_PROFILES") or []
    seen = set()
    profs = []
    for r in profiles:
        key = (r.get("gpu_id"), r.get("profile_index"))
        if key in seen:
            continue
        seen.add(key)
        acc = r.get("accelerator_type", "")
        profs.append(
            {"gpu_id": to_int(r.get("gpu_id")), "profile_index": to_int(r.get("profile_index")),
             "accelerator_type": acc.rstrip("*"), "current": acc.endswith("*"),
             "num_partitions": to_int(r.get("num_partitions"))}
        )
    return {"kind": kind, "current": current, "memory_partition": _table(lines, kind, "MEMORY_PARTITION") or [],
            "profiles": profs}


# --------------------------------------------------------------------------- amd-smi --json


def _load_json(text: str, kind: str):
    return load_json(text, kind)


def _gpu_list(data, kind: str) -> list:
    """amd-smi prints a list of GPU objects; newer releases wrap it as {"gpu_data": [...]}."""
    if isinstance(data, dict):
        for key in ("gpu_data", "gpus"):
            if isinstance(data.get(key), list):
                return data[key]
        if "gpu" in data:
            return [data]
    if isinstance(data, list):
        return data
    raise ParseError(kind, "expected a list of GPU objects")


def _value_unit(v):
    """{'value': 196592, 'unit': 'MB'} | '196592 MB' | 196592 -> (number, unit)."""
    if isinstance(v, dict):
        return v.get("value"), v.get("unit")
    if isinstance(v, (int, float)):
        return v, None
    if isinstance(v, str):
        m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$", v)
        if m:
            num = float(m.group(1))
            return (int(num) if num.is_integer() else num), (m.group(2) or None)
    return None, None


def _gpu_objects(text: str, kind: str) -> Iterator[dict]:
    """The GPU objects of an amd-smi --json output, each checked for its 'gpu' index as it is reached;
    an output without any is refused once the caller has read them all."""
    n = 0
    for g in _gpu_list(_load_json(text, kind), kind):
        if not isinstance(g, dict) or "gpu" not in g:
            raise ParseError(kind, "GPU object without a 'gpu' index")
        n += 1
        yield g
    if not n:
        raise ParseError(kind, "no GPU objects")


def _to_mib(v) -> int | None:
    num, unit = _value_unit(v)
    if not isinstance(num, (int, float)):
        return None
    factor = {None: 1, "MB": 1, "MiB": 1, "GB": 1024, "GiB": 1024, "KB": 1 / 1024, "B": 1 / (1024 * 1024)}
    return int(num * factor.get(unit, 1))


def parse_amd_smi_static_json(text: str) -> dict:
    kind = "amd-smi-static-json"
    gpus = []
    for g in _gpu_objects(text, kind):
        gpus.append(_static_gpu(g["gpu"], g, lambda v: v))
    return {"kind": kind, "gpus": gpus}


def parse_amd_smi_topology_json(text: str) -> dict:
    """`amd-smi topology --json`: new layout (links list) and old layout (per-metric dicts)."""
    kind = "amd-smi-topology-json"
    gpus = []
    links: dict = {}
    status: dict = {}
    weights: dict = {}
    hops: dict = {}
    for g in _gpu_objects(text, kind):
        a = f"GPU{g['gpu']}"
        gpus.append({"index": g["gpu"], "bdf": na(g.get("bdf"))})
        links[a], status[a], weights[a], hops[a] = {}, {}, {}, {}
        if isinstance(g.get("links"), list):
            for ln in g["links"]:
                b = f"GPU{ln.get('gpu')}"
                if b == a:
                    continue
                links[a][b] = ln.get("link_type")
                status[a][b] = ln.get("link_status")
                weights[a][b] = ln.get("weight")
                hops[a][b] = ln.get("num_hops")
        elif isinstance(g.get("link_type"), dict):
            for key, value in g["link_type"].items():
                b = "GPU" + key.split("_")[-1]
                if b == a:
                    continue
                links[a][b] = value
                status[a][b] = (g.get("link_accessibility") or {}).get(key)
                weights[a][b] = (g.get("weight") or {}).get(key)
                hops[a][b] = (g.get("hops") or {}).get(key)
        else:
            raise ParseError(kind, f"{a}: neither 'links' nor 'link_type' present")
    return {"kind": kind, "gpus": gpus, "links": links, "link_status": status, "weights": weights, "hops": hops}


def parse_amd_smi_list_json(text: str) -> dict:
    kind = "amd-smi-list-json"
    gpus = []
    for g in _gpu_objects(text, kind):
        gpus.append({"gpu": g["gpu"], "bdf": na(g.get("bdf")), "uuid": na(g.get("uuid")),
                     "kfd_id": g.get("kfd_id"), "node_id": g.get("node_id"), "partition_id": g.get("partition_id")})
    return {"kind": kind, "gpus": gpus}


# --------------------------------------------------------------------------- amd-smi text (list, static, metric)
#
# `amd-smi list|static|metric` without --json print one block per GPU: a 'GPU: N' line, then
# 'KEY: value' lines indented by 4 per level; a key with nothing after its colon opens a section
# (amd-smi 24.x - 26.x, public captures in tests/fixtures/public/amd-smi). The same facts as the JSON
# twins come out (one data model, two readers): keys are lower-cased as the JSON forms spell them.

_ELIDED = ("...", "\u2026")


def _amd_text_blocks(text: str, kind: str) -> tuple[list[tuple[int, dict, int]], list[int]]:
    """[(gpu index, nested dict of the block, line of 'GPU: N')], [lines elided with '...']."""
    blocks: list[tuple[int, dict, int]] = []
    elided: list[int] = []
    stack: list[tuple[int, dict]] = []
    base = None
    for n, raw in enumerate(clean_lines(text), 1):
        if not raw.strip():
            continue
        s = raw.strip()
        if s in _ELIDED:
            elided.append(n)
            continue
        m = re.match(r"^GPU:\s*(\d+)$", s)
        if m:
            block: dict = {}
            blocks.append((int(m.group(1)), block, n))
            base = len(raw) - len(raw.lstrip())
            stack = [(base, block)]
            continue
        if not blocks:
            raise ParseError(kind, f"expected a 'GPU: N' line first, found {s[:60]!r}", n)
        indent = len(raw) - len(raw.lstrip())
        key, sep, value = s.partition(":")
        if not sep or not key.strip():
            raise ParseError(kind, f"expected 'KEY: value' under GPU {blocks[-1][0]}, found {s[:60]!r}", n)
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        key = key.strip().lower()
        value = value.strip()
        if value:
            parent[key] = value
        else:
            child: dict = {}
            parent[key] = child
            stack.append((indent, child))
    if not blocks:
        raise ParseError(kind, "expected 'GPU: N' blocks, found none")
    return blocks, elided


def _num(v):
    v = na(v) if isinstance(v, str) else v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def parse_amd_smi_list_text(text: str) -> dict:
    """`amd-smi list` (and `list -e`): BDF, UUID, KFD_ID, NODE_ID, PARTITION_ID (+ the -e extras)."""
    kind = "amd-smi-list"
    blocks, elided = _amd_text_blocks(text, kind)
    gpus, warnings = [], []
    seen: dict = {}
    for gpu, b, n in blocks:
        rec = {"gpu": gpu, "bdf": na(b.get("bdf")), "uuid": na(b.get("uuid")), "kfd_id": _num(b.get("kfd_id")),
               "node_id": _num(b.get("node_id")), "partition_id": _num(b.get("partition_id"))}
        rec.update({k: _num(v) for k, v in b.items() if k not in rec and not isinstance(v, dict)})
        gpus.append(rec)
        if rec["uuid"] and rec["uuid"] in seen:
            warnings.append(f"line {n}: GPU {gpu} reports the same UUID as GPU {seen[rec['uuid']]} ({rec['uuid']}):"
                            " amd-smi could not read the real ones (run it as root; ROCm 7.0 fixes duplicate UUIDs)")
        seen.setdefault(rec["uuid"], gpu)
    return {"kind": kind, "gpus": gpus, "warnings": warnings, "elisions": elided}


def _static_gpu(gpu: Any, sections: dict, num: Callable[[Any], Any]) -> dict:
    """One GPU's static facts from its asic/vram/driver/bus/numa sections, in the JSON form or the text
    form (``num`` reads a NUMA number there)."""
    asic, vram, driver = sections.get("asic") or {}, sections.get("vram") or {}, sections.get("driver") or {}
    bus, numa = sections.get("bus") or {}, sections.get("numa") or {}
    node, aff = num(numa.get("node")), num(numa.get("affinity"))
    return {
        "gpu": gpu,
        "market_name": na(asic.get("market_name")),
        "device_id": na(asic.get("device_id")),
        "target_graphics_version": na(asic.get("target_graphics_version")),
        "vram_type": na(vram.get("type")),
        "vram_mib": _to_mib(vram.get("size")),
        "driver_name": na(driver.get("name")),
        "driver_version": na(driver.get("version")),
        "bdf": na(bus.get("bdf")),
        "numa_node": node if isinstance(node, int) else None,
        "numa_affinity": aff if isinstance(aff, int) else None,
    }


def parse_amd_smi_static_text(text: str) -> dict:
    """`amd-smi static`: the facts of `amd-smi static --json` from its text form."""
    kind = "amd-smi-static"
    blocks, elided = _amd_text_blocks(text, kind)
    gpus = []
    for gpu, b, _n in blocks:
        gpus.append(_static_gpu(gpu, b, _num))
    return {"kind": kind, "gpus": gpus, "elisions": elided}


def parse_amd_smi_metric_text(text: str) -> dict:
    """`amd-smi metric`: temperature, VRAM use and ECC counts per GPU."""
    kind = "amd-smi-metric"
    blocks, elided = _amd_text_blocks(text, kind)
    gpus = []
    for gpu, b, _n in blocks:
        temp, mem, ecc = b.get("temperature") or {}, b.get("mem_usage") or {}, b.get("ecc") or {}
        t = re.match(r"^(-?\d+(?:\.\d+)?)", na(temp.get("edge")) or "") if isinstance(temp, dict) else None
        gpus.append({
            "gpu": gpu,
            "temp_edge_c": float(t.group(1)) if t else None,
            "vram_total_mib": _to_mib(mem.get("total_vram")) if isinstance(mem, dict) else None,
            "vram_used_mib": _to_mib(mem.get("used_vram")) if isinstance(mem, dict) else None,
            "ecc_correctable": _num(ecc.get("total_correctable_count")) if isinstance(ecc, dict) else None,
            "ecc_uncorrectable": _num(ecc.get("total_uncorrectable_count")) if isinstance(ecc, dict) else None,
        })
    return {"kind": kind, "gpus": gpus, "elisions": elided}


# --------------------------------------------------------------------------- rocm-smi --showproductname

_PRODUCT_KEYS = {"card series": "card_series", "card model": "device_id", "card vendor": "vendor",
                 "card sku": "sku", "subsystem id": "subsystem_id", "device rev": "device_rev", "node id": "node_id",
                 "guid": "guid", "gfx version": "gfx_version"}


def parse_rocm_productname(text: str) -> dict:
    """`rocm-smi --showproductname`: 'GPU[n] : Card Series: ...' lines (ROCm 4.x: 4 fields, 6.x: 9)."""
    kind = "rocm-smi-productname"
    lines = clean_lines(text)
    if not any("ROCm System Management Interface" in ln for ln in lines):
        raise ParseError(kind, "expected the 'ROCm System Management Interface' banner, found none")
    gpus: dict = {}
    elided = []
    for n, ln in enumerate(lines, 1):
        s = ln.strip()
        if not s or s.startswith("="):
            continue
        if s in _ELIDED:
            elided.append(n)
            continue
        m = re.match(r"^GPU\[(\d+)\]\s*:\s*([^:]+?)\s*:\s*(.*)$", s)
        if not m:
            raise ParseError(kind, f"expected 'GPU[n] : <field>: <value>', found {s[:60]!r}", n)
        key = _PRODUCT_KEYS.get(m.group(2).strip().lower())
        rec = gpus.setdefault(int(m.group(1)), {"gpu": int(m.group(1))})
        if key:
            value = na(m.group(3).strip())
            rec[key] = int(value) if key in ("node_id", "guid") and value and value.isdigit() else value
    if not gpus:
        raise ParseError(kind, "expected 'GPU[n] : Card Series: ...' lines under 'Product Info', found none",
                         next((i for i, ln in enumerate(lines, 1) if "Product Info" in ln), None))
    return {"kind": kind, "gpus": [gpus[k] for k in sorted(gpus)], "elisions": elided}
