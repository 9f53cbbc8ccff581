"""Turn a node's raw probe outputs into one normalised facts dict (controller side, stdlib only).

Input: the probes list returned by llmb.hw.probes.run_probes() (or read back from a bundle
directory): [{'name', 'kind', 'cmd', 'rc', 'stdout', 'stderr', 'ok_rcs'}]. Output: the facts that
llmbctl.verify compares with a platform profile; docs/verify.md describes every key.
"""

from __future__ import annotations

import os
import re

from llmb.finding import Finding
from llmb.hw._text import ParseError, split_capture
from llmb.hw.kinds import detect_kind

from .check import parse_checked

_HCCN_CMD = re.compile(r"hccn_tool\s+-i\s+(\d+)\s+-(\w+)")


def norm_bus(bus: str | None) -> str | None:
    """'00000000:1B:00.0' / '0000:1b:00.0' -> '0000:1b:00.0'."""
    if not bus:
        return None
    m = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-9A-Fa-f])", bus.strip())
    if not m:
        return bus.strip().lower()
    return f"{int(m.group(1), 16):04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()


def _parse_all(probes: list[dict]):
    parsed: dict[str, list[tuple[dict, dict]]] = {}
    errors: list[dict] = []
    collected: list[str] = []
    for pr in probes:
        kind = pr.get("kind")
        ok_rcs = pr.get("ok_rcs") or [0]
        if pr.get("rc") == 127 and not pr.get("stdout"):
            errors.append({"probe": pr["name"], "kind": kind, "cmd": pr.get("cmd"),
                           "error": f"tool not installed ({(pr.get('stderr') or '').strip()[:200]})",
                           "missing_tool": True})
            continue
        if pr.get("rc") not in ok_rcs and not (pr.get("stdout") or "").strip():
            errors.append({"probe": pr["name"], "kind": kind, "cmd": pr.get("cmd"),
                           "error": f"exit status {pr.get('rc')}: {(pr.get('stderr') or '').strip()[:300]}"})
            continue
        kwargs = {}
        if kind == "hccn-tool":
            m = _HCCN_CMD.search(pr.get("cmd") or "")
            if m:
                kwargs["device"] = int(m.group(1))
        res = parse_checked(pr.get("stdout") or "", kind, command=pr.get("cmd") or "", **kwargs)
        # "capture": the output was read and found damaged; "line" is a line of the bundle file (of the
        # probe's output when it comes from a live run: line_offset 0).
        off = pr.get("line_offset", 0)
        found = [Finding.capture(f.severity, f.line + off if f.line else None, f.text, f.message) for f in res.errors]
        if res.facts is None:
            errors.append({"probe": pr["name"], "kind": kind, "cmd": pr.get("cmd"), "rc": pr.get("rc"),
                           "error": f"{kind}: " + "; ".join(str(f) for f in found),
                           "line": found[0].line, "capture": True})
            continue
        result = res.facts
        for f in found:
            errors.append({"probe": pr["name"], "kind": kind, "cmd": pr.get("cmd"), "parsed": True,
                           "error": f"{kind}: {f}", "line": f.line, "capture": True})
        if pr.get("rc") not in ok_rcs:
            # A tool that failed is a finding even when it printed something first (ibstat stops at the
            # device it cannot stat with exit 255): the capture check fails, naming the status and stderr.
            errors.append({"probe": pr["name"], "kind": kind, "cmd": pr.get("cmd"), "parsed": True, "capture": True,
                           "error": f"exit status {pr.get('rc')} (output parsed up to the failure): "
                                    f"{(pr.get('stderr') or '').strip()[:200] or 'no stderr'}"})
        parsed.setdefault(kind, []).append((pr, result))
        collected.append(pr["name"])
    return parsed, errors, collected


def _first(parsed, kind):
    items = parsed.get(kind) or []
    return items[0][1] if items else None


