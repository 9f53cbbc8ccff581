"""AMD Instinct: the node model (GPUs on an XGMI mesh) and `amd-smi`, `rocm-smi --showtopo`.

`rocm-smi --showtopo` follows the public MI300X capture (fixtures/public/rocm-smi). amd-smi has no
capture in the fixtures: its layouts follow the amd-smi documentation and changelog examples
(`list`, `static`, `topology`, `version`, human-readable and --json), see docs/simulator.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import identity
from .faults import active
from .main import Node, Result, UsageError

VENDOR_NAME = "Advanced Micro Devices Inc. [AMD/ATI]"
DEGC = "\u00b0C"
ROCM_WIDTH = 90


@dataclass
class AmdGpu:
    index: int  # amd-smi / rocm-smi numbering of present GPUs
    pindex: int
    bdf: str
    uuid: str
    kfd_id: int
    node_id: int
    numa: int
    serial: str


@dataclass
class AmdNode:
    profile: dict
    spec: dict
    versions: dict
    gpus: list[AmdGpu]
    down_pairs: set[tuple[int, int]]


def build(node: Node) -> AmdNode:
    profile, faults, host = node.profile, node.faults, node.host
    spec = profile["device_spec"]
    name = profile["name"]
    missing = {f["index"] for f in active(faults, "device_missing")}
    numa_moves = {f["gpu"]: f.get("numa") for f in active(faults, "numa_wrong")}
    count = len(profile["numa_nodes"])
    gpus = []
    for pindex, g in enumerate(profile["gpus"]):
        if pindex in missing:
            continue
        numa = g["numa"]
        if pindex in numa_moves:
            numa = (numa + 1) % count if numa_moves[pindex] is None else numa_moves[pindex]
        gpus.append(
            AmdGpu(
                index=len(gpus),
                pindex=pindex,
                bdf=g["bdf"],
                uuid=g.get("uuid") or identity.amd_uuid(host, name, pindex, spec["device_id"]),
                kfd_id=g.get("kfd_id") or 10000 + identity.number("kfd", host, name, pindex, modulo=55000),
                node_id=g["kfd_node"],
                numa=numa,
                serial="0x" + identity.digest("amd-serial", host, name, pindex)[:8].hex().upper(),
            )
        )
    down: set[tuple[int, int]] = set()
    for f in active(faults, "link_down"):
        peer = [p for p in range(len(profile["gpus"])) if p != f["gpu"]][f["link"]]
        down |= {(f["gpu"], peer), (peer, f["gpu"])}
    versions = dict(profile["versions"])
    for f in active(faults, "driver_version"):
        versions["amdgpu"] = f["version"]
    return AmdNode(profile, spec, versions, gpus, down)


def _link(model: AmdNode, a: AmdGpu, b: AmdGpu) -> dict:
    """Pair properties as amd-smi topology reports them. A downed XGMI link falls back to PCIe."""
    if a.pindex == b.pindex:
        return {"weight": 0, "link_status": "ENABLED", "link_type": "SELF", "num_hops": 0, "bandwidth": "N/A"}
    if (a.pindex, b.pindex) in model.down_pairs:
        same = a.numa == b.numa
        return {
            "weight": 40 if same else 52,
            "link_status": "DISABLED",
            "link_type": "PCIE",
            "num_hops": 2 if same else 3,
            "bandwidth": "N/A",
        }
    x = model.spec["xgmi"]
    return {
        "weight": x["weight"],
        "link_status": "ENABLED",
        "link_type": "XGMI",
        "num_hops": x["hops"],
        "bandwidth": x["bandwidth"],
    }


# ---------------------------------------------------------------------------------------------
# amd-smi


def _vu(value: object, unit: str) -> dict:
    return {"value": value, "unit": unit}


def _static(model: AmdNode, g: AmdGpu) -> dict:
    s = model.spec
    temp = {k: _vu(v, DEGC) for k, v in (("hotspot", 100), ("vram", 105))}
    return {
        "gpu": g.index,
        "asic": {
            "market_name": s["market_name"],
            "vendor_id": "0x1002",
            "vendor_name": VENDOR_NAME,
            "subvendor_id": "0x1002",
            "device_id": s["device_id"],
            "subsystem_id": s["subsystem_id"],
            "rev_id": s["rev_id"],
            "asic_serial": g.serial,
            "oam_id": g.pindex,
            "num_compute_units": s["compute_units"],
            "target_graphics_version": s["gfx"],
        },
        "bus": {
            "bdf": g.bdf,
            "max_pcie_width": 16,
            "max_pcie_speed": _vu(32, "GT/s"),
            "pcie_interface_version": "Gen 5",
            "slot_type": "OAM",
        },
        "vbios": dict(s["vbios"]),
        "limit": {
            "max_power": _vu(s["max_power_w"], "W"),
            "min_power": _vu(0, "W"),
            "socket_power": _vu(s["max_power_w"], "W"),
            "slowdown_edge_temperature": "N/A",
            "slowdown_hotspot_temperature": temp["hotspot"],
            "slowdown_vram_temperature": temp["vram"],
            "shutdown_edge_temperature": "N/A",
            "shutdown_hotspot_temperature": _vu(110, DEGC),
            "shutdown_vram_temperature": _vu(115, DEGC),
        },
        "driver": {"name": "amdgpu", "version": model.versions["amdgpu"]},
        "board": {
            "model_number": s["board"]["model_number"],
            "product_serial": g.serial[2:],
            "fru_id": "N/A",
            "product_name": s["board"]["product_name"],
            "manufacturer_name": "AMD",
        },
        "soc_pstate": "N/A",
        "xgmi_plpd": "N/A",
        "process_isolation": "Disabled",
        "numa": {"node": g.numa, "affinity": g.numa},
        "vram": {
            "type": s["vram_type"],
            "vendor": s["vram_vendor"],
            "size": _vu(s["vram_mb"], "MB"),
            "bit_width": s["vram_bit_width"],
            "max_bandwidth": "N/A",
        },
    }


def _human(data: dict, indent: int = 1) -> str:
    """amd-smi's human-readable form: upper-case keys, 4 spaces per level, value+unit pairs joined."""
    out = []
    pad = "    " * indent
    for key, value in data.items():
        if isinstance(value, dict) and set(value) == {"value", "unit"}:
            out.append(f"{pad}{key.upper()}: {value['value']} {value['unit']}\n")
        elif isinstance(value, dict):
            out.append(f"{pad}{key.upper()}:\n" + _human(value, indent + 1))
        else:
            out.append(f"{pad}{key.upper()}: {value}\n")
    return "".join(out)


