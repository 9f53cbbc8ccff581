"""The registry of parser kinds, kind detection and parse() (see llmb.hw)."""

from __future__ import annotations

import re

from . import amd, ascend, fabric, health, host, nvidia
from ._text import ParseError, split_capture, strip_ansi, strip_capture_header

__all__ = ["KINDS", "ParseError", "detect_kind", "parse", "parse_capture", "split_capture", "strip_capture_header"]

# kind -> (parser, one-line description)
KINDS = {
    "nvidia-smi": (nvidia.parse_smi_table, "default `nvidia-smi` table"),
    "nvidia-smi-query": (nvidia.parse_query, "`nvidia-smi --query-gpu=... --format=csv`"),
    "nvidia-smi-q": (nvidia.parse_smi_q, "`nvidia-smi -q`"),
    "nvidia-smi-q-xml": (nvidia.parse_smi_xml, "`nvidia-smi -q -x`"),
    "nvidia-smi-topo": (nvidia.parse_topo, "`nvidia-smi topo -m`"),
    "nvidia-smi-topo-p2p": (nvidia.parse_topo_p2p, "`nvidia-smi topo -p2p n` (or r/w/a/p)"),
    "nvidia-smi-nvlink": (nvidia.parse_nvlink, "`nvidia-smi nvlink -s` / `--status`"),
    "nvidia-smi-nvlink-caps": (nvidia.parse_nvlink_caps, "`nvidia-smi nvlink -c`"),
    "nvidia-proc-version": (nvidia.parse_proc_version, "`cat /proc/driver/nvidia/version`"),
    "npu-smi-info": (ascend.parse_npu_smi, "`npu-smi info`"),
    "npu-smi-topo": (ascend.parse_npu_topo, "`npu-smi info -t topo`"),
    "hccn-tool": (ascend.parse_hccn, "`hccn_tool -i N -link|-ip|-net_health|-lldp|-gateway|-netdetect|-route|-hw_stats -g`, `-ping -g address A`"),
    "ascend-version-info": (ascend.parse_version_info, "`cat /usr/local/Ascend/driver/version.info`"),
    "amd-smi": (amd.parse_amd_smi_table, "default `amd-smi` table"),
    "amd-smi-version": (amd.parse_amd_smi_version, "`amd-smi version`"),
    "amd-smi-partition": (amd.parse_amd_smi_partition, "`amd-smi partition`"),
    "amd-smi-static-json": (amd.parse_amd_smi_static_json, "`amd-smi static --json`"),
    "amd-smi-topology-json": (amd.parse_amd_smi_topology_json, "`amd-smi topology --json`"),
    "amd-smi-list-json": (amd.parse_amd_smi_list_json, "`amd-smi list --json`"),
    "amd-smi-list": (amd.parse_amd_smi_list_text, "`amd-smi list` / `amd-smi list -e` (text)"),
    "amd-smi-static": (amd.parse_amd_smi_static_text, "`amd-smi static` (text)"),
    "amd-smi-metric": (amd.parse_amd_smi_metric_text, "`amd-smi metric` (text)"),
    "rocm-smi-productname": (amd.parse_rocm_productname, "`rocm-smi --showproductname`"),
    "rocm-smi": (amd.parse_rocm_smi, "default `rocm-smi` table"),
    "rocm-smi-topo": (amd.parse_rocm_showtopo, "`rocm-smi --showtopo`"),
    "numactl": (host.parse_numactl, "`numactl -H`"),
    "lscpu": (host.parse_lscpu, "`lscpu`"),
    "lscpu-json": (host.parse_lscpu_json, "`lscpu -J`"),
    "numa-balancing": (host.parse_numa_balancing, "`cat /proc/sys/kernel/numa_balancing`"),
    "ibstat": (host.parse_ibstat, "`ibstat`"),
    "ibv-devinfo": (host.parse_ibv_devinfo, "`ibv_devinfo`"),
    "pci-devices": (host.parse_pci_devices, "sysfs PCI listing (class, numa_node, local_cpulist)"),
    "os-release": (host.parse_os_release, "`cat /etc/os-release`"),
    "systemctl-is-active": (host.parse_systemctl_is_active, "`systemctl is-active UNIT`"),
    "process-list": (host.parse_process_list, "`pgrep -a NAME`"),
    "cuda-probe": (host.parse_cuda_probe, "CUDA-init probe JSON (cuInit + cuDeviceGetCount)"),
    "torch-info": (host.parse_torch_info, "torch version / CUDA / device count / name / capability line"),
    "torch-p2p": (host.parse_torch_p2p, "torch can_device_access_peer matrix"),
    "torch-bw": (host.parse_torch_bw, "copy / all-reduce bandwidth lines of the torch probe"),
    "nccl-tests": (host.parse_nccl_tests, "nccl-tests `all_reduce_perf` output"),
    "nccl-debug": (fabric.parse_nccl_debug, "ranks and transports of an nccl-tests run with NCCL_DEBUG=INFO"),
    "ib-write-bw": (fabric.parse_ib_write_bw, "perftest `ib_write_bw` (server or client side)"),
    "kernel-log": (health.parse_kernel_log, "`dmesg` / `journalctl -k`: NVIDIA Xid events"),
    "nvidia-smi-nvlink-errors": (health.parse_nvlink_errors, "`nvidia-smi nvlink -e` error counters"),
    "nvidia-params": (health.parse_nvidia_params, "`cat /proc/driver/nvidia/params`"),
    "proc-modules": (health.parse_proc_modules, "`cat /proc/modules` / `lsmod`"),
    "pci-acs": (health.parse_pci_acs, "PCIe ACS control of every PCI function (sysfs config space)"),
}