def _take(target: dict, key: str, parsed, kind: str, pick) -> None:
    """target[key] = pick(the first capture of kind's facts), when there is such a capture."""
    res = _first(parsed, kind)
    if res is not None:
        target[key] = pick(res)


def build_facts(probes: list[dict], vendor: str | None = None) -> dict:
    parsed, errors, collected = _parse_all(probes)
    facts: dict = {
        "vendor": vendor,
        "driver_version": None,
        "devices": [],
        "matrix": None,
        "device_links": None,
        "nics": [],
        "rdma_ports": None,
        "numa": {"nodes": None, "balancing": None},
        "fabric_manager": {"service": None, "process": None, "cuda_init": None},
        "hccn": None,
        # Device health: None where the probe did not run or could not be read (the checks skip).
        "health": {"kernel_log": None, "nvlink_errors": None, "modules": None, "nvidia_params": None, "acs": None},
        "collected": collected,
        "errors": errors,
        "warnings": [],
    }
    for items in parsed.values():
        for pr, res in items:
            for w in res.get("warnings", []) or []:
                facts["warnings"].append(f"{pr['name']}: {w}")
    if vendor in (None, "auto"):
        if any(k.startswith("nvidia") for k in parsed):
            facts["vendor"] = "nvidia"
        elif any(k.startswith(("npu-smi", "hccn", "ascend")) for k in parsed):
            facts["vendor"] = "ascend"
        elif any(k.startswith(("amd-smi", "rocm-smi")) for k in parsed):
            facts["vendor"] = "amd"
        else:
            facts["vendor"] = "none"
    _host(facts, parsed)
    if facts["vendor"] == "nvidia":
        _nvidia(facts, parsed)
    elif facts["vendor"] == "amd":
        _amd(facts, parsed)
    elif facts["vendor"] == "ascend":
        _ascend(facts, parsed)
    return facts


# --------------------------------------------------------------------------- host


def _host(facts, parsed):
    lscpu = _first(parsed, "lscpu") or _first(parsed, "lscpu-json")
    facts["cpu_amx"] = lscpu["amx"] if lscpu is not None else None  # KTransformers' AMX rules
    numa = _first(parsed, "numactl")
    if numa is not None:
        facts["numa"]["nodes"] = [{"node": n["node"], "cpus": n["cpus"], "size_mb": n["size_mb"]} for n in numa["nodes"]]
    else:
        cpu = _first(parsed, "lscpu") or _first(parsed, "lscpu-json")
        if cpu is not None and cpu["numa_nodes"]:
            facts["numa"]["nodes"] = [{"node": n["node"], "cpus": n["cpus"], "size_mb": None} for n in cpu["numa_nodes"]]
    _take(facts["numa"], "balancing", parsed, "numa-balancing", lambda r: r["value"])
    _take(facts["health"], "modules", parsed, "proc-modules", lambda r: r["modules"])
    _take(facts["health"], "acs", parsed, "pci-acs", lambda r: r["devices"])
    ib = _first(parsed, "ibstat")
    if ib is not None:
        facts["rdma_ports"] = [
            {"name": ca["name"], "port": p["port"], "state": p.get("state"), "physical_state": p.get("physical_state"),
             "rate_gbps": p.get("rate_gbps"), "link_layer": p.get("link_layer")}
            for ca in ib["cas"] for p in ca["ports"]
        ]


def _pci_numa(parsed) -> dict:
    pci = _first(parsed, "pci-devices")
    if pci is None:
        return {}
    return {norm_bus(d["address"]): d for d in pci["devices"]}


# --------------------------------------------------------------------------- NVIDIA


