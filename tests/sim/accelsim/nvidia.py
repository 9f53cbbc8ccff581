"""NVIDIA: the node model (GPUs, NVLinks, NICs, fabric) and the `nvidia-smi` renderers.

Layouts follow driver 580 as captured on real machines (fixtures/real/h100, fixtures/real/h200x2):
the default table, -L, -q, -q -x, --query-gpu, topo -m, topo -p2p, nvlink -s/--status, nvlink -c.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from . import identity
from .faults import active

TEMPLATES = Path(__file__).resolve().parent / "templates"
INACTIVE = "<inactive>"
NOT_READY_FABRIC = {"state": "In Progress", "status": "N/A", "clique": "N/A", "cluster": "N/A"}
NO_FABRIC = {"state": "N/A", "status": "N/A", "clique": "N/A", "cluster": "N/A"}

TOPO_LEGEND = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

P2P_LEGEND = """\
Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""

TABLE_HEAD = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI {smi:<23}Driver Version: {driver:<15}CUDA Version: {cuda:<9}|
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
"""
TABLE_GPU_SEP = (
    "+-----------------------------------------+------------------------+----------------------+\n"
)
TABLE_PROCESSES = """
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""
Q_HEAD = """
==============NVSMI LOG==============

Timestamp                                              : {timestamp}
Driver Version                                         : {driver}
CUDA Version                                           : {cuda}

Attached GPUs                                          : {count}
"""
QX_HEAD = """\
<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">
<nvidia_smi_log>
\t<timestamp>{timestamp}</timestamp>
\t<driver_version>{driver}</driver_version>
\t<cuda_version>{cuda}</cuda_version>
\t<attached_gpus>{count}</attached_gpus>
"""
NVLINK_CAPABILITIES = (
    "P2P is supported",
    "Access to system memory supported",
    "P2P atomics supported",
    "System memory atomics supported",
    "SLI is supported",
    "Link is supported",
)


@dataclass
class Gpu:
    index: int  # as nvidia-smi numbers it (present GPUs, in bus order)
    pindex: int  # index in the profile (minor number; what faults name)
    bus_id: str
    numa: int
    cpus: str
    uuid: str
    serial: str
    pdi: str
    board_id: str
    module_id: int
    persistence: bool = True
    ecc: bool = True
    throttle: tuple[str, ...] = ()  # active clock slowdown reasons (besides idle)
    ecc_unc: int = 0  # uncorrectable DRAM ECC errors
    links: list[str] = field(default_factory=list)  # per link: speed text or INACTIVE
    readings: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)


@dataclass
class Nic:
    name: str
    numa: int
    pix: tuple[int, ...]  # profile indices of GPUs behind the same PCIe switch


@dataclass
class NvidiaNode:
    profile: dict
    spec: dict
    driver: str
    cuda: str
    gpus: list[Gpu]
    nics: list[Nic]
    fabric: dict
    nvlink_pairs: dict[tuple[int, int], int]  # (pindex, pindex) -> active links between them
    fabric_kind: str

    def reading(self, gpu: Gpu, view: str) -> dict:
        """The readings of `gpu` as output `view` (table, q, qx, query) shows them."""
        values = dict(gpu.readings)
        values.update(gpu.views.get(view, {}))
        values.setdefault("clk_sm", values["clk_gfx"])
        values.setdefault("power_table", int(float(values["power_inst"])))
        return values