# Detection from the command line of a capture header (first match wins; order matters).
_BY_COMMAND = [
    (r"nvidia-smi\s+topo\s+(-m|--matrix)", "nvidia-smi-topo"),
    (r"nvidia-smi\s+topo\s+-p2p", "nvidia-smi-topo-p2p"),
    (r"nvidia-smi\s+nvlink\s+(-s|--status)", "nvidia-smi-nvlink"),
    (r"nvidia-smi\s+nvlink\s+(-c|--capabilities)", "nvidia-smi-nvlink-caps"),
    (r"nvidia-smi\s+nvlink\s+(-e|--errorcounters)", "nvidia-smi-nvlink-errors"),
    (r"/proc/driver/nvidia/params", "nvidia-params"),
    (r"/proc/modules|^lsmod", "proc-modules"),
    (r"^(dmesg|journalctl\s.*-k)|kernel log", "kernel-log"),
    (r"^ib_write_bw", "ib-write-bw"),
    (r"^pci-acs|ACS control", "pci-acs"),
    (r"nvidia-smi\s+--query-gpu", "nvidia-smi-query"),
    (r"nvidia-smi\s+-q\s+-x|nvidia-smi\s+-x\s+-q", "nvidia-smi-q-xml"),
    (r"nvidia-smi\s+-q", "nvidia-smi-q"),
    (r"/proc/driver/nvidia/version", "nvidia-proc-version"),
    (r"npu-smi\s+info\s+-t\s+topo", "npu-smi-topo"),
    (r"npu-smi\s+info\s*$", "npu-smi-info"),
    (r"hccn_tool", "hccn-tool"),
    (r"Ascend/driver/version\.info", "ascend-version-info"),
    (r"amd-smi\s+static.*--json", "amd-smi-static-json"),
    (r"amd-smi\s+topology.*--json", "amd-smi-topology-json"),
    (r"amd-smi\s+list.*--json", "amd-smi-list-json"),
    (r"amd-smi\s+list", "amd-smi-list"),
    (r"amd-smi\s+static", "amd-smi-static"),
    (r"amd-smi\s+metric", "amd-smi-metric"),
    (r"amd-smi\s+version", "amd-smi-version"),
    (r"amd-smi\s+partition", "amd-smi-partition"),
    (r"amd-smi\s*$", "amd-smi"),
    (r"rocm-smi\s+--showtopo", "rocm-smi-topo"),
    (r"rocm-smi\s+(.*\s)?--showproductname", "rocm-smi-productname"),
    (r"rocm-smi\s*$", "rocm-smi"),
    (r"numactl\s+(-H|--hardware)", "numactl"),
    (r"lscpu\s+(-J|--json)", "lscpu-json"),
    (r"^lscpu", "lscpu"),
    (r"numa_balancing", "numa-balancing"),
    (r"^ibstat", "ibstat"),
    (r"^ibv_devinfo", "ibv-devinfo"),
    (r"/sys/bus/pci/devices", "pci-devices"),
    (r"os-release", "os-release"),
    (r"systemctl\s+is-active", "systemctl-is-active"),
    (r"can_device_access_peer", "torch-p2p"),
    (r"torch\.__version__", "torch-info"),
    (r"all_reduce_perf", "nccl-tests"),
    (r"cuda-init probe", "cuda-probe"),
    (r"^scan /proc for", "process-list"),
    (r"^pgrep", "process-list"),
    (r"nvidia-smi\s*$", "nvidia-smi"),
]