def _nvidia(facts, parsed):
    xml = _first(parsed, "nvidia-smi-q-xml") or _first(parsed, "nvidia-smi-q")
    query = _first(parsed, "nvidia-smi-query")
    table = _first(parsed, "nvidia-smi")
    devices: list[dict] = []
    by_bus: dict = {}
    if query is not None:
        for i, g in enumerate(query["gpus"]):
            idx = g.get("index", i)
            d = {"index": idx, "name": f"GPU{idx}", "model": g.get("name"), "memory_mib": g.get("memory_total_mib"),
                 "bus_id": norm_bus(g.get("pci_bus_id")), "uuid": g.get("uuid"),
                 "persistence_mode": g.get("persistence_mode"), "ecc_mode": g.get("ecc_mode_current")}
            devices.append(d)
            by_bus[d["bus_id"]] = d
    if xml is not None:
        for g in xml["gpus"]:
            bus = norm_bus(g["bus_id"])
            d = by_bus.get(bus)
            if d is None:
                if query is not None:
                    facts["warnings"].append(f"nvidia-smi -q lists {bus} which --query-gpu does not")
                d = {"index": g["index"], "name": f"GPU{g['index']}", "bus_id": bus}
                devices.append(d)
                by_bus[bus] = d
            d.setdefault("model", g["product_name"])
            if d.get("model") is None:
                d["model"] = g["product_name"]
            for key, src in (("memory_mib", "memory_total_mib"), ("uuid", "uuid"),
                             ("persistence_mode", "persistence_mode"), ("ecc_mode", "ecc_mode_current")):
                if d.get(key) is None:
                    d[key] = g[src]
            for key in ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
                        "ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate", "vbios_version",
                        "inforom_image", "clocks_event_reasons_active"):
                d[key] = g.get(key)
            d.update({"fabric_state": g["fabric_state"], "fabric_status": g["fabric_status"],
                      "remapped_rows_pending": g["remapped_rows_pending"],
                      "remapped_rows_failure": g["remapped_rows_failure"],
                      "mig_mode": g["mig_mode_current"]})
        facts["driver_version"] = xml["driver_version"]
        facts["cuda_version"] = xml["cuda_version"]
    if not devices and table is not None:
        for g in table["gpus"]:
            devices.append({"index": g["index"], "name": f"GPU{g['index']}", "model": g["name"],
                            "memory_mib": g["memory_total_mib"], "bus_id": norm_bus(g["bus_id"]),
                            "persistence_mode": g["persistence_mode"], "ecc_mode": None})
    if facts["driver_version"] is None:
        for src in (query and query["gpus"] and query["gpus"][0], table, _first(parsed, "nvidia-proc-version")):
            if src and src.get("driver_version"):
                facts["driver_version"] = src["driver_version"]
                break
    devices.sort(key=lambda d: d["index"])
    pci = _pci_numa(parsed)
    topo = _first(parsed, "nvidia-smi-topo")
    topo_gpus = {g["index"]: g for g in topo["gpus"]} if topo else {}
    for d in devices:
        t = topo_gpus.get(d["index"])
        d["numa_affinity"] = t["numa_affinity"] if t else None
        d["cpu_affinity"] = t["cpu_affinity"] if t else None
        d["gpu_numa_id"] = t["gpu_numa_id"] if t else None
        p = pci.get(d.get("bus_id"))
        d["sysfs_numa_node"] = p["numa_node"] if p else None
        if d["numa_affinity"] and len(d["numa_affinity"]) == 1:
            d["numa_node"] = d["numa_affinity"][0]
        else:
            d["numa_node"] = d["sysfs_numa_node"]
    facts["devices"] = devices
    if topo is not None:
        gpus = [f"GPU{g['index']}" for g in topo["gpus"]]
        facts["matrix"] = {a: {b: topo["links"].get(a, {}).get(b) for b in gpus if b != a} for a in gpus}
        nics = []
        for n in topo["nics"]:
            key = f"NIC{n['index']}"
            nearest = {g: topo["links"].get(g, {}).get(key) for g in gpus if topo["links"].get(g, {}).get(key)}
            nics.append({"index": n["index"], "name": n["name"], "nearest": nearest})
        facts["nics"] = nics
    nvl = _first(parsed, "nvidia-smi-nvlink")
    if nvl is not None:
        facts["device_links"] = {f"GPU{g['index']}": g["links"] for g in nvl["gpus"]}
        for d in devices:
            facts["device_links"].setdefault(d["name"], [])
    health, fm = facts["health"], facts["fabric_manager"]
    _take(health, "kernel_log", parsed, "kernel-log", lambda r: {"lines": r["lines"], "events": r["events"]})
    _take(health, "nvlink_errors", parsed, "nvidia-smi-nvlink-errors",
          lambda r: {f"GPU{g['index']}": g["links"] for g in r["gpus"]})
    _take(health, "nvidia_params", parsed, "nvidia-params",
          lambda r: {"params": r["params"], "registry_dwords": r["registry_dwords"]})
    _take(fm, "service", parsed, "systemctl-is-active", lambda r: r["state"])
    _take(fm, "process", parsed, "process-list", lambda r: bool(r["processes"]))
    _take(fm, "cuda_init", parsed, "cuda-probe", lambda r: {k: v for k, v in r.items() if k != "kind"})