def build(profile: dict, faults: list[dict], host: str, fabric_manager_alive: bool | None) -> NvidiaNode:
    spec = profile["device_spec"]
    name = profile["name"]
    numa_nodes = profile["numa_nodes"]
    fabric_kind = profile.get("nvlink", {}).get("fabric", "none")
    nlinks = spec["nvlink"]["links"] if fabric_kind != "none" else 0
    missing = {f["index"] for f in active(faults, "device_missing")}
    ecc_off = active(faults, "ecc_off")
    pm_off = active(faults, "persistence_off")
    numa_moves = {f["gpu"]: f.get("numa") for f in active(faults, "numa_wrong")}

    gpus: list[Gpu] = []
    for pindex, g in enumerate(profile["gpus"]):
        numa = g["numa"]
        if pindex in numa_moves:
            target = numa_moves[pindex]
            numa = (numa + 1) % len(numa_nodes) if target is None else target
        bus = int(g["bus_id"][9:11], 16)
        gpus.append(
            Gpu(
                index=-1,
                pindex=pindex,
                bus_id=g["bus_id"],
                numa=numa,
                cpus=numa_nodes[numa],
                uuid=g.get("uuid") or identity.nvidia_uuid(host, name, pindex),
                serial=g.get("serial") or identity.nvidia_serial(host, name, pindex),
                pdi=g.get("pdi") or identity.nvidia_pdi(host, name, pindex),
                board_id=g.get("board_id") or f"0x{bus:x}00",
                module_id=g.get("module_id", pindex + 1),
                persistence=not any(f.get("gpu", pindex) == pindex for f in pm_off),
                ecc=not any(f.get("gpu", pindex) == pindex for f in ecc_off),
                throttle=tuple(f.get("reason", "hw_thermal_slowdown") for f in active(faults, "throttle")
                               if f["gpu"] == pindex),
                ecc_unc=sum(f.get("count", 1) for f in active(faults, "ecc_uncorrectable") if f["gpu"] == pindex),
                links=[spec["nvlink"]["speed"]] * nlinks,
                readings=_readings(spec, g, host, name, pindex),
                views=g.get("views", {}),
            )
        )

    # Links: faults on one end; on direct NVLink the other end of the cable goes down too.
    by_pindex = {g.pindex: g for g in gpus}
    for f in active(faults, "link_down"):
        for gpu, link in _link_ends(fabric_kind, len(gpus), nlinks, f["gpu"], f["link"]):
            by_pindex[gpu].links[link] = INACTIVE
    for f in active(faults, "link_degraded"):
        gpu = by_pindex[f["gpu"]]
        if gpu.links[f["link"]] != INACTIVE:
            gpu.links[f["link"]] = f.get("speed") or _half_speed(spec["nvlink"]["speed"])
    if fabric_kind == "direct":  # links bridged to a GPU that fell off the bus are down
        for g in gpus:
            for link in range(len(g.links)):
                if _direct_peer(nlinks, g.pindex, link, len(gpus)) in missing:
                    g.links[link] = INACTIVE

    present = [g for g in gpus if g.pindex not in missing]
    for i, g in enumerate(present):
        g.index = i
    pairs = _nvlink_pairs(fabric_kind, present, len(gpus))

    fabric = dict(profile.get("fabric_ready", NO_FABRIC))
    if profile.get("fabricmanager"):
        stopped = bool(active(faults, "fabricmanager_stopped")) or fabric_manager_alive is False
        if stopped:
            fabric = dict(NOT_READY_FABRIC)

    version = profile["driver_version"]
    for f in active(faults, "driver_version"):
        version = f["version"]
    nics = [Nic(n["name"], n["numa"], tuple(n.get("pix", ()))) for n in profile.get("nics", [])]
    return NvidiaNode(
        profile, spec, version, profile["cuda_version"], present, nics, fabric, pairs, fabric_kind
    )


def _readings(spec: dict, g: dict, host: str, profile: str, pindex: int) -> dict:
    idle = spec["idle"]
    clocks = spec["clocks"]
    if "readings" in g:  # captured from a real machine: exact values, no jitter
        base = {
            "temp": idle["temp"],
            "temp_tlimit": idle["temp_tlimit"],
            "mem_temp": idle["mem_temp"],
            "power_avg": f"{idle['power']:.2f}",
            "power_inst": f"{idle['power']:.2f}",
            "mem_power_avg": f"{idle['mem_power']:.2f}",
            "tx_kbs": idle["tx_kbs"],
            "rx_kbs": idle["rx_kbs"],
        }
        base.update(g["readings"])
    else:

        def j(key: str, spread: float) -> float:
            return identity.jitter(host, profile, pindex, key, spread)

        dt = round(j("temp", 3))
        power = idle["power"] + j("power", 6)
        base = {
            "temp": idle["temp"] + dt,
            "temp_tlimit": idle["temp_tlimit"] - dt,
            "mem_temp": idle["mem_temp"] + round(j("mem_temp", 3)),
            "power_avg": f"{power:.2f}",
            "power_inst": f"{power + j('power_inst', 2):.2f}",
            "mem_power_avg": f"{idle['mem_power'] + j('mem_power', 2):.2f}",
            "tx_kbs": idle["tx_kbs"] + round(j("tx", 60)),
            "rx_kbs": idle["rx_kbs"] + round(j("rx", 60)),
        }
    base.setdefault("clk_gfx", clocks["idle_gfx"])
    base.setdefault("clk_mem", clocks["max_mem"])
    base.setdefault("clk_video", clocks["idle_video"])
    base.setdefault("fb_used", 0)
    base.setdefault("bar1_used", 1)
    base.setdefault("pstate", "P0")
    base.setdefault("util_gpu", 0)
    base.setdefault("util_mem", 0)
    return base


