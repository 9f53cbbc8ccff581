"""Compare a node's accelerator facts (llmbctl.hw.facts) with a platform profile (data/platforms/*.yml).

    checks = verify(facts, profile)            # [{'id', 'ok', 'expected', 'found', 'hint'}, ...]
    result = summarize(host, profile, checks)  # {'host', 'platform', 'ok', 'checks', 'failed'}

Pure Python, no Ansible imports. Profiles come from llmbctl.catalog (PyYAML, controller side).
"""

from __future__ import annotations

import fnmatch
import json
import re
from itertools import combinations

from llmb import finding
from llmb.finding import Finding

from .catalog import Catalog, platform_errors
from .enginecat.requirements import driver_finding

# The platform profiles are read, validated and deep-merged with profile_overrides by llmbctl.catalog
# (controller side, PyYAML); verify only compares facts with the mapping it returns.
validate_profile = platform_errors


def profile_names(directory: str | None = None) -> list[str]:
    return Catalog(platforms_dir=directory).platform_names()


def load_profile(name: str, directory: str | None = None, overrides: dict | None = None) -> dict:
    """The profile mapping of data/platforms/<name>.yml (or <directory>/<name>.yml), overrides merged.

    Raises ValueError (llmbctl.catalog.CatalogError) naming the file and the field when it is invalid.
    """
    profile = Catalog(platforms_dir=directory).platform(name, overrides).profile()
    health_config(profile)  # the health / fabric thresholds are verify's own sections: checked here
    fabric_config(profile)
    return profile


# --------------------------------------------------------------------------- helpers


def version_key(v: str):
    """'580.159.04' < '580.159.10'; '24.1.rc2.2' < '24.1.0' (release candidates sort before releases)."""
    key = []
    for tok in re.split(r"[.\-+_]", v.strip().lower()):
        if tok.isdigit():
            key.append((2, int(tok)))
        elif re.fullmatch(r"rc(\d+)", tok):
            key.append((1, int(tok[2:])))
        elif re.fullmatch(r"[a-z]+\d*", tok):
            continue  # build tags such as 'b030' do not order releases
        else:
            raise ValueError(v)
    return key


def version_at_least(found: str, minimum: str) -> bool | None:
    """None when `found` is not a comparable version string."""
    if not found or not re.match(r"^\d+(\.\w+)+", found):
        return None
    try:
        a, b = version_key(found), version_key(minimum)
    except ValueError:
        return None
    n = max(len(a), len(b))
    pad = (2, 0)
    return a + [pad] * (n - len(a)) >= b + [pad] * (n - len(b))


# A check is the project's one finding type (llmb.finding) in its JSON record: {"id", "ok", "expected",
# "found", "hint"}, "skipped" for one not run; _check / _skip make them.
_check = finding.check
_skip = finding.skipped


TOOLS = {
    "nvidia": {"devices": "nvidia-smi -q -x / --query-gpu", "matrix": "nvidia-smi topo -m", "links": "nvidia-smi nvlink -s"},
    "amd": {"devices": "amd-smi static --json", "matrix": "amd-smi topology --json", "links": "amd-smi topology --json"},
    "ascend": {"devices": "npu-smi info", "matrix": "npu-smi info -t topo", "links": "npu-smi info -t topo"},
}
# Probe kinds whose failure hides a whole area; reported as their own checks.
REQUIRED_KINDS = {
    "nvidia": ("nvidia-smi-q-xml", "nvidia-smi-query", "nvidia-smi-topo", "nvidia-smi-nvlink"),
    "amd": ("amd-smi-static-json", "amd-smi-topology-json"),
    "ascend": ("npu-smi-info", "npu-smi-topo", "ascend-version-info"),
}


def _tool_errors(facts, kind):
    return [e for e in facts.get("errors", []) if e.get("kind") == kind and not e.get("parsed")]


# --------------------------------------------------------------------------- checks


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


# --------------------------------------------------------------------------- results


def summarize(host: str, profile: dict, checks: list[dict], facts: dict | None = None) -> dict:
    failed = [c for c in checks if not c["ok"]]
    out = {
        "host": host,
        "platform": profile.get("name"),
        "ok": not failed,
        "checks": checks,
        "failed": [c["id"] for c in failed],
        "counts": {"total": len(checks), "failed": len(failed),
                   "waived": sum(1 for c in checks if c.get("waived")),
                   "skipped": sum(1 for c in checks if c.get("skipped"))},
    }
    if facts is not None:
        out["warnings"] = facts.get("warnings", [])
        out["errors"] = facts.get("errors", [])
    return out


def report_lines(results: list[dict]) -> list[str]:
    """One line per failed check of every host: 'host: check: expected X, found Y. hint' (llmb.finding)."""
    lines = []
    for r in results:
        lines += finding.lines(r.get("checks", []), r["host"])
        if r.get("unreachable"):
            lines.append(Finding("reachable", host=r["host"], expected="the host to answer",
                                 found=r["unreachable"]).render())
    return lines


