"""One node's checks: its facts (llmbctl.hw.facts) against its platform profile, area by area."""

from __future__ import annotations

import fnmatch
import re
from itertools import combinations

from ..enginecat.requirements import driver_finding
from .base import REQUIRED_KINDS, TOOLS, _check, _skip, _tool_errors, version_at_least
from .health import deepep_checks, health_checks


def verify(facts: dict, profile: dict, waive: list[str] | tuple = (), engine: dict | None = None,
           deepep: bool = False) -> list[dict]:
    """Every check of one node. ``engine``: {"release": "vllm 0.23.0", "requirements": {...}} of the
    chosen engine release (its generated set's requirements) adds engine.driver; ``deepep``: the
    host's plan runs DeepEP (uses_deepep) adds deepep.driver_options."""
    vendor = profile["vendor"]
    tools = TOOLS[vendor]
    checks: list[dict] = []
    add = checks.append

    # Probes that failed to run or parse.
    for kind in REQUIRED_KINDS[vendor]:
        errs = _tool_errors(facts, kind)
        if errs:
            e = errs[0]
            add(_check(f"probe.{e['probe']}", False, f"`{e.get('cmd') or kind}` runs and its output parses",
                       e["error"], f"run `{e.get('cmd') or kind}` on the node: a missing tool, a driver / library "
                       "mismatch or a hung device shows there; reinstall the driver package if the tool is missing"))

    # Captures read but found damaged (cut short, counts that disagree with their own header, ...).
    reported = {c["id"][len("probe."):] for c in checks}
    by_probe: dict = {}
    for e in facts.get("errors", []):
        if e.get("capture") and e["probe"] not in reported:
            by_probe.setdefault(e["probe"], []).append(e)
    for probe, errs in by_probe.items():
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        add(_check(f"capture.{probe}", False, f"`{errs[0].get('cmd') or errs[0]['kind']}` output complete and consistent",
                   errs[0]["error"] + more, "re-run the command on the node and capture its whole output; "
                   "`scripts/hwfacts FILE` lists every problem with its line"))

    add(_check("vendor", facts.get("vendor") == vendor, vendor, facts.get("vendor") or "no accelerator tool found",
               f"no {vendor} management tool answered; install the driver / tools or pick the right llmb_platform"))

    devs = facts.get("devices") or []
    dev_cfg = profile["devices"]
    want = dev_cfg["count"]
    kernel_hint = {"nvidia": "Xid / 'fallen off the bus' in dmesg", "amd": "amdgpu errors in dmesg",
                   "ascend": "`npu-smi info -t health` and the device log (msnpureport)"}[vendor]
    add(_check("device.count", len(devs) == want, f"{want} devices", f"{len(devs)} devices",
               f"a device is missing or extra: compare `{tools['devices']}` with the profile; look for {kernel_hint}, "
               "reseat or RMA the board, or choose the profile that matches"))
    if devs:
        pat = re.compile(dev_cfg["model_pattern"])
        bad = [f"{d['name']}: {d.get('model')}" for d in devs if not pat.search(d.get("model") or "")]
        add(_check("device.model", not bad, f"every device matches /{dev_cfg['model_pattern']}/",
                   "; ".join(bad) if bad else f"{devs[0].get('model')} x{len(devs)}",
                   "wrong accelerator model for this platform profile: set llmb_platform for this host correctly"))
        mem = dev_cfg["memory_mib"]
        tol = mem * float(dev_cfg.get("memory_tolerance_pct", 1)) / 100
        bad = [f"{d['name']}: {d.get('memory_mib')} MiB" for d in devs
               if d.get("memory_mib") is None or abs(d["memory_mib"] - mem) > tol]
        add(_check("device.memory", not bad, f"{mem} MiB per device (+/- {dev_cfg.get('memory_tolerance_pct', 1)}%)",
                   "; ".join(bad) if bad else f"{devs[0].get('memory_mib')} MiB each",
                   "device memory differs: a different SKU, MIG / partition mode, or retired memory; "
                   "check the device's memory section and the partition mode"))
        if dev_cfg.get("health"):
            bad = [f"{d['name']}: {d.get('health')}" for d in devs if d.get("health") != dev_cfg["health"]]
            add(_check("device.health", not bad, f"health {dev_cfg['health']} on every device",
                       "; ".join(bad) if bad else f"{dev_cfg['health']} x{len(devs)}",
                       "`npu-smi info -t health -i N` shows the alarm; clear it or replace the card"))

    _driver(checks, facts, profile)
    if engine:
        _engine_driver(checks, facts, engine)
    _matrix(checks, facts, profile, devs)
    _links(checks, facts, profile, devs)
    _numa(checks, facts, profile, devs)
    if vendor == "nvidia":
        _nvidia_specific(checks, facts, profile, devs)
        checks.extend(health_checks(facts, profile, devs))
        if deepep:
            checks.extend(deepep_checks(facts))
    if vendor == "ascend":
        _hccn(checks, facts, profile, devs)
    _numa_balancing(checks, facts, profile)
    _rdma(checks, facts, profile, devs)
    return apply_waivers(checks, waive)