def _direct_peers(count: int, pindex: int) -> list[int]:
    return [p for p in range(count) if p != pindex]


def _direct_peer(nlinks: int, pindex: int, link: int, count: int) -> int:
    """Direct NVLink: GPU A's links are split evenly over its peers in index order."""
    peers = _direct_peers(count, pindex)
    per_peer = max(nlinks // max(len(peers), 1), 1)
    return peers[min(link // per_peer, len(peers) - 1)]


def _direct_links(nlinks: int, a: int, b: int, count: int) -> list[int]:
    return [link for link in range(nlinks) if _direct_peer(nlinks, a, link, count) == b]


def _link_ends(fabric_kind: str, count: int, nlinks: int, gpu: int, link: int) -> list[tuple[int, int]]:
    """The (gpu, link) ends a broken link takes down.

    NVSwitch: the GPU's own port only (the switch side is not a GPU). Direct NVLink (GPUs joined by
    NVLink bridges): link L of GPU A is bridged to link L of its peer, so both ends go down.
    """
    ends = [(gpu, link)]
    if fabric_kind == "direct":
        ends.append((_direct_peer(nlinks, gpu, link, count), link))
    return ends


def _nvlink_pairs(fabric_kind: str, gpus: list[Gpu], count: int) -> dict[tuple[int, int], int]:
    """Active NVLinks between each pair of present GPUs, as `topo -m` counts them (NV#).

    NVSwitch: every GPU reaches every other through all its active links, so a pair bonds
    min(active links of the two); one link down on GPU N turns all of N's pairs from NV18 to NV17
    (NV8 to NV7 on H800) and leaves other pairs alone. Direct: links cabled between the two.
    """
    pairs: dict[tuple[int, int], int] = {}
    for a in gpus:
        for b in gpus:
            if a.pindex == b.pindex:
                continue
            up_a = sum(1 for s in a.links if s != INACTIVE)
            up_b = sum(1 for s in b.links if s != INACTIVE)
            if fabric_kind == "nvswitch":
                pairs[(a.pindex, b.pindex)] = min(up_a, up_b)
            elif fabric_kind == "direct":
                pairs[(a.pindex, b.pindex)] = sum(
                    1
                    for link in _direct_links(len(a.links), a.pindex, b.pindex, count)
                    if a.links[link] != INACTIVE and b.links[link] != INACTIVE
                )
            else:
                pairs[(a.pindex, b.pindex)] = 0
    return pairs


def _half_speed(speed: str) -> str:
    value, _, unit = speed.partition(" ")
    return f"{float(value) / 2:.3f} {unit}"


def timestamp(now: float | None = None) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))


# ---------------------------------------------------------------------------------------------
# Renderers


def render_table(node: NvidiaNode, now: float | None = None) -> str:
    out = [
        timestamp(now) + "       \n",
        TABLE_HEAD.format(smi=node.driver, driver=node.driver, cuda=node.cuda),
    ]
    spec = node.spec
    for g in node.gpus:
        r = node.reading(g, "table")
        name = spec["name"][:31]
        pm = "On" if g.persistence else "Off"
        ecc = "0" if g.ecc else "Off"
        usage = f"{r['power_table']}W"
        cap = f"{spec['power']['default']}W"
        mem_used = f"{r['fb_used']}MiB"
        mem_total = f"{spec['memory_mib']}MiB"
        util = f"{r['util_gpu']}%"
        out.append(f"|{g.index:>4}  {name:<31}{pm:<4}|   {g.bus_id} {'Off':>3} |{ecc:>21} |\n")
        out.append(
            f"|{'N/A':>4}{str(r['temp']) + 'C':>6}{r['pstate']:>6}{usage:>16} / {cap:>5} |"
            f"{mem_used:>11} / {mem_total:>9} |{util:>8}{'Default':>13} |\n"
        )
        out.append(f"|{'':41}|{'':24}|{'Disabled':>21} |\n")
        out.append(TABLE_GPU_SEP)
    out.append(TABLE_PROCESSES)
    return "".join(out)


def render_list(node: NvidiaNode, ids: list[int] | None = None) -> str:
    return "".join(f"GPU {g.index}: {node.spec['name']} (UUID: {g.uuid})\n" for g in select(node, ids))


def select(node: NvidiaNode, ids: list[int] | None) -> list[Gpu]:
    if ids is None:
        return list(node.gpus)
    return [g for g in node.gpus if g.index in ids]


def _template_values(node: NvidiaNode, g: Gpu, view: str) -> dict:
    spec = node.spec
    r = node.reading(g, view)
    total = spec["memory_mib"]
    reserved = spec["reserved_mib"]
    free = spec.get("idle_free_mib", total - reserved) - r["fb_used"]
    domain, bus, rest = g.bus_id.split(":")
    device = rest.split(".")[0]
    ecc_na = not g.ecc
    return {
        "bus_id": g.bus_id,
        "product_name": spec["name"],
        "display_attached": node.profile["platform"]["display_attached"],
        "persistence_mode": "Enabled" if g.persistence else "Disabled",
        "serial": g.serial,
        "uuid": g.uuid,
        "pdi": g.pdi,
        "minor_number": g.pindex,
        "vbios_version": spec["vbios_version"],
        "board_id": g.board_id,
        "board_part_number": spec["board_part_number"],
        "gpu_part_number": spec["gpu_part_number"],
        "module_id": g.module_id,
        "inforom_image": spec["inforom_image"],
        "virtualization_mode": node.profile["platform"]["virtualization_mode"],
        "driver_version": node.driver,
        "pci_bus_hex": f"0x{bus}",
        "pci_device_hex": f"0x{device}",
        "pci_domain_hex": f"0x{domain[-4:]}",
        "pci_device_id_hex": f"0x{spec['device_id']}10DE",
        "pci_subsystem_id_hex": f"0x{spec['subsystem_id']}10DE",
        "pci_bus": bus,
        "pci_device": device,
        "pci_domain": domain[-4:],
        "pci_device_id": f"{spec['device_id']}10DE",
        "pci_subsystem_id": f"{spec['subsystem_id']}10DE",
        "pcie_host_max": node.profile["platform"]["pcie_host_max"],
        "tx_kbs": r["tx_kbs"],
        "rx_kbs": r["rx_kbs"],
        "pstate": r["pstate"],
        "fb_total": total,
        "fb_reserved": reserved,
        "fb_used": r["fb_used"],
        "fb_free": free,
        "bar1_total": spec["bar1_mib"],
        "bar1_used": r["bar1_used"],
        "bar1_free": spec["bar1_mib"] - r["bar1_used"],
        "ecc_mode": "Disabled" if ecc_na else "Enabled",
        "ecc_count": "N/A" if ecc_na else "0",
        "ecc_dram_unc": "N/A" if ecc_na else str(g.ecc_unc),
        **_reasons(g),
        "ecc_threshold": "N/A" if ecc_na else "No",
        "remap_max_banks": spec["remap_max_banks"],
        "temp": r["temp"],
        "temp_tlimit": r["temp_tlimit"],
        "mem_temp": r["mem_temp"],
        "power_avg": r["power_avg"],
        "power_inst": r["power_inst"],
        "mem_power_avg": r["mem_power_avg"],
        "power_limit": f"{spec['power']['default']:.2f}",
        "power_default": f"{spec['power']['default']:.2f}",
        "power_min": f"{spec['power']['min']:.2f}",
        "power_max": f"{spec['power']['max']:.2f}",
        "clk_gfx": r["clk_gfx"],
        "clk_sm": r["clk_sm"],
        "clk_mem": r["clk_mem"],
        "clk_video": r["clk_video"],
        "clk_max_gfx": spec["clocks"]["max_gfx"],
        "clk_max_sm": spec["clocks"]["max_sm"],
        "clk_max_mem": spec["clocks"]["max_mem"],
        "clk_max_video": spec["clocks"]["max_video"],
        "fabric_state": node.fabric["state"],
        "fabric_status": node.fabric["status"],
        "fabric_clique": node.fabric["clique"],
        "fabric_cluster": node.fabric["cluster"],
        "supported_clocks": _supported_clocks_xml(spec["clocks"]),
    }


def _reasons(g: Gpu) -> dict:
    """Clock event reasons: idle unless a slowdown is simulated (a throttled GPU is one under load)."""
    hw = {"hw_thermal_slowdown", "hw_power_brake_slowdown"} & set(g.throttle)
    active_reasons = set(g.throttle) | ({"hw_slowdown"} if hw else set()) or {"gpu_idle"}
    names = ("gpu_idle", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
             "sw_thermal_slowdown")
    return {f"r_{n}": "Active" if n in active_reasons else "Not Active" for n in names}


def render_nvlink_errors(node: NvidiaNode, ids: list[int] | None = None) -> str:
    """`nvidia-smi nvlink -e`: per link Replay / Recovery / CRC counters (0; a degraded link counts)."""
    out = []
    for g in select(node, ids):
        out.append(f"GPU {g.index}: {node.spec['name']} (UUID: {g.uuid})\n")
        for link, speed in enumerate(g.links):
            bad = speed != INACTIVE and speed != node.spec["nvlink"]["speed"]
            for name, value in (("Replay Errors", 12 if bad else 0), ("Recovery Errors", 0),
                                ("CRC Errors", 3 if bad else 0)):
                out.append(f"\t Link {link}: {name}: {value}\n")
    return "".join(out)


def render_kernel_log(node: NvidiaNode, faults: list[dict], host: str) -> str:
    """`dmesg`: the driver's load line and one Xid line per `xid` fault (bus id of the profile's GPU)."""
    lines = ["[    0.000000] Linux version 6.1.0-accelsim (simulated kernel log)",
             f"[    5.120000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {node.driver}  Release Build"]
    buses = {i: g["bus_id"] for i, g in enumerate(node.profile["gpus"])}
    t = 1000.0
    for f in active(faults, "xid"):
        domain, bus, rest = buses[f["gpu"]].split(":")
        dev = rest.split(".")[0]
        t += 37.25
        what = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) has been detected.",
                74: "NVLink: fatal error detected on link 3"}.get(f["code"], "Graphics Exception")
        lines.append(f"[{t:12.6f}] NVRM: Xid (PCI:{domain[-4:].lower()}:{bus.lower()}:{dev.lower()}): {f['code']}, "
                     f"pid='<unknown>', name=<unknown>, {what}")
    return "\n".join(lines) + "\n"