# --------------------------------------------------------------------------- bandwidth acceptance


def bandwidth_checks(parsed: dict | None, profile: dict, error: str | None = None) -> list[dict]:
    """Checks from a parsed bandwidth probe (kind nccl-tests or torch-bw) against profile.bandwidth."""
    cfg = profile.get("bandwidth") or {}
    p2p, ar = cfg.get("p2p_gbps"), cfg.get("allreduce_busbw_gbps")
    if p2p is None and ar is None:
        return [_skip("bandwidth", "no thresholds", f"profile {profile.get('name')} sets no bandwidth thresholds")]
    if parsed is None:
        return [_check("bandwidth.probe", False, "nccl-tests all_reduce_perf or a torch probe runs", error or "no output",
                       "install nccl-tests (all_reduce_perf on PATH) or PyTorch with CUDA/ROCm on the node")]
    checks = []
    if parsed.get("kind") == "torch-bw" and p2p is not None:
        for c in parsed.get("copies", []):
            checks.append(_check(f"bandwidth.p2p.GPU{c['src']}-GPU{c['dst']}", c["gbps"] >= p2p, f">= {p2p} GB/s",
                                 f"{c['gbps']:.1f} GB/s",
                                 "device-to-device copies are slow: check the NVLink/XGMI state (links.* checks), "
                                 "P2P support (`nvidia-smi topo -p2p n`) and that no other job uses the GPUs"))
    busbw = parsed.get("avg_busbw_gbps") if parsed.get("kind") == "nccl-tests" else parsed.get("allreduce_busbw_gbps")
    if parsed.get("kind") == "nccl-tests":
        busbw = parsed.get("peak_busbw_gbps") or busbw
    if ar is not None:
        if busbw is None:
            checks.append(_skip("bandwidth.allreduce", f">= {ar} GB/s bus bandwidth", "not measured (one device)"))
        else:
            checks.append(_check("bandwidth.allreduce", busbw >= ar, f">= {ar} GB/s bus bandwidth",
                                 f"{busbw:.1f} GB/s", "all-reduce is slow: check the interconnect checks, NCCL_/RCCL_ "
                                 "environment (NCCL_P2P_DISABLE, NCCL_IB_*), and run nccl-tests with NCCL_DEBUG=INFO"))
    if parsed.get("kind") == "nccl-tests" and parsed.get("out_of_bounds"):
        checks.append(_check("bandwidth.correctness", False, "0 wrong values", f"{parsed['out_of_bounds']} wrong values",
                             "all-reduce returned wrong data: a GPU or link corrupts data; run dcgmi diag -r 3"))
    return checks or [_skip("bandwidth", "measurements", "the probe printed nothing to compare")]


# --------------------------------------------------------------------------- device health

# Thresholds of the health.* checks; a profile's `health:` mapping overrides them key by key.
HEALTH_DEFAULTS: dict = {
    "xid_ignore": [],  # Xid codes that do not fail the check (an application's fault, e.g. 13, 31, 43)
    "ecc_uncorrectable_max": 0,  # volatile (since driver load) uncorrectable ECC errors per GPU
    "ecc_aggregate_max": None,  # lifetime uncorrectable ECC errors per GPU (None: not checked)
    # clock event reasons that are not a fault (idle, a clock setting, the power cap under load)
    "throttle_ok": ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "sync_boost",
                    "display_clocks_setting"],
    "pcie_gen_check": True,  # current PCIe generation vs max (only on a busy GPU: idle GPUs downshift)
    "nvlink_crc_max": 0,
    "nvlink_replay_max": 100,
    "nvlink_recovery_max": 0,
    "peermem_required": None,  # None: required where the profile has RDMA NICs
    "acs_redirect_allowed": False,  # ACS P2P request / completion redirect on a PCIe bridge
}
_HEALTH_TYPES = {"xid_ignore": list, "ecc_uncorrectable_max": int, "ecc_aggregate_max": int, "throttle_ok": list,
                 "pcie_gen_check": bool, "nvlink_crc_max": int, "nvlink_replay_max": int, "nvlink_recovery_max": int,
                 "peermem_required": bool, "acs_redirect_allowed": bool}


def health_config(profile: dict) -> dict:
    """The profile's health thresholds over HEALTH_DEFAULTS; ValueError names a wrong field."""
    given = profile.get("health") or {}
    if not isinstance(given, dict):
        raise ValueError(f"platform profile {profile.get('name')!r}: health must be a mapping")
    cfg = dict(HEALTH_DEFAULTS)
    for key, value in given.items():
        want = _HEALTH_TYPES.get(key)
        if want is None:
            raise ValueError(f"platform profile {profile.get('name')!r}: health.{key} is not known; "
                             f"known: {', '.join(sorted(_HEALTH_TYPES))}")
        if value is not None and (not isinstance(value, want) or (want is int and isinstance(value, bool))):
            raise ValueError(f"platform profile {profile.get('name')!r}: health.{key} must be "
                             f"{want.__name__}, found {value!r}")
        cfg[key] = value
    return cfg