# --------------------------------------------------------------------------- AMD


def _amd(facts, parsed):
    static = _first(parsed, "amd-smi-static-json") or _first(parsed, "amd-smi-static")  # JSON or text: one model
    table = _first(parsed, "amd-smi")
    rtopo = _first(parsed, "rocm-smi-topo")
    atopo = _first(parsed, "amd-smi-topology-json")
    devices = []
    if static is not None:
        for g in static["gpus"]:
            devices.append({"index": g["gpu"], "name": f"GPU{g['gpu']}", "model": g["market_name"],
                            "memory_mib": g["vram_mib"], "bus_id": norm_bus(g["bdf"]),
                            "numa_node": g["numa_node"], "driver_version": g["driver_version"]})
        versions = {g["driver_version"] for g in static["gpus"] if g["driver_version"]}
        facts["driver_version"] = sorted(versions)[0] if versions else None
    elif table is not None:
        for g in table["gpus"]:
            devices.append({"index": g["gpu"], "name": f"GPU{g['gpu']}", "model": g["name"],
                            "memory_mib": g["mem_total_mb"], "bus_id": norm_bus(g["bdf"]), "numa_node": None})
        facts["driver_version"] = table["amdgpu_version"]
    product = _first(parsed, "rocm-smi-productname")
    if not devices and product is not None:
        # rocm-smi only (no amd-smi): the card series names the model; memory and bus come from nothing here
        for g in product["gpus"]:
            devices.append({"index": g["gpu"], "name": f"GPU{g['gpu']}", "model": g.get("card_series"),
                            "memory_mib": None, "bus_id": None, "numa_node": None})
    devices.sort(key=lambda d: d["index"])
    rnuma = {g["index"]: g["numa_node"] for g in rtopo["gpus"]} if rtopo else {}
    pci = _pci_numa(parsed)
    for d in devices:
        if d.get("numa_node") is None:
            d["numa_node"] = rnuma.get(d["index"])
        if d.get("numa_node") is None and d.get("bus_id") in pci:
            d["numa_node"] = pci[d["bus_id"]]["numa_node"]
        d["numa_affinity"] = [d["numa_node"]] if d.get("numa_node") is not None else None
    facts["devices"] = devices
    topo = atopo or rtopo
    if topo is not None:
        names = sorted(topo["links"], key=lambda n: int(n[3:]))
        facts["matrix"] = {a: {b: topo["links"][a].get(b) for b in names if b != a} for a in names}
        status = (atopo or {}).get("link_status") or {}
        links = {}
        for a in names:
            links[a] = [
                {"link": b, "active": (status.get(a, {}).get(b) in (None, "ENABLED")), "speed_gbps": None}
                for b in names if b != a and topo["links"][a].get(b) == "XGMI"
            ]
        facts["device_links"] = links


# --------------------------------------------------------------------------- Ascend


def _npu_name(dev: dict) -> str:
    return f"NPU{dev['phy_id'] if dev.get('phy_id') is not None else dev['npu']}"