def apply_waivers(checks: list[dict], waive) -> list[dict]:
    for c in checks:
        if not c["ok"] and any(fnmatch.fnmatchcase(c["id"], pat) for pat in waive or ()):
            c["ok"] = True
            c["waived"] = True
    return checks


def _driver(checks, facts, profile):
    minimum = profile["driver"]["min_version"]
    found = facts.get("driver_version")
    ok = version_at_least(found, minimum) if found else False
    hint = {
        "nvidia": f"install NVIDIA driver >= {minimum} (same branch as Fabric Manager on NVSwitch systems) and reboot",
        "amd": f"install the amdgpu-dkms driver of ROCm with amdgpu >= {minimum} (the in-box kernel driver is not "
               "supported) and reboot",
        "ascend": f"install the Ascend NPU driver and firmware >= {minimum} (run the .run package with --full) and reboot",
    }[profile["vendor"]]
    checks.append(_check("driver.version", bool(ok), f">= {minimum}",
                         found if found else "not reported", hint))


def _engine_driver(checks, facts, engine):
    """The chosen engine release's CUDA major needs a driver of that generation (enginecat.requirements)."""
    f = driver_finding(engine.get("release") or "the chosen engine release", engine.get("requirements"),
                       facts.get("driver_version"), facts.get("vendor"))
    if f is not None:
        checks.append(f.check_record())


def _expected_labels(profile, a, b, by_name):
    matrix = profile["interconnect"]["matrix"]
    if "same_card" in matrix:
        da, db = by_name.get(a, {}), by_name.get(b, {})
        if da.get("card") is not None and da.get("card") == db.get("card"):
            return matrix["same_card"]
    return matrix.get("default") or []


def _matrix(checks, facts, profile, devs):
    matrix = profile["interconnect"]["matrix"]
    names = [d["name"] for d in devs]
    if len(names) < 2 or not (matrix.get("default") or matrix.get("same_card")):
        return
    found = facts.get("matrix")
    tool = TOOLS[profile["vendor"]]["matrix"]
    if found is None:
        checks.append(_check("interconnect.matrix", False, "a device matrix", f"not collected (`{tool}` failed)",
                             f"run `{tool}` on the node"))
        return
    by_name = {d["name"]: d for d in devs}
    for a, b in combinations(names, 2):
        labels = _expected_labels(profile, a, b, by_name)
        got = (found.get(a) or {}).get(b) or (found.get(b) or {}).get(a)
        ok = got in labels
        label = labels[0] if len(labels) == 1 else " or ".join(labels)
        hint = ""
        more = [int(x[2:]) for x in labels if re.fullmatch(r"NV\d+", x)]
        if not ok and got and re.fullmatch(r"NV\d+", got) and more and int(got[2:]) > max(more):
            hint = (f"{a}<->{b} has more NVLinks ({got}) than the profile expects ({label}): this board is not a "
                    f"{profile['name']}; set llmb_platform for this host to the matching profile")
        elif not ok:
            if profile["vendor"] == "nvidia":
                hint = (f"{a}<->{b} is {got or 'missing'}, not {label}: NVLinks are down or degraded; see "
                        f"`nvidia-smi nvlink -s -i {a[3:]}` and `nvidia-smi nvlink -e`; on NVSwitch systems check "
                        "Fabric Manager; reset the GPUs or power-cycle, RMA if it persists")
            elif profile["vendor"] == "amd":
                hint = (f"{a}<->{b} is {got or 'missing'}, not XGMI: an XGMI link is down; check `amd-smi topology`, "
                        "`amd-smi metric --xgmi-err` and dmesg; cold-reboot the node")
            else:
                hint = (f"{a}<->{b} is {got or 'missing'}, not {label}: an HCCS/SIO link is down; check "
                        "`npu-smi info -t topo` and `npu-smi info -t hccs -i <card> -c <chip>`")
        checks.append(_check(f"interconnect.{a}-{b}", ok, label, got or "missing", hint))