def _detect_json(body: str) -> str | None:
    import json

    try:
        data = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, dict) and "lscpu" in data:
        return "lscpu-json"
    if isinstance(data, dict) and "present" in data and "library" in data:
        return "cuda-probe"
    items = data.get("gpu_data", data.get("gpus")) if isinstance(data, dict) else data
    if isinstance(data, dict) and "gpu" in data:
        items = [data]
    if isinstance(items, list) and items and isinstance(items[0], dict) and "gpu" in items[0]:
        g = items[0]
        if "links" in g or "link_type" in g:
            return "amd-smi-topology-json"
        if "asic" in g or "vram" in g or "driver" in g:
            return "amd-smi-static-json"
        return "amd-smi-list-json"
    return None


def _detect_content(body: str) -> str | None:
    text = strip_ansi(body)
    s = text.strip()
    if not s:
        return None
    first = s.splitlines()[0].strip()
    if s[0] in "[{":
        kind = _detect_json(s)
        if kind:
            return kind
        if s.startswith("[[") and ("None" in s or "True" in s or "False" in s):
            return "torch-p2p"
    if "<nvidia_smi_log" in s:
        return "nvidia-smi-q-xml"
    if "NVSMI LOG" in s:
        return "nvidia-smi-q"
    if "NVIDIA-SMI" in s and "Driver Version" in s:
        return "nvidia-smi"
    if re.search(r"^NVRM version:", s, re.M):
        return "nvidia-proc-version"
    if re.match(r"^(index|name|uuid|pci\.bus_id|driver_version|memory\.\w+)(\s*\[.*?\])?(,\s*[a-z_.]+(\s*\[.*?\])?)+$",
                first):
        return "nvidia-smi-query"
    if re.search(r"^GPU \d+: .*\(UUID:", s, re.M):
        if re.search(r"^\s*Link \d+: .*Errors?\s*:", s, re.M):
            return "nvidia-smi-nvlink-errors"
        if re.search(r"Link \d+, .*supported", s):
            return "nvidia-smi-nvlink-caps"
        return "nvidia-smi-nvlink"
    if re.search(r"npu-smi\s+\S+\s+Version:", s):
        return "npu-smi-info"
    if re.match(r"^(NPU\d+|Phy-ID\d+)\s", first) or (re.search(r"\bPhy-ID\d+\b", first)) or (
        re.match(r"^NPU\d+(\s+NPU\d+)*(\s+CPU Affinity)?$", first)
    ):
        return "npu-smi-topo"
    if re.search(r"^\s*GPU\d+(\s+GPU\d+)*", first) and re.search(r"\bOK\b", s) and "Status Ok" in s:
        return "nvidia-smi-topo-p2p"
    if re.search(r"^\s*GPU0\b", first) and ("CPU Affinity" in first or re.search(r"\b(NV\d+|SYS|PIX|PXB|PHB|NODE)\b", s)):
        return "nvidia-smi-topo"
    if "ROCm System Management Interface" in s:
        if "between two GPUs" in s:
            return "rocm-smi-topo"
        return "rocm-smi-productname" if re.search(r"^GPU\[\d+\]\s*:\s*Card [Ss]eries", s, re.M) else "rocm-smi"
    if re.match(r"^GPU:\s*\d+$", first):
        if re.search(r"^\s+(ASIC|VRAM|DRIVER|BUS):\s*$", s, re.M):
            return "amd-smi-static"
        if re.search(r"^\s+(MEM_USAGE|TEMPERATURE|POWER|USAGE):", s, re.M):
            return "amd-smi-metric"
        if re.search(r"^\s+(BDF|UUID|KFD_ID):", s, re.M):
            return "amd-smi-list"
    if "AMDSMI Tool:" in s:
        return "amd-smi-version"
    if "AMD-SMI" in s and "GPU-Name" in s:
        return "amd-smi"
    if "CURRENT_PARTITION:" in s:
        return "amd-smi-partition"
    if re.match(r"^available:\s+\d+ nodes?", first) or "No NUMA available" in first:
        return "numactl"
    if re.search(r"^Architecture:", s, re.M) and re.search(r"^CPU\(s\):", s, re.M):
        return "lscpu"
    if re.match(r"^CA '", first):
        return "ibstat"
    if re.match(r"^hca_id:", first):
        return "ibv-devinfo"
    if re.search(r"^(link status|net health status|ipaddr|netmask|default gateway|netdetect address|route table):", s,
                 re.M | re.I) or re.match(r"^(device \d+ PING6? |\[devid \d+\] \w+: \d+$|recv (seq|time out))", first) or re.search(
        r"^Chassis ID TLV$", s, re.M
    ) or "hccn_tool" in first:
        return "hccn-tool"
    if re.search(r"^Version=", s, re.M) and re.search(r"^(package_version|Innerversion|ascendhal_version)=", s, re.M):
        return "ascend-version-info"
    if "/sys/bus/pci/devices/" in s:
        return "pci-devices"
    if re.search(r"^gpu\d+->gpu\d+ GB/s", s, re.M) or re.search(r"^allreduce busbw GB/s", s, re.M):
        return "torch-bw"
    if re.search(r"RDMA_Write .*BW Test", s):
        return "ib-write-bw"
    if re.search(r"^(ResmanDebugLevel|EnableStreamMemOPs|RegistryDwords):", s, re.M):
        return "nvidia-params"
    if re.search(r"NVRM: (Xid|GPU at|loading NVIDIA)", s) or re.match(r"^\[\s*\d+\.\d+\] ", first):
        return "kernel-log"
    if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d class=0x[0-9a-f]+ acs=", first):
        return "pci-acs"
    if re.search(r"#\s*Avg bus bandwidth", s):
        return "nccl-tests"
    if re.match(r"^\S+\s+\S+\s+\d+\s+.+\(\d+,\s*\d+\)$", first) and len(s.splitlines()) == 1:
        return "torch-info"
    if re.search(r"^ID=", s, re.M) and re.search(r"^NAME=", s, re.M):
        return "os-release"
    if first in host.SYSTEMD_STATES and len(s.splitlines()) == 1:
        return "systemctl-is-active"
    return None