def _ascend(facts, parsed):
    info = _first(parsed, "npu-smi-info")
    vinfo = _first(parsed, "ascend-version-info")
    devices = []
    if info is not None:
        for n in info["npus"]:
            idx = n["phy_id"] if n["phy_id"] is not None else n["npu"]
            devices.append({"index": idx, "name": _npu_name(n), "model": n["name"], "memory_mib": n["hbm_total_mb"],
                            "bus_id": norm_bus(n["bus_id"]), "health": n["health"], "card": n["npu"],
                            "chip": n["chip"], "numa_node": None, "numa_affinity": None})
    devices.sort(key=lambda d: d["index"])
    facts["devices"] = devices
    facts["driver_version"] = (vinfo or {}).get("version") or (info or {}).get("version")
    topo = _first(parsed, "npu-smi-topo")
    if topo is not None:
        def nm(x):
            return "NPU" + re.sub(r"\D", "", x)
        facts["matrix"] = {nm(a): {nm(b): lab for b, lab in row.items()} for a, row in topo["links"].items()}
        for d in devices:
            t = next((t for t in topo["devices"] if t["index"] == d["index"]), None)
            if t and t["cpu_affinity"]:
                d["cpu_affinity"] = t["cpu_affinity"]
                for node in facts["numa"]["nodes"] or []:
                    if set(t["cpu_affinity"]) <= set(node["cpus"]):
                        d["numa_node"] = node["node"]
                        d["numa_affinity"] = [node["node"]]
    hccn: dict = {}
    for _pr, res in parsed.get("hccn-tool", []):
        for dev in res["devices"]:
            if dev["device"] is None:
                continue
            rec = hccn.setdefault(f"NPU{dev['device']}", {"device": dev["device"]})
            rec.update({k: v for k, v in dev.items() if k not in ("device", "pings", "errors")})
            if dev.get("pings"):
                rec.setdefault("pings", []).extend(dev["pings"])
            if dev.get("errors"):
                rec.setdefault("errors", []).extend(dev["errors"])
    failed = [e for e in facts["errors"] if e["kind"] == "hccn-tool"]
    for e in failed:
        m = _HCCN_CMD.search(e.get("cmd") or "")
        if m:
            rec = hccn.setdefault(f"NPU{m.group(1)}", {"device": int(m.group(1))})
            rec.setdefault("errors", []).append(f"-{m.group(2)}: {e['error']}")
    facts["hccn"] = hccn if (hccn or "hccn-tool" in parsed or failed) else None


# --------------------------------------------------------------------------- bundles


def read_bundle(directory: str) -> list[dict]:
    """Probe records from a bundle directory of capture files (<name>.txt with a '# command:' header).

    Works for bundles written by playbooks/collect.yml and for hand-made ones (pasted outputs with a
    '# command:' line each); the kind comes from the command line or the content.
    """
    probes = []
    for fname in sorted(os.listdir(directory)):
        if not fname.endswith(".txt"):
            continue
        path = os.path.join(directory, fname)
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read().removeprefix("\ufeff")  # a byte order mark would hide the capture header
        meta, body = split_capture(text)
        try:
            kind = detect_kind(text)
        except ParseError:
            continue
        rc = meta.get("exit_status", 0)
        if kind == "systemctl-is-active" and rc in (3, 4):
            ok_rcs = [0, 3, 4]
        elif isinstance(rc, int) and re.search(r";|&&|\|", meta.get("command", "")):
            ok_rcs = [0, rc]  # a compound command line's status is its last command's, not this tool's
        else:
            ok_rcs = [0]
        probes.append({"name": fname[:-4], "kind": kind, "cmd": meta.get("command", ""), "rc": rc if isinstance(rc, int) else 0,
                       "stdout": body, "stderr": meta.get("stderr", ""), "ok_rcs": ok_rcs,
                       "line_offset": text.count("\n") - body.count("\n")})
    return probes