def _per_gpu_text(items: list[dict]) -> str:
    return "".join(
        f"GPU: {item['gpu']}\n" + _human({k: v for k, v in item.items() if k != "gpu"}) + "\n"
        for item in items
    )


def _json(data: object) -> str:
    return json.dumps(data, indent=4) + "\n"


def _select(model: AmdNode, args: list[str]) -> tuple[list[AmdGpu], list[str]]:
    """Apply -g/--gpu ID... ; returns selected GPUs and remaining args."""
    rest, chosen, i = [], None, 0
    while i < len(args):
        if args[i] in ("-g", "--gpu"):
            chosen = []
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                chosen.append(args[i])
                i += 1
            continue
        rest.append(args[i])
        i += 1
    if chosen is None or chosen == ["all"]:
        return model.gpus, rest
    selected = []
    for item in chosen:
        gpu = next((g for g in model.gpus if item in (str(g.index), g.bdf, g.uuid)), None)
        if gpu is None:
            raise UsageError(f"GPU {item!r} not found")
        selected.append(gpu)
    return selected, rest


def amd_smi_main(node: Node, argv: list[str], result: Result) -> None:
    model = build(node)
    if not argv:
        result.write(
            f"usage: amd-smi [-h]  ...\n\nAMD System Management Interface | Version: "
            f"{model.versions['tool']} | ROCm version: {model.versions['rocm']} | Platform: Linux Baremetal\n"
        )
        return
    cmd, args = argv[0], argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    gpus, rest = _select(model, args)
    if rest:
        raise UsageError(f"{cmd} {' '.join(rest)}: simulated options are -g/--gpu and --json")
    if cmd == "version":
        v = model.versions
        if as_json:
            result.write(
                _json(
                    [
                        {
                            "tool": "AMDSMI Tool",
                            "version": v["tool"],
                            "amdsmi_library_version": v["library"],
                            "rocm_version": v["rocm"],
                            "amdgpu_version": v["amdgpu"],
                            "amd_hsmp_driver_version": "N/A",
                        }
                    ]
                )
            )
        else:
            result.write(
                f"AMDSMI Tool: {v['tool']} | AMDSMI Library version: {v['library']} | "
                f"ROCm version: {v['rocm']} | amdgpu version: {v['amdgpu']} | amd_hsmp version: N/A\n"
            )
    elif cmd == "list":
        items = [
            {
                "gpu": g.index,
                "bdf": g.bdf,
                "uuid": g.uuid,
                "kfd_id": g.kfd_id,
                "node_id": g.node_id,
                "partition_id": 0,
            }
            for g in gpus
        ]
        result.write(_json(items) if as_json else _per_gpu_text(items))
    elif cmd == "static":
        items = [_static(model, g) for g in gpus]
        result.write(_json({"gpu_data": items}) if as_json else _per_gpu_text(items))
    elif cmd == "topology":
        result.write(_topology_json(model, gpus) if as_json else _topology_text(model, gpus))
    else:
        raise UsageError(f"{cmd}: simulated amd-smi commands are list, static, topology, version")