def _supported_clocks_xml(clocks: dict) -> str:
    gfx = range(clocks["max_gfx"], clocks["min_gfx"] - 1, -clocks["step_gfx"])
    lines = ["\t\t<supported_clocks>"]
    for mem in (clocks["max_mem"], clocks["low_mem"]):
        lines.append("\t\t\t<supported_mem_clock>")
        lines.append(f"\t\t\t\t<value>{mem} MHz</value>")
        lines.extend(f"\t\t\t\t<supported_graphics_clock>{g} MHz</supported_graphics_clock>" for g in gfx)
        lines.append("\t\t\t</supported_mem_clock>")
    lines.append("\t\t</supported_clocks>")
    return "\n".join(lines)


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text()


def render_q(node: NvidiaNode, ids: list[int] | None = None, now: float | None = None) -> str:
    template = _template("nvidia-smi-q-gpu.txt")
    out = [Q_HEAD.format(timestamp=timestamp(now), driver=node.driver, cuda=node.cuda, count=len(node.gpus))]
    for g in select(node, ids):
        out.append(template.format(**_template_values(node, g, "q")))
        out.append("\n")
    return "".join(out)


def render_qx(node: NvidiaNode, ids: list[int] | None = None, now: float | None = None) -> str:
    template = _template("nvidia-smi-q-x-gpu.xml")
    out = [QX_HEAD.format(timestamp=timestamp(now), driver=node.driver, cuda=node.cuda, count=len(node.gpus))]
    for g in select(node, ids):
        out.append(template.format(**_template_values(node, g, "qx")))
        out.append("\n")
    out.append("</nvidia_smi_log>\n")
    return "".join(out)


