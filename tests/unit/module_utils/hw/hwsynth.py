"""Synthetic but format-faithful probe outputs for an HGX-like NVIDIA node, an Atlas A3 node and an
MI300X node, with the faults the simulator injects (tests only; layouts follow the real captures)."""

from __future__ import annotations

import json

from llmb.hw._text import format_cpulist


def _probe(name, kind, cmd, stdout, rc=0, ok_rcs=(0,)):
    return {"name": name, "kind": kind, "cmd": cmd, "rc": rc, "stdout": stdout, "stderr": "", "ok_rcs": list(ok_rcs)}


def numactl_text(nodes: int, cpus_per_node: int) -> str:
    out = [f"available: {nodes} nodes (0-{nodes - 1})" if nodes > 1 else "available: 1 nodes (0)"]
    for n in range(nodes):
        cpus = " ".join(str(c) for c in range(n * cpus_per_node, (n + 1) * cpus_per_node))
        out += [f"node {n} cpus: {cpus}", f"node {n} size: 1031891 MB", f"node {n} free: 1000000 MB"]
    out.append("node distances:")
    out.append("node " + " ".join(f"{n:3d}" for n in range(nodes)))
    for a in range(nodes):
        out.append(f"{a:3d}: " + " ".join(f"{10 if a == b else 21:3d}" for b in range(nodes)))
    return "\n".join(out) + "\n"