def health_checks(facts: dict, profile: dict, devs: list[dict] | None = None) -> list[dict]:
    """health.* checks of one NVIDIA node: Xid events since boot, uncorrectable ECC, clock-throttle
    reasons, PCIe link vs its maximum, NVLink error counters, nvidia_peermem, PCIe ACS."""
    if profile.get("vendor") != "nvidia":
        return []
    cfg = health_config(profile)
    devs = devs if devs is not None else (facts.get("devices") or [])
    health = facts.get("health") or {}
    checks: list[dict] = []
    add = checks.append
    by_bus = {}
    from llmb.hw.health import XID_SEVERE, bus_prefix

    for d in devs:
        if d.get("bus_id"):
            by_bus[bus_prefix(d["bus_id"])] = d["name"]
    klog = health.get("kernel_log")
    if klog is None:
        add(_skip("health.xid", "no Xid event since boot", "kernel log not readable (dmesg needs root or "
                  "kernel.dmesg_restrict=0; journalctl -k needs the systemd-journal group)"))
    else:
        bad: dict = {}
        for ev in klog["events"]:
            if ev["xid"] in cfg["xid_ignore"]:
                continue
            name = by_bus.get(ev["bus"], f"PCI {ev['bus']}")
            bad.setdefault(name, []).append(ev)
        for d in devs:
            evs = bad.pop(d["name"], [])
            found = "none" if not evs else "; ".join(
                f"Xid {e['xid']}" + (f" ({XID_SEVERE[e['xid']]})" if e["xid"] in XID_SEVERE else "")
                + (f" at {e['time']}" if e.get("time") else "") for e in evs[:5]) + (
                f" (and {len(evs) - 5} more)" if len(evs) > 5 else "")
            add(_check(f"health.xid.{d['name']}", not evs, f"no Xid event since boot on {d['name']} ({d.get('bus_id')})",
                       found, f"{d['name']} logged Xid errors (`dmesg | grep -i xid`): look the code up in NVIDIA's "
                       "Xid catalogue; 48/63/64/94/95 are memory (reset the GPU, RMA if they repeat), 74 NVLink, 79 the "
                       "GPU fell off the bus (reseat / power-cycle); add codes that are an application's fault to "
                       "health.xid_ignore"))
        for name, evs in bad.items():  # an Xid on a device the tools no longer list
            add(_check(f"health.xid.{name.replace(' ', '_')}", False, "no Xid event since boot",
                       "; ".join(f"Xid {e['xid']}: {e['message'][:80]}" for e in evs[:3]),
                       "a GPU that logged Xid errors is not listed by nvidia-smi any more: it fell off the bus; "
                       "power-cycle the node, RMA if it stays missing"))
    for d in devs:
        vol, agg = d.get("ecc_uncorrectable_volatile"), d.get("ecc_uncorrectable_aggregate")
        if vol is not None or agg is not None:
            over = []
            if vol is not None and vol > cfg["ecc_uncorrectable_max"]:
                over.append(f"{vol} volatile")
            if agg is not None and cfg["ecc_aggregate_max"] is not None and agg > cfg["ecc_aggregate_max"]:
                over.append(f"{agg} aggregate")
            add(_check(f"health.ecc.{d['name']}", not over,
                       f"<= {cfg['ecc_uncorrectable_max']} uncorrectable ECC errors (volatile)"
                       + (f", <= {cfg['ecc_aggregate_max']} aggregate" if cfg["ecc_aggregate_max"] is not None else ""),
                       ", ".join(over) if over else f"{vol if vol is not None else 'N/A'} volatile, "
                       f"{agg if agg is not None else 'N/A'} aggregate",
                       f"{d['name']} has uncorrectable memory errors: `nvidia-smi -q -d ECC,ROW_REMAPPER -i "
                       f"{d['index']}`; drain it, reset the GPU (row remapping applies on reset), RMA if they return"))
        reasons = d.get("clocks_event_reasons_active")
        if reasons is not None:
            bad_r = [r for r in reasons if r not in cfg["throttle_ok"]]
            add(_check(f"health.throttle.{d['name']}", not bad_r, "no clock slowdown reason other than "
                       + ", ".join(cfg["throttle_ok"]), ", ".join(bad_r) if bad_r else (", ".join(reasons) or "none"),
                       f"{d['name']} is slowed down ({', '.join(bad_r)}): hw/sw thermal -> check airflow, fans and inlet "
                       "temperature (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`); hw power brake -> the PSU / power "
                       "shelf signalled a brake; a slow GPU drags every collective of the instance"))
        wc, wm = d.get("pcie_width_current"), d.get("pcie_width_max")
        gc, gm = d.get("pcie_gen_current"), d.get("pcie_gen_max")
        if wc is not None and wm is not None:
            idle = "gpu_idle" in (reasons or [])
            gen_bad = cfg["pcie_gen_check"] and not idle and gc is not None and gm is not None and gc < gm
            ok = wc >= wm and not gen_bad
            add(_check(f"health.pcie.{d['name']}", ok, f"PCIe x{wm}" + (f" Gen{gm}" if gm else "")
                       + (" (generation not compared: the GPU is idle and may downshift)" if idle else ""),
                       f"x{wc} Gen{gc}", f"{d['name']}'s PCIe link trained below its maximum: reseat the GPU / "
                       "riser, check `lspci -vvv -s <bus>` LnkSta vs LnkCap and the slot's BIOS setting"))
    nvl = health.get("nvlink_errors")
    if nvl is not None:
        limits = (("crc", cfg["nvlink_crc_max"]), ("replay", cfg["nvlink_replay_max"]),
                  ("recovery", cfg["nvlink_recovery_max"]))
        for d in devs:
            links = nvl.get(d["name"])
            if links is None:
                continue
            over = []
            for lk in links:
                for key, val in lk.items():
                    if key == "link" or not isinstance(val, int):
                        continue
                    for word, limit in limits:
                        if word in key and val > limit:
                            over.append(f"link {lk['link']} {key} {val}")
            add(_check(f"health.nvlink_errors.{d['name']}", not over,
                       f"NVLink CRC <= {cfg['nvlink_crc_max']}, replay <= {cfg['nvlink_replay_max']}, "
                       f"recovery <= {cfg['nvlink_recovery_max']} per link", "; ".join(over[:6]) if over else "within limits",
                       f"`nvidia-smi nvlink -e -i {d['index']}`: rising CRC / replay counters mean a bad NVLink lane; "
                       "reset the counters (`nvidia-smi nvlink -r`), re-test under load, RMA the baseboard if they rise"))
    rdma = (profile.get("rdma") or {}).get("nics") or 0
    need_peermem = cfg["peermem_required"] if cfg["peermem_required"] is not None else rdma > 0
    mods = health.get("modules")
    if need_peermem:
        if mods is None:
            add(_skip("health.peermem", "nvidia_peermem loaded", "/proc/modules not read"))
        elif "nvidia" not in mods:  # not the GPUs' kernel (a container on another host's kernel)
            add(_skip("health.peermem", "nvidia_peermem loaded", "the nvidia module is not in /proc/modules"))
        else:
            ok = "nvidia_peermem" in mods or "nv_peer_mem" in mods
            add(_check("health.peermem", ok, "nvidia_peermem loaded (GPUDirect RDMA)",
                       "loaded" if ok else "not loaded", "GPUDirect RDMA needs the nvidia_peermem module (or DMA-BUF "
                       "with an open kernel module): `modprobe nvidia_peermem` and add it to /etc/modules-load.d/"))
    acs = health.get("acs")
    if acs is not None and not cfg["acs_redirect_allowed"]:
        readable = [a for a in acs if a["acs"] != "unreadable"]
        redirect = [a["bdf"] for a in readable if a["bridge"] and
                    ({"ReqRedir", "CmpltRedir"} & set(a["enabled"]))]
        if not readable and any(a["bridge"] for a in acs):
            add(_skip("health.acs", "ACS redirect off on every PCIe bridge", "config space not readable (needs root)"))
        elif any(a["bridge"] for a in acs):
            add(_check("health.acs", not redirect, "ACS P2P redirect off on every PCIe bridge",
                       ", ".join(redirect[:8]) + (f" (and {len(redirect) - 8} more)" if len(redirect) > 8 else "")
                       if redirect else "off", "ACS redirects GPU<->NIC / GPU<->GPU PCIe traffic through the root "
                       "complex (GPUDirect slows down or fails): disable ACS in the BIOS, or at boot "
                       "`setpci -s <bdf> ECAP_ACS+0x6.w=0000` for each bridge listed"))
    return checks