TOPOLOGY_TABLES = (
    ("ACCESS TABLE", "link_status"),
    ("WEIGHT TABLE", "weight"),
    ("HOPS TABLE", "num_hops"),
    ("LINK TYPE TABLE", "link_type"),
    ("NUMA BW TABLE", "bandwidth"),
)


def _topology_text(model: AmdNode, gpus: list[AmdGpu]) -> str:
    tables = []
    for title, key in TOPOLOGY_TABLES:
        lines = [f"{title}:", (" " * 13 + "".join(f"{g.bdf:<13}" for g in model.gpus)).rstrip()]
        for a in gpus:
            cells = []
            for b in model.gpus:
                value = _link(model, a, b)[key]
                if key == "link_status" and a.pindex == b.pindex:
                    value = "ENABLED"
                cells.append(f"{value!s:<13}")
            lines.append((f"{a.bdf:<13}" + "".join(cells)).rstrip())
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)


def _topology_json(model: AmdNode, gpus: list[AmdGpu]) -> str:
    return _json(
        [
            {
                "gpu": a.index,
                "bdf": a.bdf,
                "links": [{"gpu": b.index, "bdf": b.bdf, **_link(model, a, b)} for b in model.gpus],
            }
            for a in gpus
        ]
    )


# ---------------------------------------------------------------------------------------------
# rocm-smi


def _banner(text: str) -> str:
    return f" {text} ".center(ROCM_WIDTH, "=") + "\n"


def render_productname(model: AmdNode) -> str:
    """`rocm-smi --showproductname` in the ROCm 6.x layout of the public MI210 capture
    (tests/fixtures/captures/rocm-smi/mi210-2gpu-showproductname-rocm-5480.txt)."""
    s = model.spec
    out = ["\n", _banner("ROCm System Management Interface"), _banner("Product Info")]
    for g in model.gpus:
        series = s["market_name"].removeprefix("AMD ")
        for key, tabs, value in (("Card Series", "\t\t", series), ("Card Model", "\t\t", s["device_id"]),
                                 ("Card Vendor", "\t\t", "Advanced Micro Devices, Inc. [AMD/ATI]"),
                                 ("Card SKU", "\t\t", "D65209"), ("Subsystem ID", "\t", s["subsystem_id"]),
                                 ("Device Rev", "\t\t", s["rev_id"]), ("Node ID", "\t\t", str(g.node_id)),
                                 ("GUID", "\t\t", str(g.kfd_id)), ("GFX Version", "\t\t", s["gfx"])):
            out.append(f"GPU[{g.index}]\t\t: {key}: {tabs}{value}\n")
    out += ["=" * ROCM_WIDTH + "\n", _banner("End of ROCm SMI Log")]
    return "".join(out)


def rocm_smi_main(node: Node, argv: list[str], result: Result) -> None:
    model = build(node)
    if argv == ["--showproductname"]:
        result.write(render_productname(model))
        return
    if argv != ["--showtopo"]:
        raise UsageError(f"{' '.join(argv) or '(no arguments)'}: simulated are 'rocm-smi --showtopo' and "
                         "'rocm-smi --showproductname'")
    gpus = model.gpus
    out = [_banner("ROCm System Management Interface")]
    for title, key in (
        ("Weight between two GPUs", "weight"),
        ("Hops between two GPUs", "num_hops"),
        ("Link Type between two GPUs", "link_type"),
    ):
        out.append(_banner(title))
        out.append(" " * 7 + "".join(f"{'GPU' + str(g.index):<13}" for g in gpus) + "\n")
        for a in gpus:
            cells = []
            for b in gpus:
                value = _link(model, a, b)[key]
                cells.append(f"{'0' if value == 'SELF' else value!s:<13}")
            out.append(f"{'GPU' + str(a.index):<7}" + "".join(cells) + "\n")
        out.append("\n")
    out.append(_banner("Numa Nodes"))
    for g in gpus:
        out.append(f"GPU[{g.index}]\t\t: (Topology) Numa Node: {g.numa}\n")
        out.append(f"GPU[{g.index}]\t\t: (Topology) Numa Affinity: {g.numa}\n")
    out.append(_banner("End of ROCm SMI Log"))
    result.write("".join(out))