def _pair_cell(node: NvidiaNode, a: Gpu, b: Gpu) -> str:
    if a.pindex == b.pindex:
        return " X "
    links = node.nvlink_pairs.get((a.pindex, b.pindex), 0)
    if links:
        return f"NV{links}"
    return "NODE" if a.numa == b.numa else "SYS"


def _gpu_nic_cell(g: Gpu, nic: Nic) -> str:
    if g.pindex in nic.pix:
        return "PIX"
    return "NODE" if g.numa == nic.numa else "SYS"


def _nic_nic_cell(a: Nic, b: Nic) -> str:
    if a is b:
        return " X "
    if set(a.pix) & set(b.pix):
        return "PIX"
    return "NODE" if a.numa == b.numa else "SYS"


def render_topo_matrix(node: NvidiaNode) -> str:
    gpus, nics = node.gpus, node.nics
    header = [f"GPU{g.index}" for g in gpus] + [f"NIC{k}" for k in range(len(nics))]
    header += ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t\x1b[4m" + "\t".join(header) + "\x1b[0m"]
    for g in gpus:
        cells = [_pair_cell(node, g, o) for o in gpus] + [_gpu_nic_cell(g, n) for n in nics]
        lines.append(f"GPU{g.index}\t" + "\t".join(cells) + f"\t{g.cpus}\t{g.numa}\t\tN/A")
    for k, nic in enumerate(nics):
        cells = [_gpu_nic_cell(g, nic) for g in gpus] + [_nic_nic_cell(nic, o) for o in nics]
        lines.append(f"NIC{k}\t" + "\t".join(cells) + "\t\t\t\t")
    out = "\n".join(lines) + "\n\n" + TOPO_LEGEND
    if nics:
        out += "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: {n.name}\n" for k, n in enumerate(nics))
    return out


def render_topo_p2p(node: NvidiaNode, capability: str) -> str:
    gpus = node.gpus
    lines = [" \t\x1b[4m" + "".join(f"GPU{g.index}\t" for g in gpus) + "\x1b[0m"]
    for a in gpus:
        cells = []
        for b in gpus:
            if a.pindex == b.pindex:
                cells.append("X")
            elif capability == "n":
                cells.append("OK" if node.nvlink_pairs.get((a.pindex, b.pindex)) else "NS")
            else:
                cells.append("OK")
        lines.append(f" GPU{a.index}\t" + "".join(c + "\t" for c in cells))
    return "\n".join(lines) + "\n\n" + P2P_LEGEND


def render_nvlink_status(node: NvidiaNode, ids: list[int] | None = None) -> str:
    out = []
    for g in select(node, ids):
        if not g.links:
            continue
        out.append(f"GPU {g.index}: {node.spec['name']} (UUID: {g.uuid})\n")
        out.extend(f"\t Link {i}: {speed}\n" for i, speed in enumerate(g.links))
    return "".join(out)


def render_nvlink_capabilities(node: NvidiaNode, ids: list[int] | None = None) -> str:
    out = []
    for g in select(node, ids):
        if not g.links:
            continue
        out.append(f"GPU {g.index}: {node.spec['name']} (UUID: {g.uuid})\n")
        for i, speed in enumerate(g.links):
            value = "false" if speed == INACTIVE else "true"
            out.extend(f"\t Link {i}, {cap}: {value}\n" for cap in NVLINK_CAPABILITIES)
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# --query-gpu


def _query_fields(node: NvidiaNode, g: Gpu, now: float | None) -> dict[str, tuple[str, str]]:
    """field -> (value, unit); the unit is appended to the value and to the header unless nounits."""
    spec = node.spec
    r = node.reading(g, "query")
    v = _template_values(node, g, "query")
    pw = spec["power"]
    mhz, mib, watt, pct = "MHz", "MiB", "W", "%"
    return {
        "timestamp": (time.strftime("%Y/%m/%d %H:%M:%S.000", time.localtime(now)), ""),
        "driver_version": (node.driver, ""),
        "count": (str(len(node.gpus)), ""),
        "name": (spec["name"], ""),
        "gpu_name": (spec["name"], ""),
        "serial": (g.serial, ""),
        "gpu_serial": (g.serial, ""),
        "uuid": (g.uuid, ""),
        "gpu_uuid": (g.uuid, ""),
        "index": (str(g.index), ""),
        "pci.bus_id": (g.bus_id, ""),
        "gpu_bus_id": (g.bus_id, ""),
        "pci.domain": (v["pci_domain_hex"], ""),
        "pci.bus": (v["pci_bus_hex"], ""),
        "pci.device": (v["pci_device_hex"], ""),
        "pci.device_id": (v["pci_device_id_hex"], ""),
        "pci.sub_device_id": (v["pci_subsystem_id_hex"], ""),
        "pcie.link.gen.current": ("5", ""),
        "pcie.link.gen.max": ("5", ""),
        "pcie.link.width.current": ("16", ""),
        "pcie.link.width.max": ("16", ""),
        "vbios_version": (spec["vbios_version"], ""),
        "compute_cap": (spec["compute_cap"], ""),
        "persistence_mode": (v["persistence_mode"], ""),
        "display_mode": ("Requested functionality has been deprecated", ""),
        "display_active": ("Disabled", ""),
        "compute_mode": ("Default", ""),
        "mig.mode.current": ("Disabled", ""),
        "mig.mode.pending": ("Disabled", ""),
        "ecc.mode.current": (v["ecc_mode"], ""),
        "ecc.mode.pending": (v["ecc_mode"], ""),
        "pstate": (r["pstate"], ""),
        "temperature.gpu": (str(r["temp"]), ""),
        "temperature.memory": (str(r["mem_temp"]), ""),
        "memory.total": (str(spec["memory_mib"]), mib),
        "memory.reserved": (str(spec["reserved_mib"]), mib),
        "memory.used": (str(r["fb_used"]), mib),
        "memory.free": (str(v["fb_free"]), mib),
        "utilization.gpu": (str(r["util_gpu"]), pct),
        "utilization.memory": (str(r["util_mem"]), pct),
        "power.draw": (r["power_inst"], watt),
        "power.draw.instant": (r["power_inst"], watt),
        "power.draw.average": (r["power_avg"], watt),
        "power.limit": (f"{pw['default']:.2f}", watt),
        "enforced.power.limit": (f"{pw['default']:.2f}", watt),
        "power.default_limit": (f"{pw['default']:.2f}", watt),
        "power.min_limit": (f"{pw['min']:.2f}", watt),
        "power.max_limit": (f"{pw['max']:.2f}", watt),
        "clocks.current.graphics": (str(r["clk_gfx"]), mhz),
        "clocks.gr": (str(r["clk_gfx"]), mhz),
        "clocks.current.sm": (str(r["clk_sm"]), mhz),
        "clocks.sm": (str(r["clk_sm"]), mhz),
        "clocks.current.memory": (str(r["clk_mem"]), mhz),
        "clocks.mem": (str(r["clk_mem"]), mhz),
        "clocks.max.graphics": (str(spec["clocks"]["max_gfx"]), mhz),
        "clocks.max.gr": (str(spec["clocks"]["max_gfx"]), mhz),
        "clocks.max.sm": (str(spec["clocks"]["max_sm"]), mhz),
        "clocks.max.memory": (str(spec["clocks"]["max_mem"]), mhz),
        "clocks.max.mem": (str(spec["clocks"]["max_mem"]), mhz),
        "fabric.state": (node.fabric["state"], ""),
        "fabric.status": (node.fabric["status"], ""),
        "module_id": (str(g.module_id), ""),
    }


class QueryError(Exception):
    pass


def render_query(
    node: NvidiaNode,
    fields: list[str],
    header: bool,
    units: bool,
    ids: list[int] | None = None,
    now: float | None = None,
) -> str:
    rows = [_query_fields(node, g, now) for g in select(node, ids)]
    known = rows[0] if rows else _query_fields_template(node, now)
    for f in fields:
        if f not in known:
            raise QueryError(f'Field "{f}" is not a valid field to query.')
    lines = []
    if header:
        lines.append(", ".join(f + (f" [{known[f][1]}]" if known[f][1] else "") for f in fields))
    for row in rows:
        values = []
        for f in fields:
            value, unit = row[f]
            values.append(f"{value} {unit}" if units and unit else value)
        lines.append(", ".join(values))
    return "".join(line + "\n" for line in lines)


def _query_fields_template(node: NvidiaNode, now: float | None) -> dict:
    """Field table when no GPU is present (to validate names and build the header)."""
    dummy = Gpu(
        0,
        0,
        "00000000:00:00.0",
        0,
        "",
        "",
        "",
        "",
        "",
        0,
        readings=_readings(node.spec, {}, "", node.profile["name"], 0),
    )
    return _query_fields(node, dummy, now)