def uses_deepep(plan: dict | None) -> bool:
    """Whether a host's launch plan runs DeepEP kernels (all2all / MoE A2A backend or env)."""
    if not plan:
        return False
    for svc in plan.get("services") or []:
        words = [str(a) for a in svc.get("argv") or []] + [f"{k}={v}" for k, v in (svc.get("env") or {}).items()]
        if any("deepep" in w.lower() for w in words):
            return True
    return False


def deepep_checks(facts: dict) -> list[dict]:
    """NVSHMEM with IBGDA (DeepEP internode kernels) needs the driver's stream memory operations and
    peer mapping override: `options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"`."""
    params = (facts.get("health") or {}).get("nvidia_params")
    want = "EnableStreamMemOPs 1 and RegistryDwords PeerMappingOverride=1 (NVSHMEM IBGDA)"
    if params is None:
        return [_check("deepep.driver_options", False, want, "/proc/driver/nvidia/params not readable",
                       "load the nvidia module; DeepEP's internode kernels cannot run without it")]
    memops = params["params"].get("EnableStreamMemOPs")
    override = params["registry_dwords"].get("PeerMappingOverride")
    ok = memops == 1 and override == "1"
    return [_check("deepep.driver_options", ok, want,
                   f"EnableStreamMemOPs {memops}, PeerMappingOverride {override or 'unset'}",
                   "the plan uses DeepEP: add `options nvidia NVreg_EnableStreamMemOPs=1 "
                   "NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` to /etc/modprobe.d/nvidia.conf, "
                   "`update-initramfs -u`, reboot (or reload the nvidia modules)")]


