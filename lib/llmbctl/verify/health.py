"""health.* checks of an NVIDIA node (Xid, ECC, throttling, PCIe, NVLink errors, peermem, ACS) and
the DeepEP driver options."""

from __future__ import annotations

from .base import _check, _skip

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