def nvidia(n=8, label="NV18", nlinks=18, speed=26.562, model="NVIDIA H100 80GB HBM3", mem=81559,
           driver="550.54.15", numa=(0, 0, 0, 0, 1, 1, 1, 1), nics=8, fm="active", cuda_rc=0,
           persistence="Enabled", ecc="Enabled", numa_balancing=0, missing=(), link_down=(), wrong_numa=None,
           nic_down=(), fabric_state="Completed", with_cuda=True, numa_nodes=2):
    """link_down: [(gpu, link)]; wrong_numa: (gpu, node); missing: GPU indices gone from every tool."""
    gpus = [i for i in range(n) if i not in missing]
    numa = list(numa) + [0] * (n - len(numa))
    if wrong_numa:
        numa[wrong_numa[0]] = wrong_numa[1]
    cpn = 56
    down = {}
    for g, lk in link_down:
        down.setdefault(g, set()).add(lk)

    def pair_label(a, b):
        if not label.startswith("NV"):
            return label
        k = int(label[2:]) - len(down.get(a, ())) - len(down.get(b, ()))
        return f"NV{k}"

    names = [f"GPU{i}" for i in range(len(gpus))]  # tools renumber what they see
    nic_names = [f"NIC{j}" for j in range(nics)]
    head = "\t" + "\t".join(names + nic_names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [head]
    for r, g in enumerate(gpus):
        cells = [" X " if r == c else pair_label(g, h) for c, h in enumerate(gpus)]
        cells += ["PIX" if j == g else ("NODE" if numa[j % n] == numa[g] else "SYS") for j in range(nics)]
        node = numa[g]
        cpus = format_cpulist(list(range(node * cpn, (node + 1) * cpn)))
        rows.append(f"GPU{r}\t" + "\t".join(cells) + f"\t{cpus}\t{node}\t\tN/A")
    for j in range(nics):
        cells = ["PIX" if j == g else ("NODE" if numa[j % n] == numa[g] else "SYS") for g in gpus]
        cells += [" X " if j == k else "SYS" for k in range(nics)]
        rows.append(f"NIC{j}\t" + "\t".join(cells))
    topo = "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    if nics:
        topo += "\nNIC Legend:\n\n" + "\n".join(f"  NIC{j}: mlx5_{j}" for j in range(nics)) + "\n"
    nvl = []
    for r, g in enumerate(gpus):
        nvl.append(f"GPU {r}: {model} (UUID: GPU-{g:08d}-0000-0000-0000-000000000000)")
        for lk in range(nlinks):
            nvl.append(f"\t Link {lk}: <inactive>" if lk in down.get(g, ()) else f"\t Link {lk}: {speed} GB/s")
    query = ["index, name, uuid, pci.bus_id, driver_version, memory.total [MiB], compute_cap, persistence_mode, "
             "ecc.mode.current"]
    xml = ['<?xml version="1.0" ?>', "<nvidia_smi_log>", f"<driver_version>{driver}</driver_version>",
           "<cuda_version>12.8</cuda_version>", f"<attached_gpus>{len(gpus)}</attached_gpus>"]
    for r, g in enumerate(gpus):
        bus = f"00000000:{0x18 + 0x10 * g:02X}:00.0"
        query.append(f"{r}, {model}, GPU-{g:08d}-0000-0000-0000-000000000000, {bus}, {driver}, {mem} MiB, 9.0, "
                     f"{persistence}, {ecc}")
        xml.append(
            f'<gpu id="{bus}"><product_name>{model}</product_name><uuid>GPU-{g:08d}-0000-0000-0000-000000000000</uuid>'
            f"<persistence_mode>{persistence}</persistence_mode><minor_number>{r}</minor_number>"
            f"<fb_memory_usage><total>{mem} MiB</total></fb_memory_usage>"
            f"<ecc_mode><current_ecc>{ecc}</current_ecc></ecc_mode>"
            f"<remapped_rows><remapped_row_pending>No</remapped_row_pending>"
            f"<remapped_row_failure>No</remapped_row_failure></remapped_rows>"
            f"<fabric><state>{fabric_state}</state><status>{'Success' if fabric_state == 'Completed' else 'N/A'}</status>"
            "</fabric></gpu>")
    xml.append("</nvidia_smi_log>")
    cuda = {"library": "libcuda.so.1", "present": True, "init_rc": cuda_rc}
    if cuda_rc == 0:
        cuda.update(count=len(gpus), count_rc=0)
    elif cuda_rc == 802:
        cuda["error_name"] = "CUDA_ERROR_SYSTEM_NOT_READY"
    if not with_cuda:
        cuda = {"library": "libcuda.so.1", "present": False, "error": "libcuda.so.1: cannot open shared object file"}
    ib = []
    for j in range(nics):
        state, phys = ("Down", "Disabled") if j in nic_down else ("Active", "LinkUp")
        ib += [f"CA 'mlx5_{j}'", "\tCA type: MT4129", "\tNumber of ports: 1", "\tFirmware version: 28.39.1002",
               "\tPort 1:", f"\t\tState: {state}", f"\t\tPhysical state: {phys}",
               f"\t\tRate: {400 if state == 'Active' else 40}", "\t\tLink layer: InfiniBand"]
    probes = [
        _probe("smi-qx", "nvidia-smi-q-xml", "nvidia-smi -q -x", "\n".join(xml) + "\n"),
        _probe("query", "nvidia-smi-query", "nvidia-smi --query-gpu=...", "\n".join(query) + "\n"),
        _probe("topo", "nvidia-smi-topo", "nvidia-smi topo -m", topo),
        _probe("nvlink-s", "nvidia-smi-nvlink", "nvidia-smi nvlink -s", "\n".join(nvl) + "\n"),
        _probe("numactl", "numactl", "numactl -H", numactl_text(numa_nodes, cpn)),
        _probe("numa-balancing", "numa-balancing", "cat /proc/sys/kernel/numa_balancing", f"{numa_balancing}\n"),
        _probe("fabricmanager", "systemctl-is-active", "systemctl is-active nvidia-fabricmanager", fm + "\n",
               rc=0 if fm == "active" else 3, ok_rcs=(0, 3, 4)),
        _probe("fabricmanager-proc", "process-list", "scan /proc for nv-fabricmanager",
               "4242 /usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n" if fm == "active" else ""),
        _probe("cuda-init", "cuda-probe", "python3 -c <cuda-init probe>", json.dumps(cuda) + "\n"),
    ]
    if nics:
        probes.append(_probe("ibstat", "ibstat", "ibstat", "\n".join(ib) + "\n"))
    return probes


def ascend(cards=8, chips=2, model="Ascend910", hbm=65536, version="25.2.0", missing=(), link_down=(),
           no_ip=(), hccs_down=(), numa_nodes=8, numa_balancing=0, health=None, cross="HCCS_SW"):
    """link_down / no_ip: device (phy) ids with the HCCN port down / without IP; hccs_down: [(a, b)] pairs."""
    health = health or {}
    devs = [(c, k, c * chips + k) for c in range(cards) for k in range(chips) if c * chips + k not in missing]
    lines = ["+" + "-" * 96 + "+", f"| npu-smi {version}                   Version: {version}" + " " * 47 + "|",
             "+---------------------------+---------------+----------------------------------------------------+",
             "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
             "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
             "+===========================+===============+====================================================+"]
    for card, chip, phy in devs:
        lines.append(f"| {card:<5d} {model:<19s} | {health.get(phy, 'OK'):<13s} | {'210.0' if chip == 0 else '-':<11s} "
                     f"43                0    / 0             |")
        lines.append(f"| {chip:<5d} {phy:<19d} | 0000:{0x80 + 2 * phy:02X}:00.0  | 0           0    / 0          "
                     f"3400 / {hbm}         |")
        lines.append("+===========================+===============+====================================================+")
    # npu-smi info always ends with the process table (tests/sim/accelsim/ascend.py render_info).
    lines += ["+---------------------------+---------------+----------------------------------------------------+",
              "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
              "+===========================+===============+====================================================+"]
    for card in sorted({c for c, _, _ in devs}):
        lines.append(f"| {'No running processes found in NPU ' + str(card):<95}|")
        lines.append("+===========================+===============+====================================================+")
    names = [f"Phy-ID{p}" for _, _, p in devs]
    topo = ["           " + "".join(f"{nm:<11s}" for nm in names)]
    down = {frozenset(p) for p in hccs_down}
    for ca, _ka, pa in devs:
        cells = []
        for cb, _kb, pb in devs:
            if pa == pb:
                cells.append("X")
            elif frozenset((pa, pb)) in down:
                cells.append("PIX")
            else:
                cells.append("SIO" if ca == cb else cross)
        topo.append(f"{'Phy-ID' + str(pa):<11s}" + "".join(f"{c:<11s}" for c in cells))
    topo.append("\nLegend:\n\n  X    = Self\n")
    probes = [
        _probe("npu-smi", "npu-smi-info", "npu-smi info", "\n".join(lines) + "\n"),
        _probe("npu-topo", "npu-smi-topo", "npu-smi info -t topo", "\n".join(topo) + "\n"),
        _probe("version-info", "ascend-version-info", "cat /usr/local/Ascend/driver/version.info",
               f"Version={version}\npackage_version={version}\n"),
        _probe("numactl", "numactl", "numactl -H", numactl_text(numa_nodes, 48)),
        _probe("numa-balancing", "numa-balancing", "cat /proc/sys/kernel/numa_balancing", f"{numa_balancing}\n"),
    ]
    for _c, _k, p in devs:
        probes.append(_probe(f"hccn-{p}-link", "hccn-tool", f"hccn_tool -i {p} -link -g",
                             f"link status: {'DOWN' if p in link_down else 'UP'}\n"))
        if p in no_ip:
            probes.append(_probe(f"hccn-{p}-ip", "hccn-tool", f"hccn_tool -i {p} -ip -g", "", rc=255))
        else:
            probes.append(_probe(f"hccn-{p}-ip", "hccn-tool", f"hccn_tool -i {p} -ip -g",
                                 f"ipaddr:192.168.{p}.10\nnetmask:255.255.255.0\n"))
        probes.append(_probe(f"hccn-{p}-net_health", "hccn-tool", f"hccn_tool -i {p} -net_health -g",
                             "net health status: Success\n"))
    return probes


def amd(n=8, model="AMD Instinct MI300X", vram=196592, driver="6.10.5", numa=(0, 0, 0, 0, 1, 1, 1, 1),
        xgmi_down=(), missing=(), numa_balancing=0, nics=8):
    gpus = [i for i in range(n) if i not in missing]
    down = {frozenset(p) for p in xgmi_down}
    static = {"gpu_data": [
        {"gpu": r, "asic": {"market_name": model, "device_id": "0x74a1"}, "bus": {"bdf": f"0000:{0x05 + 0x20 * g:02x}:00.0"},
         "vram": {"type": "HBM3", "size": {"value": vram, "unit": "MB"}}, "driver": {"name": "amdgpu", "version": driver},
         "numa": {"node": numa[g], "affinity": numa[g]}} for r, g in enumerate(gpus)]}
    topo = []
    for r, g in enumerate(gpus):
        links = []
        for r2, h in enumerate(gpus):
            if g == h:
                links.append({"gpu": r2, "link_type": "SELF", "link_status": "ENABLED", "weight": 0, "num_hops": 0})
            elif frozenset((g, h)) in down:
                links.append({"gpu": r2, "link_type": "PCIE", "link_status": "ENABLED", "weight": 40, "num_hops": 2})
            else:
                links.append({"gpu": r2, "link_type": "XGMI", "link_status": "ENABLED", "weight": 15, "num_hops": 1})
        topo.append({"gpu": r, "bdf": static["gpu_data"][r]["bus"]["bdf"], "links": links})
    ib = []
    for j in range(nics):
        ib += [f"CA 'bnxt_re{j}'", "\tCA type: BCM57608", "\tNumber of ports: 1", "\tPort 1:", "\t\tState: Active",
               "\t\tPhysical state: LinkUp", "\t\tRate: 400", "\t\tLink layer: Ethernet"]
    extra = [_probe("ibstat", "ibstat", "ibstat", "\n".join(ib) + "\n")] if nics else []
    return extra + [
        _probe("amd-smi-static", "amd-smi-static-json", "amd-smi static --json", json.dumps(static)),
        _probe("amd-smi-topology", "amd-smi-topology-json", "amd-smi topology --json", json.dumps(topo)),
        _probe("numactl", "numactl", "numactl -H", numactl_text(2, 96)),
        _probe("numa-balancing", "numa-balancing", "cat /proc/sys/kernel/numa_balancing", f"{numa_balancing}\n"),
    ]