def detect_content(body: str) -> str | None:
    """Kind of a tool output judged from the output alone (None: no opinion)."""
    return _detect_content(body)


def detect_kind(text: str) -> str:
    """Kind of a capture: from its `# command:` header line when present, else from the content."""
    meta, body = split_capture(text)
    cmd = meta.get("command", "")
    cmd = re.sub(r"\s*\[fidelity:.*$", "", cmd)
    cmd = re.sub(r"\s*\(.*$", "", cmd).strip()
    for part in [cmd] + [p.strip() for p in re.split(r";|&&|\|\|", cmd)]:
        for pattern, kind in _BY_COMMAND:
            if part and re.search(pattern, part):
                return kind
    kind = _detect_content(body)
    if kind is None:
        first = next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
        raise ParseError("detect", f"cannot tell which tool printed this (first line {first[:60]!r}); "
                         f"pass a kind, one of: {', '.join(sorted(KINDS))}")
    return kind


def parse(text: str, kind: str | None = None, **kwargs) -> dict:
    """Parse one tool output (a capture header, if any, is stripped first)."""
    if kind is None:
        kind = detect_kind(text)
    if kind not in KINDS:
        raise ParseError(kind, f"unknown kind; known kinds: {', '.join(sorted(KINDS))}")
    body = strip_capture_header(text)
    return KINDS[kind][0](body, **kwargs)


def parse_capture(text: str, kind: str | None = None) -> tuple[dict, dict]:
    """(header, parsed) for a capture file."""
    meta, _ = split_capture(text)
    return meta, parse(text, kind)