def _links(checks, facts, profile, devs):
    ic = profile["interconnect"]
    per_dev = ic.get("links_per_device")
    if per_dev is None or not devs:
        return
    speed = ic.get("link_speed_gbps")
    links = facts.get("device_links")
    tool = TOOLS[profile["vendor"]]["links"]
    if links is None:
        checks.append(_check("links", False, f"{per_dev} active links per device", f"not collected (`{tool}` failed)",
                             f"run `{tool}` on the node"))
        return
    for d in devs:
        mine = links.get(d["name"], [])
        active = [lk for lk in mine if lk.get("active")]
        inactive = [str(lk["link"]) for lk in mine if not lk.get("active")]
        slow = [f"{lk['link']}@{lk['speed_gbps']}" for lk in active
                if speed is not None and lk.get("speed_gbps") is not None and lk["speed_gbps"] + 1e-6 < speed]
        ok = len(active) == per_dev and not slow and (not inactive or per_dev == 0)
        exp = "no links" if per_dev == 0 else f"{per_dev} active links" + (f" at {speed} GB/s" if speed else "")
        parts = [f"{len(active)} active"]
        if inactive:
            parts.append("inactive: " + ",".join(inactive))
        if slow:
            parts.append("slow: " + ",".join(slow))
        hint = ""
        if not ok and len(active) > per_dev:
            hint = (f"{d['name']} has more active links than the profile expects: this board is not a "
                    f"{profile['name']}; set llmb_platform for this host to the matching profile")
        elif not ok:
            if profile["vendor"] == "nvidia":
                hint = (f"`nvidia-smi nvlink -s -i {d['index']}` shows the link state, `nvidia-smi nvlink -e -i "
                        f"{d['index']}` the error counters; reset the GPU, power-cycle, RMA if a link stays down")
            else:
                hint = f"a device link is down or missing: check `{tool}` and the kernel log; cold-reboot the node"
        checks.append(_check(f"links.{d['name']}", ok, exp, "; ".join(parts), hint))


def _numa(checks, facts, profile, devs):
    cfg = profile.get("numa") or {}
    nodes = (facts.get("numa") or {}).get("nodes")
    if cfg.get("nodes") is not None:
        found = len(nodes) if nodes is not None else "not collected (numactl -H and lscpu -J both failed)"
        checks.append(_check("numa.nodes", found == cfg["nodes"], f"{cfg['nodes']} NUMA nodes", found,
                             "NUMA layout differs: check BIOS settings (NPS / sub-NUMA clustering, node interleave) "
                             "or fix numa.nodes in the profile for this board"))
    want = cfg.get("device_nodes")
    if want is None:
        return
    for d in devs:
        if d["index"] >= len(want):
            continue
        got = d.get("numa_node")
        aff = d.get("numa_affinity")
        found = got if got is not None else ("N/A (no NUMA affinity reported)" if aff is None else ",".join(map(str, aff)))
        checks.append(_check(f"numa.{d['name']}", got == want[d["index"]], f"NUMA node {want[d['index']]}", found,
                             f"{d['name']} sits on the wrong socket for this profile: check the riser / PCIe slot "
                             "wiring and BIOS NUMA settings, or correct numa.device_nodes for this board"))