def consistency_checks(nodes: dict) -> dict:
    """Driver and firmware equal on every node of one platform.

    nodes: {host: {"platform", "driver_version", "vbios": [...], "inforom": [...]}} -> {host: [checks]}:
    the value most nodes have is expected; a host with another one fails, naming which nodes have what.
    """
    out: dict = {h: [] for h in nodes}
    groups: dict = {}
    for host, n in nodes.items():
        groups.setdefault(n.get("platform"), []).append(host)
    for members in groups.values():
        if len(members) < 2:
            continue
        for key, what, hint in (
                ("driver_version", "driver", "install the same driver on every node (NCCL and the engine expect one "
                 "version across the instance)"),
                ("vbios", "VBIOS", "flash the same VBIOS / firmware bundle on every node (nvfwupd / the vendor's "
                 "firmware package)"),
                ("inforom", "InfoROM image", "update the GPU firmware so every node has the same InfoROM")):
            values = {}
            for h in members:
                v = nodes[h].get(key)
                v = ", ".join(v) if isinstance(v, list) else v
                if v:
                    values[h] = v
            if len(set(values.values())) <= 1:
                continue
            count: dict = {}
            for h, v in sorted(values.items()):
                count.setdefault(v, []).append(h)
            ranked = sorted(count.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            listing = "; ".join(f"{v} on {', '.join(hs)}" for v, hs in ranked)
            majority = ranked[0][0] if len(ranked[0][1]) > len(ranked[1][1]) else None
            for h, v in values.items():
                if v == majority:
                    continue
                out[h].append(_check(f"consistency.{key}", False,
                                     f"{what} {majority} as on {', '.join(count[majority])}" if majority
                                     else f"one {what} on every node", f"{v} (nodes: {listing})", hint))
    return out


def node_firmware(facts: dict, platform: str | None = None) -> dict:
    devs = facts.get("devices") or []
    return {"platform": platform, "driver_version": facts.get("driver_version"),
            "vbios": sorted({d["vbios_version"] for d in devs if d.get("vbios_version")}),
            "inforom": sorted({d["inforom_image"] for d in devs if d.get("inforom_image")})}


# --------------------------------------------------------------------------- cross-node fabric (tag fabric)

_FABRIC_TYPES = {"allreduce_busbw_gbps": (int, float), "ib_write_bw_gbps": (int, float), "transport": str}


def fabric_config(profile: dict) -> dict:
    """Thresholds of the fabric.* checks: the profile's `fabric:` mapping over defaults derived from
    its rdma section (ib_write_bw per rail: 85% of rdma.rate_gbps; transport from rdma.link_layer)."""
    rdma = profile.get("rdma") or {}
    layer = rdma.get("link_layer")
    cfg = {"allreduce_busbw_gbps": None,
           "ib_write_bw_gbps": round(rdma["rate_gbps"] * 0.85, 1) if rdma.get("rate_gbps") else None,
           "transport": {"InfiniBand": "ib", "Ethernet": "roce"}.get(layer) if layer else None}
    given = profile.get("fabric") or {}
    if not isinstance(given, dict):
        raise ValueError(f"platform profile {profile.get('name')!r}: fabric must be a mapping")
    for key, value in given.items():
        want = _FABRIC_TYPES.get(key)
        if want is None:
            raise ValueError(f"platform profile {profile.get('name')!r}: fabric.{key} is not known; "
                             f"known: {', '.join(sorted(_FABRIC_TYPES))}")
        if value is not None and (not isinstance(value, want) or isinstance(value, bool)):
            raise ValueError(f"platform profile {profile.get('name')!r}: fabric.{key} has the wrong type: {value!r}")
        if key == "transport" and value not in (None, "ib", "roce"):
            raise ValueError(f"platform profile {profile.get('name')!r}: fabric.transport must be ib or roce, "
                             f"found {value!r}")
        cfg[key] = value
    return cfg


def _port_down(parsed: dict | None) -> str | None:
    for e in (parsed or {}).get("errors") or []:
        if re.search(r"Port number \d+ state is (?!Active)\w+", e["text"]):
            return e["text"]
    return None


def fabric_checks(profile: dict, nodes: dict, ibbw: dict | None = None, allreduce: dict | None = None) -> dict:
    """The fabric.* checks of every host, from the probe outputs (llmb_fabric_probe.py).

    nodes: {host: {"hostname": node's own name, "rails": [NIC names], "next": host its clients test}};
    ibbw: {host: the ibbw JSON of that host}; allreduce: {"host": launcher, "rc", "output"} of the
    launcher. Returns {host: [checks]}; a rail that is down is reported on the host that owns it.
    """
    from llmb.hw._text import ParseError
    from llmb.hw.fabric import parse_ib_write_bw, parse_nccl_debug
    from llmb.hw.host import parse_nccl_tests

    cfg = fabric_config(profile)
    out: dict = {h: [] for h in nodes}
    thr = cfg["ib_write_bw_gbps"]

    def parse_bw(text):
        try:
            return parse_ib_write_bw(text or "")
        except ParseError as exc:
            return {"rows": [], "errors": [{"line": None, "text": str(exc)}], "avg_gbps": None}

    down: set = set()
    for host, res in (ibbw or {}).items():
        if res.get("missing"):
            out[host].append(_check("fabric.ib_write_bw", False, "perftest ib_write_bw runs on every rail",
                                    res["missing"], "install perftest (`apt-get install perftest`) on every node"))
            continue
        for srv in res.get("servers") or []:
            why = _port_down(parse_bw(srv.get("output")))
            if why:
                down.add((host, srv["device"]))
                out[host].append(_check(f"fabric.rail.{srv['device']}", False, f"rail {srv['device']} Active",
                                        f"down: {why}", f"{host} {srv['device']}: the port is not up; check the "
                                        "cable / optics and the switch port (`ibstat`, `ibv_devinfo`), for InfiniBand "
                                        "that a subnet manager runs; NCCL leaves this rail out or hangs at start"))
    for host, res in (ibbw or {}).items():
        peer = nodes.get(host, {}).get("next")
        for cli in res.get("clients") or []:
            dev = cli["device"]
            parsed = parse_bw(cli.get("output"))
            cid = f"fabric.ib_write_bw.{dev}"
            exp = f">= {thr} Gb/s to {peer} {dev}" if thr else f"runs to {peer} {dev}"
            why = _port_down(parsed)
            if why and (host, dev) in down:
                continue  # its server side said so already
            if why:
                down.add((host, dev))
                out[host].append(_check(f"fabric.rail.{dev}", False, f"rail {dev} Active", f"down: {why}",
                                        f"{host} {dev}: the port is not up; check the cable / optics and the switch "
                                        "port (`ibstat`), for InfiniBand that a subnet manager runs"))
                continue
            if (peer, dev) in down:
                out[host].append(_skip(cid, exp, f"the peer's rail is down (reported on {peer})"))
                continue
            avg = parsed.get("avg_gbps")
            if avg is None:
                err = "; ".join(e["text"] for e in parsed.get("errors", [])[:2]) or f"exit status {cli.get('rc')}"
                out[host].append(_check(cid, False, exp, err, f"RDMA between {host} {dev} and {peer} {dev} does not "
                                        "work: run the same ib_write_bw pair by hand; check addresses / routes of "
                                        "the rail, RoCE GID (`show_gids`) and MTU on both ends and the switch"))
                continue
            ok = thr is None or avg >= thr
            gid = f", GID index {parsed['gid_index']}" if parsed.get("gid_index") is not None else ""
            out[host].append(_check(cid, ok, exp, f"{avg:.1f} Gb/s (link {parsed.get('link_type')}{gid})",
                                    f"{host} {dev} <-> {peer} {dev} is slow: check both ports' rate (`ibstat`), "
                                    "PCIe width of the NIC, errors on the switch port (`perfquery -x`), RoCE PFC/ECN; "
                                    "the slowest rail bounds every all-reduce"))
    if allreduce is not None and allreduce.get("skipped"):
        out.setdefault(allreduce.get("host"), []).append(_skip("fabric.allreduce", "all_reduce_perf across all nodes",
                                                               allreduce["skipped"]))
    elif allreduce is not None:
        launcher = allreduce.get("host")
        text = allreduce.get("output") or ""
        if allreduce.get("missing"):
            out.setdefault(launcher, []).append(_check("fabric.allreduce", False, "all_reduce_perf across all nodes",
                                                       allreduce["missing"], "install nccl-tests (rccl-tests on AMD) "
                                                       "built with MPI=1 and Open MPI on every node"))
            return out
        try:
            dbg = parse_nccl_debug(text)
        except ParseError:
            dbg = None
        by_name = {n.get("hostname", h).split(".")[0]: h for h, n in nodes.items()}
        want_t = cfg["transport"]
        if dbg is not None:
            for nccl_host, rec in dbg["hosts"].items():
                host = by_name.get(nccl_host.split(".")[0], nccl_host)
                out.setdefault(host, [])
                t = rec["transport"]
                exp = {"ib": "NET/IB (InfiniBand)", "roce": "NET/IB over RoCE", None: "NET/IB (InfiniBand or RoCE)"}[want_t]
                ok = t in ((want_t,) if want_t else ("ib", "roce"))
                devs = ",".join(f"{d['name']}:{d['port']}/{d['link_layer']}" for d in rec["ib_devices"]) or "none"
                found = f"{t or 'not seen'} (network {rec['network']}; IB devices {devs}"
                found += "; NET/IB: no device found)" if rec["ib_missing"] else ")"
                out[host].append(_check("fabric.transport", ok, exp, found,
                                        f"NCCL on {host} fell back to TCP sockets (decode is many times slower): "
                                        "check that the RDMA devices are visible (`ibv_devices`), NCCL_IB_DISABLE is "
                                        "unset, NCCL_IB_HCA names existing ports, nvidia_peermem / the IB verbs "
                                        "libraries (libibverbs, rdma-core) are installed" if t == "socket" else
                                        f"NCCL on {host} used {t}; the profile expects {exp}"))
                rails = nodes.get(host, {}).get("rails")
                if rails and rec["ib_devices"]:
                    used = {d["name"] for d in rec["ib_devices"]}
                    missing = [r for r in rails if r.split(":")[0] not in used]
                    out[host].append(_check("fabric.nccl_rails", not missing, "NCCL uses every rail: " + ",".join(rails),
                                            ("missing " + ",".join(missing) + "; uses " + devs) if missing else devs,
                                            f"NCCL on {host} did not open {','.join(missing)}: the port is down or "
                                            "excluded by NCCL_IB_HCA; see fabric.rail.* and ibstat"))
        perf = None
        try:
            perf = parse_nccl_tests(text)
        except ParseError:
            pass
        ar = cfg["allreduce_busbw_gbps"]
        names = ", ".join(sorted(nodes))
        if perf is None or allreduce.get("rc") not in (0, None):
            tail = " | ".join(ln.strip() for ln in text.strip().splitlines()[-3:])[:400]
            out.setdefault(launcher, []).append(_check(
                "fabric.allreduce", False, f"all_reduce_perf across {names} completes",
                f"exit status {allreduce.get('rc')}: {tail or 'no output'}",
                "run the same mpirun by hand from the first node with NCCL_DEBUG=INFO; a hang at start is "
                "usually one bad rail or a firewall between the nodes (see the port check)"))
        else:
            busbw = perf.get("peak_busbw_gbps") or perf.get("avg_busbw_gbps") or 0.0
            wrong = perf.get("out_of_bounds") or 0
            ok = (ar is None or busbw >= ar) and not wrong
            out.setdefault(launcher, []).append(_check(
                "fabric.allreduce", ok, f"all-reduce across {names}" + (f": >= {ar} GB/s bus bandwidth" if ar else "")
                + ", 0 wrong values", f"{busbw:.1f} GB/s peak bus bandwidth, {wrong} wrong values",
                "the cross-node all-reduce is slow or wrong: see fabric.transport / fabric.ib_write_bw.* for the "
                "slow host and rail"))
    return out


def hccn_addresses(facts: dict) -> dict:
    """{NPU index (str): its HCCN address} of a node whose port is up (the fabric play's ping targets)."""
    out = {}
    for _name, rec in sorted((facts.get("hccn") or {}).items()):
        if rec.get("ipaddr") and rec.get("link") in (None, "UP") and rec.get("device") is not None:
            out[str(rec["device"])] = rec["ipaddr"]
    return out


def hccn_ping_pairs(hosts: list[str], addresses: dict) -> dict:
    """Which NPU of each host pings which peer: {host: [{"device", "peer", "address"}]}.

    NPU i on a node pings NPU i on every other node: the pairs HCCL's rings use between nodes (rank r
    of a node talks to the same local rank of the next node; vllm-ascend's checklist pings the peer
    NPUs' addresses) and, on the usual per-NPU-index RoCE planes, the only pairs that share a subnet."""
    out: dict = {h: [] for h in hosts}
    for h in hosts:
        mine = addresses.get(h) or {}
        for dev in sorted(mine, key=int):
            for peer in hosts:
                addr = (addresses.get(peer) or {}).get(dev)
                if peer != h and addr:
                    out[h].append({"device": int(dev), "peer": peer, "address": addr})
    return out


def hccn_ping_checks(pairs: dict, results: dict) -> dict:
    """fabric.hccn_ping.NPU<i>.<peer> per pair: the ping from NPU i of host to NPU i of peer answered
    every packet. results: {host: the hccn-ping JSON of llmb_fabric_probe.py}. {host: [checks]}."""
    # the node-side parsers, imported absolutely (verify.py may move to the controller side)
    from llmb.hw._text import ParseError
    from llmb.hw.ascend import parse_hccn

    out: dict = {h: [] for h in pairs}
    for host, want in pairs.items():
        res = results.get(host) or {}
        if res.get("missing"):
            out[host].append(_check("fabric.hccn_ping", False, "hccn_tool -ping runs on every NPU", res["missing"],
                                    "install the Ascend driver tools on the node"))
            continue
        got = {(p.get("device"), p.get("address")): p for p in res.get("pings") or []}
        for w in want:
            cid = f"fabric.hccn_ping.NPU{w['device']}.{w['peer']}"
            exp = f"NPU{w['device']} of {host} reaches NPU{w['device']} of {w['peer']} ({w['address']}): 3 of 3 replies"
            raw = got.get((w["device"], w["address"]))
            if raw is None:
                out[host].append(_check(cid, False, exp, "not run (the fabric probe did not answer for it)",
                                        "re-run verify.yml --tags fabric"))
                continue
            try:
                dev = parse_hccn(raw.get("output") or "", device=w["device"])["devices"]
                ping = next((p for d in dev for p in d.get("pings", [])), None)
            except ParseError as exc:
                ping, why = None, str(exc)
            else:
                why = " | ".join(ln.strip() for ln in (raw.get("output") or "").strip().splitlines()[-2:])[:300]
            if ping is None or ping.get("transmitted") is None:
                found = f"exit status {raw.get('rc')}: {why or 'no output'}"
            else:
                lost = "; ".join(x["text"] for x in ping["lost"][:3])
                found = (f"{ping['received']} of {ping['transmitted']} replies ({ping['loss_pct']:.2f}% packet loss)"
                         + (f": {lost}" if lost else ""))
            ok = bool(ping and ping.get("ok"))
            out[host].append(_check(cid, ok, exp, found,
                                    f"{host} NPU{w['device']} cannot reach {w['peer']} NPU{w['device']} over the HCCN "
                                    "network: compare both ports (`hccn_tool -i N -link -g`, `-net_health -g`), their "
                                    "addresses, netmask and gateway (`-ip -g`, `-gateway -g`), the switch port (`-lldp -g`)"
                                    " and that TLS is the same on both ends (`-tls -g`); HCCL hangs at its first "
                                    "cross-node collective over this pair"))
    return out


def rail_record(nodes: dict, ibbw: dict | None) -> dict:
    """Per host, the rails NCCL should use (NCCL_IB_HCA) and the RoCE GID index ib_write_bw reported:
    {host: {"llmb_rdma_rails": [...], "llmb_rdma_gid_index": N | None}} (rails that are down left out)."""
    from llmb.hw._text import ParseError
    from llmb.hw.fabric import parse_ib_write_bw

    rec = {}
    for host, n in nodes.items():
        rails = list(n.get("rails") or [])
        gid = None
        for side in ((ibbw or {}).get(host) or {}).get("servers") or []:
            try:
                p = parse_ib_write_bw(side.get("output") or "")
            except ParseError:
                continue
            if _port_down(p):
                rails = [r for r in rails if r != side["device"]]
            elif p.get("link_type") == "Ethernet" and p.get("gid_index") is not None and gid is None:
                gid = p["gid_index"]
        if rails:
            rec[host] = {"llmb_rdma_rails": rails, "llmb_rdma_gid_index": gid}
    return rec


RAILS_FILE = "llmb_rdma.yml"  # <inventory>/host_vars/<host>/llmb_rdma.yml, written by the fabric tag


def rails_yaml(host: str, rec: dict) -> str:
    """The host_vars file verify records the rails in (read back by stage 0: llmb_rdma_rails)."""
    rails = ", ".join(json.dumps(str(r)) for r in rec["llmb_rdma_rails"])  # JSON strings are YAML strings
    gid = rec.get("llmb_rdma_gid_index")
    return ("---\n"
            f"# Written by the verify stage (tag fabric) for {host}: the RDMA rails ib_write_bw and NCCL used.\n"
            "# Stage 0 plans NCCL_IB_HCA from them (NCCL_IB_GID_INDEX on RoCE); commit this file with the\n"
            "# inventory, edit it to pin other rails, delete it to let verify learn them again.\n"
            f"llmb_rdma_rails: [{rails}]\n"
            + (f"llmb_rdma_gid_index: {int(gid)}\n" if gid is not None else ""))
