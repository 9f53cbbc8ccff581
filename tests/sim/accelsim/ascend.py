"""Huawei Ascend: the node model (cards, chips, HCCS, HCCN ports) and `npu-smi`, `hccn_tool`,
/usr/local/Ascend/driver/version.info.

Layouts follow the public captures (fixtures/public/npu-smi, npu-smi-topo, hccn_tool,
ascend-version-info): A3 shows 'Chip  Phy-ID' rows and SIO between the two dies of a card; A2
(910B) shows one chip per card and a CPU Affinity column in the topology.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import identity
from .faults import active
from .main import Node, Result, UsageError

WIDTH = 96  # between the outer '|' of npu-smi info
TOP = "+" + "-" * WIDTH + "+\n"
MID = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+\n"
EQ = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+\n"
TOPO_LEGEND = [
    ("X", "Self"),
    ("SYS", "Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI."),
    ("PHB", "Path traversing PCIe and the PCIe host bridge of a CPU."),
    ("PIX", "Path traversing a single PCIe switch"),
    ("PXB", "Path traversing multipul PCIe switches"),
    ("HCCS", "Connection traversing HCCS."),
    ("SIO", "Path traversing the SIO bus"),
    ("HCCS_SW", "Connection traversing HCCS through a switch"),
    ("NA", "Unknown relationship."),
]


@dataclass
class Chip:
    index: int  # device (logic) id: what hccn_tool -i and faults use
    card: int  # NPU ID in npu-smi
    chip: int  # chip within the card
    phy_id: int
    bus_id: str
    numa: int
    cpus: str
    power: float
    temp: int
    hbm_used: int
    aicore: int
    ip: str
    netmask: str
    port_up: bool = True


@dataclass
class AscendNode:
    profile: dict
    spec: dict
    version: str
    chips: list[Chip]  # present chips only
    down_pairs: set[tuple[int, int]]
    host: str


def build(node: Node) -> AscendNode:
    profile, faults, host = node.profile, node.faults, node.host
    spec = profile["device_spec"]
    missing = {f["index"] for f in active(faults, "device_missing")}
    hccn_down = {f["device"] for f in active(faults, "hccn_down")}
    numa_moves = {f["gpu"]: f.get("numa") for f in active(faults, "numa_wrong")}
    numa_nodes = profile["numa_nodes"]
    hccn = profile["hccn"]
    idle = spec["idle"]
    node_no = identity.node_number(host)
    chips: list[Chip] = []
    index = 0
    for card in profile["cards"]:
        for chip_no, c in enumerate(card["chips"]):
            numa = card["numa"]
            if index in numa_moves:
                target = numa_moves[index]
                numa = (numa + 1) % len(numa_nodes) if target is None else target

            def j(key: str, spread: float, index: int = index) -> float:
                return identity.jitter(host, profile["name"], index, key, spread)

            chips.append(
                Chip(
                    index=index,
                    card=card["id"],
                    chip=chip_no,
                    phy_id=c["phy_id"],
                    bus_id=c["bus_id"],
                    numa=numa,
                    cpus=numa_nodes[numa],
                    power=round(idle["power"] + j("power", 6), 1),
                    temp=idle["temp"] + round(j("temp", 3)),
                    hbm_used=idle["hbm_used_mb"] + round(j("hbm", 12)),
                    aicore=idle["aicore"],
                    ip=hccn["address"].format(subnet=hccn["subnet_base"] + index, node=node_no, device=index),
                    netmask=hccn["netmask"],
                    port_up=index not in hccn_down,
                )
            )
            index += 1
    down: set[tuple[int, int]] = set()
    for f in active(faults, "link_down"):
        peer = [c.index for c in chips if c.index != f["gpu"]][f["link"]]
        down |= {(f["gpu"], peer), (peer, f["gpu"])}
    version = profile["npu_smi_version"]
    for f in active(faults, "driver_version"):
        version = f["version"]
    present = [c for c in chips if c.index not in missing]
    return AscendNode(profile, spec, version, present, down, host)


def driver_version(profile: dict, faults: list[dict]) -> str:
    fixed = active(faults, "driver_version")
    return fixed[-1]["version"] if fixed else dict(profile["driver"]["version_info"])["Version"]


def render_version_info(profile: dict, faults: list[dict]) -> str:
    """/usr/local/Ascend/driver/version.info: key=value lines (Version and package_version follow faults)."""
    version = driver_version(profile, faults)
    lines = []
    for key, value in profile["driver"]["version_info"]:
        if key in ("Version", "package_version") and active(faults, "driver_version"):
            value = version
        lines.append(f"{key}={value}\n")
    return "".join(lines)


# ---------------------------------------------------------------------------------------------
# npu-smi


def render_info(model: AscendNode) -> str:
    two_dies = model.spec["chips_per_card"] > 1
    out = [TOP, f"| npu-smi {model.version:<25}Version: {model.version:<53}|\n", MID]
    out.append(
        f"| {'NPU   Name':<26}| {'Health':<14}| {'Power(W)    Temp(C)           Hugepages-Usage(page)':<51}|\n"
    )
    second = "Chip  Phy-ID" if two_dies else "Chip"
    out.append(f"| {second:<26}| {'Bus-Id':<14}| {'AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)':<51}|\n")
    out.append(EQ)
    cards = _cards(model)
    for card, chips in cards.items():
        for n, c in enumerate(chips):
            power = f"{c.power:.1f}" if c.chip == 0 else "-"
            hbm_total = model.spec["hbm_mb"]
            out.append(
                f"| {card:<6}{model.spec['name']:<20}| {'OK':<14}| {power:<12}{c.temp:<18}{0:<5}/ {0:<14}|\n"
            )
            label = f"{c.chip:<6}{c.phy_id:<20}" if two_dies else f"{c.chip:<26}"
            out.append(
                f"| {label}| {c.bus_id:<14}| {c.aicore:<12}{0:<5}/ {0:<11}{c.hbm_used:<5}/ {hbm_total:<14}|\n"
            )
            out.append(TOP if n != len(chips) - 1 else EQ)
    out.append(MID)
    out.append(
        f"| {'NPU     Chip':<26}| {'Process id':<14}| {'Process name':<25}| {'Process memory(MB)':<24}|\n"
    )
    out.append(EQ)
    for card in cards:
        out.append(f"| {'No running processes found in NPU ' + str(card):<95}|\n")
        out.append(EQ)
    return "".join(out)


def _cards(model: AscendNode) -> dict[int, list[Chip]]:
    cards: dict[int, list[Chip]] = {}
    for c in model.chips:
        cards.setdefault(c.card, []).append(c)
    return cards


def render_topo(model: AscendNode) -> str:
    topo = model.profile["topology"]
    label = topo["label"]

    def name(c: Chip) -> str:
        return f"Phy-ID{c.phy_id}" if label == "Phy-ID" else f"NPU{c.card}"

    def cell(a: Chip, b: Chip) -> str:
        if a.index == b.index:
            return "X"
        if (a.index, b.index) in model.down_pairs:
            return topo["down"]
        return topo["sibling"] if a.card == b.card else topo["peer"]

    header = "\t   " + "".join(f"{name(c):<11}" for c in model.chips)
    if topo["cpu_affinity"]:
        header += "CPU Affinity"
    lines = [header.rstrip()]
    for a in model.chips:
        row = f"{name(a):<11}" + "".join(f"{cell(a, b):<11}" for b in model.chips)
        if topo["cpu_affinity"]:
            row += a.cpus
        lines.append(row.rstrip())
    used = {"X", "SYS", "PHB", "PIX", "PXB", topo["sibling"], topo["peer"], "NA"}
    if label == "Phy-ID":
        used |= {"HCCS"}
    legend = [f"  {k:<4} = {v}" for k, v in TOPO_LEGEND if k in used]
    return "\n".join(lines) + "\n\nLegend:\n\n" + "\n".join(legend) + "\n"


def render_board(model: AscendNode, card: int) -> str:
    chips = _cards(model).get(card)
    board = model.profile["board"]
    fields = [
        ("NPU ID", card),
        ("Product Name", board["product_name"]),
        ("Model", "NA"),
        ("Manufacturer", "Huawei"),
        ("Serial Number", identity.ascend_serial(model.host, model.profile["name"], card)),
        ("Software Version", model.version),
        ("Firmware Version", board["firmware_version"]),
        ("Compatibility", "OK"),
        ("Board ID", board["board_id"]),
        ("PCB ID", "A"),
        ("BOM ID", "1"),
        ("PCIe Bus Info", chips[0].bus_id),
        ("Slot ID", card),
        ("Class ID", "NA"),
        ("PCI Vendor ID", "0x19E5"),
        ("PCI Device ID", board["pci_device_id"]),
        ("Subsystem Vendor ID", board["subsystem_vendor_id"]),
        ("Subsystem Device ID", board["subsystem_device_id"]),
        ("Chip Count", len(chips)),
    ]
    return "".join(f"\t{k:<31}: {v}\n" for k, v in fields)


def npu_smi_main(node: Node, argv: list[str], result: Result) -> None:
    model = build(node)
    if argv == ["info"]:
        result.write(render_info(model))
        return
    if argv[:3] == ["info", "-t", "topo"] and len(argv) == 3:
        result.write(render_topo(model))
        return
    if argv[:3] == ["info", "-t", "board"]:
        opts = dict(zip(argv[3::2], argv[4::2], strict=False))
        if len(argv) % 2 == 0 or set(opts) - {"-i", "-c"} or "-i" not in opts:
            raise UsageError("simulated: npu-smi info -t board -i CARD [-c CHIP]")
        try:
            card = int(opts["-i"])
        except ValueError:
            raise UsageError(f"card id must be a number, found {opts['-i']!r}") from None
        if card not in _cards(model):
            result.fail(1, "The card id is invalid.", to_stdout=True)
            return
        result.write(render_board(model, card))
        return
    raise UsageError(f"{' '.join(argv)}: simulated are 'info', 'info -t topo', 'info -t board -i N [-c C]'")


# ---------------------------------------------------------------------------------------------
# hccn_tool


def hccn_tool_main(node: Node, argv: list[str], result: Result) -> None:
    """`hccn_tool -i N -link|-ip|-net_health|-gateway|-netdetect -g` and `-ping -g address A`, in the formats
    of the public captures (tests/fixtures/captures/hccn_tool). A ping answers when A is on the NPU's own
    subnet (NPU i of every node shares 192.168.(100+i).0/24, the usual ring pairing) and its port is up,
    unless a hccn_ping_lost fault silences the NPU."""
    model = build(node)
    queries = ("-link", "-ip", "-net_health", "-gateway", "-netdetect")
    ping = len(argv) == 6 and argv[0] == "-i" and argv[2] == "-ping" and argv[3] == "-g" and argv[4] == "address"
    if not ping and (len(argv) != 4 or argv[0] != "-i" or argv[3] != "-g" or argv[2] not in queries):
        raise UsageError(f"{' '.join(argv)}: simulated are 'hccn_tool -i N -link|-ip|-net_health|-gateway|-netdetect -g'"
                         " and 'hccn_tool -i N -ping -g address A'")
    try:
        device = int(argv[1])
    except ValueError:
        raise UsageError(f"device id must be a number, found {argv[1]!r}") from None
    chip = next((c for c in model.chips if c.index == device), None)
    if chip is None:
        result.fail(1, f"Device id {device} is invalid, please check it.", to_stdout=True)
        return
    what = argv[2]
    gateway = chip.ip.rsplit(".", 1)[0] + ".254"
    if ping:
        target = argv[5]
        silent = any(f.get("kind") == "hccn_ping_lost" and f.get("device") == device for f in node.faults)
        same_net = target.rsplit(".", 1)[0] == chip.ip.rsplit(".", 1)[0]
        answers = chip.port_up and same_net and not silent and target != chip.ip
        lines = [f"device {device} PING {target}\n"]
        for seq in range(3):
            ms = 0.063 + ((identity.number(node.host, device, target, seq, modulo=90)) / 1000.0)
            lines.append(f"recv seq={seq},time={ms:.6f}ms\n" if answers else f"recv time out seq={seq}\n")
        got = 3 if answers else 0
        lines.append(f"3 packets transmitted, {got} received, {100 * (3 - got) / 3:.2f}% packet loss\n")
        result.write("".join(lines))
        if not answers:
            result.rc = 1  # hccn_tool fails a ping that timed out (PING_INNER_ERROR)
    elif what == "-link":
        result.write(f"link status: {'UP' if chip.port_up else 'DOWN'}\n")
    elif what == "-ip":
        if chip.port_up:
            result.write(f"ipaddr:{chip.ip}\nnetmask:{chip.netmask}\n")
        else:
            result.write("ipaddr:\nnetmask:\n")
    elif what == "-gateway":
        result.write(f"default gateway:{gateway}, Iface:eth{device}\n")
    elif what == "-netdetect":
        result.write(f"netdetect address: {gateway}\n")
    else:
        result.write(f"net health status: {'Success' if chip.port_up else 'Fault'}\n")