def _nvidia_specific(checks, facts, profile, devs):
    fm = facts.get("fabric_manager") or {}
    cuda = fm.get("cuda_init")
    required = profile["fabric_manager"]["required"]
    want = profile["devices"]["count"]
    if required:
        svc, proc = fm.get("service"), fm.get("process")
        if svc is None and proc is None:
            found = "unknown (no systemctl answer and no process scan)"
        else:
            found = f"service {svc or 'unknown'}, process {'running' if proc else 'not running'}"
        ok = svc == "active" or proc is True
        checks.append(_check("fabric_manager.service", ok, "nvidia-fabricmanager active", found,
                             f"start Fabric Manager of the same version as the driver ({facts.get('driver_version')}): "
                             "`systemctl enable --now nvidia-fabricmanager`; see journalctl -u nvidia-fabricmanager"))
        states = [f"{d['name']}: {d.get('fabric_state') or 'N/A'}/{d.get('fabric_status') or 'N/A'}" for d in devs
                  if d.get("fabric_state") not in (None, "Completed") or d.get("fabric_status") not in (None, "Success")]
        checks.append(_check("fabric_manager.fabric_state", not states, "fabric state Completed/Success on every GPU",
                             "; ".join(states) if states else "Completed/Success",
                             "the NVSwitch fabric is not trained: start or restart nvidia-fabricmanager and wait "
                             "for `nvidia-smi -q` Fabric State Completed"))
    if cuda is None:
        checks.append(_skip("cuda.init", f"cuInit 0 and {want} devices", "not probed"))
    elif not cuda.get("present"):
        checks.append(_skip("cuda.init", f"cuInit 0 and {want} devices", "no CUDA driver library (libcuda.so.1) on the node"))
    else:
        rc = cuda.get("init_rc")
        count = cuda.get("count")
        ok = rc == 0 and count == want
        if rc not in (0, None):
            found = f"cuInit error {rc}" + (f" ({cuda['error_name']})" if cuda.get("error_name") else "")
        else:
            found = f"cuInit 0, {count} devices"
        if rc == 802:
            hint = ("CUDA error 802 (system not yet initialized): on NVSwitch systems Fabric Manager must run and match "
                    f"the driver version {facts.get('driver_version')}: `systemctl enable --now nvidia-fabricmanager`")
        elif rc not in (0, None):
            hint = "CUDA cannot initialise: check dmesg for Xid errors, driver/library version mismatch, device nodes"
        else:
            hint = "CUDA sees a different number of devices than the profile: check CUDA_VISIBLE_DEVICES and dmesg"
        checks.append(_check("cuda.init", ok, f"cuInit 0 and {want} devices", found, hint))
    settings = profile.get("settings") or {}
    if settings.get("persistence_mode") and devs:
        bad = [f"{d['name']}: {d.get('persistence_mode')}" for d in devs
               if d.get("persistence_mode") != settings["persistence_mode"]]
        checks.append(_check("persistence_mode", not bad, f"{settings['persistence_mode']} on every GPU",
                             "; ".join(bad) if bad else settings["persistence_mode"],
                             "enable persistence: `systemctl enable --now nvidia-persistenced` (or `nvidia-smi -pm 1`)"))
    if settings.get("ecc") and devs:
        bad = [f"{d['name']}: {d.get('ecc_mode')}" for d in devs if d.get("ecc_mode") != settings["ecc"]]
        checks.append(_check("ecc", not bad, f"ECC {settings['ecc']} on every GPU", "; ".join(bad) if bad else settings["ecc"],
                             "turn ECC on with `nvidia-smi -e 1` and reboot"))
    bad = [d["name"] for d in devs if d.get("remapped_rows_pending") == "Yes" or d.get("remapped_rows_failure") == "Yes"]
    if devs and any("remapped_rows_pending" in d for d in devs):
        checks.append(_check("memory.remapped_rows", not bad, "no pending row remapping or remapping failure",
                             ", ".join(bad) if bad else "none",
                             "a GPU needs a reset to apply row remapping (or has failed it): reset the GPU; RMA on failure"))


def _hccn(checks, facts, profile, devs):
    cfg = profile.get("hccn") or {}
    if not cfg.get("required"):
        return
    hccn = facts.get("hccn")
    if hccn is None:
        checks.append(_check("hccn", False, "hccn_tool answers for every NPU", "not collected (hccn_tool missing?)",
                             "install the Ascend driver tools (/usr/local/Ascend/driver/tools/hccn_tool)"))
        return
    for d in devs:
        rec = hccn.get(f"NPU{d['index']}") or {}
        link = rec.get("link")
        errors = "; ".join(rec.get("errors", []))
        checks.append(_check(f"hccn.link.{d['name']}", link == "UP", "link UP", link or (errors or "not reported"),
                             f"HCCN port of {d['name']} is down: check the optics / cable and the switch port; "
                             f"`hccn_tool -i {d['index']} -link_stat -g` shows its history"))
        ip = rec.get("ipaddr")
        checks.append(_check(f"hccn.ip.{d['name']}", bool(ip), "an IP address",
                             f"{ip}/{rec.get('netmask')}" if ip else (errors or "none"),
                             f"configure it: `hccn_tool -i {d['index']} -ip -s address <A> netmask <M>` "
                             "(and the gateway / detect IP), then check with `hccn_tool -i N -ip -g`"))
        if "gateway" in rec or "gateway" in rec.get("queried", ()):
            gw = rec.get("gateway")
            checks.append(_check(f"hccn.gateway.{d['name']}", bool(gw), "a default gateway",
                                 f"{gw} ({rec.get('gateway_iface')})" if gw else (errors or "none"),
                                 f"set it: `hccn_tool -i {d['index']} -gateway -s gateway <G>` (HCCL between nodes "
                                 "on a routed RoCE network needs it), then `hccn_tool -i N -gateway -g`"))
        if cfg.get("net_health"):
            nh = rec.get("net_health")
            checks.append(_check(f"hccn.net_health.{d['name']}", nh in cfg["net_health"], " or ".join(cfg["net_health"]),
                                 nh or "not reported", f"`hccn_tool -i {d['index']} -net_health -g`; set the detect IP "
                                 "with `hccn_tool -i N -netdetect -s address <gateway>`"))


def _numa_balancing(checks, facts, profile):
    want = (profile.get("settings") or {}).get("numa_balancing")
    if want is None:
        return
    found = (facts.get("numa") or {}).get("balancing")
    checks.append(_check("numa_balancing", found == want, f"kernel.numa_balancing = {want}",
                         found if found is not None else "not collected",
                         f"`sysctl -w kernel.numa_balancing={want}` and persist it in /etc/sysctl.d/"))


def rail_ports(facts: dict, profile: dict) -> list[dict]:
    """The RDMA ports that serve as rails: of the profile's link layer and, where the topology lists
    NICs, on a GPU's PCIe switch (PIX/PXB); with no topology NIC list, every port of that layer."""
    ports = facts.get("rdma_ports") or []
    layer = (profile.get("rdma") or {}).get("link_layer")
    counted = [p for p in ports if layer is None or p.get("link_layer") == layer]
    rails = {n["name"] for n in facts.get("nics") or [] if any(v in ("PIX", "PXB") for v in n["nearest"].values())}
    return [p for p in counted if p["name"] in rails] if rails else counted


def _rdma(checks, facts, profile, devs):
    cfg = profile.get("rdma") or {}
    want = cfg.get("nics") or 0
    if want <= 0:
        return
    ports = facts.get("rdma_ports")
    topo_nics = facts.get("nics") or []
    layer = cfg.get("link_layer")
    rate = cfg.get("rate_gbps")
    if ports is not None:
        counted = [p for p in ports if layer is None or p.get("link_layer") == layer]
        cands = rail_ports(facts, profile)
        found_n = len(counted)
        src = "ibstat"
    else:
        cands = []
        found_n = len(topo_nics)
        src = "the topology NIC list; ibstat is not installed (infiniband-diags)"
    checks.append(_check("rdma.count", found_n >= want, f">= {want} RDMA NICs" + (f" ({layer})" if layer else ""),
                         f"{found_n} from {src}",
                         "an RDMA NIC is missing: check `ibstat` / `ibv_devinfo`, the mlx5/bnxt_re driver and firmware"))
    for p in cands:
        ok = p.get("state") == "Active" and (rate is None or (p.get("rate_gbps") or 0) >= rate)
        checks.append(_check(f"rdma.port.{p['name']}", ok, "Active" + (f" at >= {rate} Gb/s" if rate else ""),
                             f"{p.get('state')} ({p.get('physical_state')}) at {p.get('rate_gbps')} Gb/s",
                             f"port {p['name']}/{p['port']} is not up at speed: check cable / optics and the switch port; "
                             "for InfiniBand that a subnet manager runs (`sminfo`)"))
    if cfg.get("rail_per_device") and topo_nics:
        for d in devs:
            near = sorted((n["nearest"].get(d["name"]), n["name"] or f"NIC{n['index']}") for n in topo_nics
                          if n["nearest"].get(d["name"]) in ("PIX", "PXB"))
            best = ", ".join(f"{name} ({lab})" for lab, name in near)
            closest = sorted((n["nearest"].get(d["name"]) or "?", n["name"] or f"NIC{n['index']}") for n in topo_nics)
            checks.append(_check(f"rdma.rail.{d['name']}", bool(near), "a NIC behind the same PCIe switch (PIX/PXB)",
                                 best or ("nearest: " + ", ".join(f"{nm} ({lab})" for lab, nm in closest[:2])),
                                 f"{d['name']} has no RDMA NIC on its PCIe switch: check NIC population / slot "
                                 "placement, or set rdma.rail_per_device false for this board"))
