"""The probe commands a node runs, and the runner (stdlib only, Python 3.11; runs ON the node).

`run_probes()` detects the vendor by which tools exist, runs every probe for it plus the host
probes (in parallel threads, each with a timeout) and returns the raw outputs and exit status.
It never changes anything on the node. The controller parses the outputs (llmbctl.hw.facts), so the
same parsers serve the playbook, scripts/hwfacts and a collected bundle.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

EXTRA_PATH = (
    "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
    "/usr/local/nvidia/bin", "/opt/rocm/bin", "/usr/local/Ascend/driver/tools",
)

VENDOR_TOOLS = {"nvidia": ("nvidia-smi",), "ascend": ("npu-smi",), "amd": ("amd-smi", "rocm-smi")}

QUERY_FIELDS = ("index,name,uuid,pci.bus_id,driver_version,memory.total,compute_cap,persistence_mode,"
                "ecc.mode.current")

# The CUDA-init probe: cuInit + cuDeviceGetCount through the driver library. nvidia-smi can look
# healthy on an NVSwitch system whose Fabric Manager is down; CUDA then fails with error 802.
CUDA_PROBE = r"""
import ctypes, json
out = {"library": "libcuda.so.1", "present": False}
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    out["error"] = str(exc)
else:
    out["present"] = True
    rc = lib.cuInit(0)
    out["init_rc"] = rc
    if rc != 0:
        name = ctypes.c_char_p()
        if lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
            out["error_name"] = name.value.decode()
    else:
        n = ctypes.c_int(0)
        out["count_rc"] = lib.cuDeviceGetCount(ctypes.byref(n))
        out["count"] = n.value
    v = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
        out["driver_api"] = v.value
print(json.dumps(out))
"""


def _p(name, kind, argv=None, file=None, internal=None, optional=False, ok_rcs=(0,), vendor=None):
    return {"name": name, "kind": kind, "argv": argv, "file": file, "internal": internal,
            "optional": optional, "ok_rcs": tuple(ok_rcs), "vendor": vendor}


# optional: skipped without a record when its tool is absent (ibstat on a node without RDMA).
HOST_PROBES = [
    _p("numactl", "numactl", ["numactl", "-H"]),
    _p("lscpu-json", "lscpu-json", ["lscpu", "-J"]),
    _p("numa-balancing", "numa-balancing", file="/proc/sys/kernel/numa_balancing"),
    _p("ibstat", "ibstat", ["ibstat"], optional=True),
    _p("pci", "pci-devices", internal="pci"),
    # Device health (docs/verify.md, "Device health"): loaded modules (nvidia_peermem), the PCIe ACS
    # control of every bridge (GPUDirect RDMA traffic must not be redirected to the root complex).
    _p("modules", "proc-modules", file="/proc/modules"),
    _p("pci-acs", "pci-acs", internal="acs"),
]
VENDOR_PROBES = {
    "nvidia": [
        _p("smi-qx", "nvidia-smi-q-xml", ["nvidia-smi", "-q", "-x"]),
        _p("query", "nvidia-smi-query", ["nvidia-smi", f"--query-gpu={QUERY_FIELDS}", "--format=csv"]),
        _p("topo", "nvidia-smi-topo", ["nvidia-smi", "topo", "-m"]),
        _p("nvlink-s", "nvidia-smi-nvlink", ["nvidia-smi", "nvlink", "-s"]),
        _p("procdrv", "nvidia-proc-version", file="/proc/driver/nvidia/version"),
        # is-active exits 3 for inactive, 4 for an unknown unit: both are answers, not failures.
        _p("fabricmanager", "systemctl-is-active", ["systemctl", "is-active", "nvidia-fabricmanager"],
           ok_rcs=(0, 3, 4)),
        _p("fabricmanager-proc", "process-list", internal="fm-proc"),
        _p("cuda-init", "cuda-probe", internal="cuda"),
        _p("nvlink-e", "nvidia-smi-nvlink-errors", ["nvidia-smi", "nvlink", "-e"]),
        _p("nvidia-params", "nvidia-params", file="/proc/driver/nvidia/params"),
        _p("kernel-log", "kernel-log", internal="kmsg"),
    ],
    "amd": [
        _p("amd-smi-static", "amd-smi-static-json", ["amd-smi", "static", "--json"]),
        _p("amd-smi-topology", "amd-smi-topology-json", ["amd-smi", "topology", "--json"]),
        _p("amd-smi-list", "amd-smi-list-json", ["amd-smi", "list", "--json"]),
        _p("rocm-showtopo", "rocm-smi-topo", ["rocm-smi", "--showtopo"], optional=True),
    ],
    "ascend": [
        _p("npu-smi", "npu-smi-info", ["npu-smi", "info"]),
        _p("npu-topo", "npu-smi-topo", ["npu-smi", "info", "-t", "topo"]),
        _p("version-info", "ascend-version-info", file="/usr/local/Ascend/driver/version.info"),
    ],
}
HCCN_QUERIES = (("link", "-link"), ("ip", "-ip"), ("net_health", "-net_health"))


def search_path() -> str:
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts + [p for p in EXTRA_PATH if p not in parts])


def which(tool: str) -> str | None:
    return shutil.which(tool, path=search_path())


def detect_vendor() -> str:
    for vendor, tools in VENDOR_TOOLS.items():
        if any(which(t) for t in tools):
            return vendor
    return "none"


def _cmd_text(argv) -> str:
    return " ".join(a if re.fullmatch(r"[\w@%+=:,./-]+", a) else "'" + a.replace("'", "'\"'\"'") + "'" for a in argv)


def _run(argv, timeout: float) -> tuple[int, str, str]:
    exe = which(argv[0]) if not os.path.isabs(argv[0]) else argv[0]
    if not exe:
        return 127, "", f"{argv[0]}: command not found"
    env = dict(os.environ, LC_ALL="C", LANG="C", PATH=search_path())
    try:
        cp = subprocess.run([exe] + list(argv[1:]), capture_output=True, timeout=timeout, env=env,
                            stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after {timeout:g} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc}"
    return cp.returncode, cp.stdout.decode("utf-8", "replace"), cp.stderr.decode("utf-8", "replace")


def _read(path: str) -> tuple[int, str, str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return 0, fh.read(), ""
    except OSError as exc:
        return 1, "", f"cat: {path}: {exc.strerror}"


def _read1(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def pci_listing(root: str = "/sys/bus/pci/devices") -> str:
    """Accelerators and network controllers with their NUMA node and local CPUs, one per line."""
    lines = []
    for d in sorted(glob.glob(os.path.join(root, "*"))):
        cls = _read1(os.path.join(d, "class"))
        # 0x0300/0x0302 display (GPUs), 0x1200 processing accelerators (MI300, Ascend), 0x0207 InfiniBand,
        # 0x0200 Ethernet of RDMA vendors (Mellanox 0x15b3, Broadcom 0x14e4).
        vendor = _read1(os.path.join(d, "vendor"))
        if not (cls.startswith(("0x0300", "0x0302", "0x1200", "0x0207", "0x0380"))
                or (cls.startswith("0x0200") and vendor in ("0x15b3", "0x14e4"))):
            continue
        lines.append(
            f"{d} class={cls} numa={_read1(os.path.join(d, 'numa_node'))} vendor={vendor}"
            f" device={_read1(os.path.join(d, 'device'))} cpus={_read1(os.path.join(d, 'local_cpulist'))}"
        )
    return "\n".join(lines) + ("\n" if lines else "")


def fm_processes(proc: str = "/proc") -> str:
    """'<pid> <cmdline>' for running nv-fabricmanager processes (systemd may be absent)."""
    out = []
    for d in glob.glob(os.path.join(proc, "[0-9]*")):
        comm = _read1(os.path.join(d, "comm"))
        if comm.startswith("nv-fabricmanage"):
            cmd = _read1(os.path.join(d, "cmdline")).replace("\x00", " ").strip()
            out.append(f"{os.path.basename(d)} {cmd or comm}")
    return "\n".join(sorted(out)) + ("\n" if out else "")


# The kernel log lines the health checks read (the whole log can be megabytes: filtered on the node).
KMSG_KEEP = re.compile(r"NVRM|Xid|fallen off the bus|amdgpu.*(error|fault|RAS)|\bnpu\b|davinci", re.I)


def kernel_log(timeout: float) -> tuple[str, int, str, str]:
    """NVRM / Xid lines since boot: `dmesg`, else `journalctl -k -b` (dmesg_restrict, no root)."""
    rc, out, err = _run(["dmesg"], timeout)
    cmd = "dmesg (kernel log lines with NVRM / Xid only)"
    if rc != 0 or not out.strip():
        rc2, out2, err2 = _run(["journalctl", "-k", "-b", "--no-pager", "-q"], timeout)
        if rc2 == 0 and out2.strip():
            rc, out, err = rc2, out2, err2
            cmd = "journalctl -k -b (kernel log lines with NVRM / Xid only)"
    kept = [ln for ln in out.splitlines() if KMSG_KEEP.search(ln)]
    return cmd, rc, "\n".join(kept[-2000:]) + ("\n" if kept else ""), err


ACS_CAP_ID = 0x000D  # PCIe extended capability: Access Control Services


def acs_from_config(config: bytes) -> tuple[int, int] | None:
    """(ACS capability, ACS control) from a PCI function's config space, None without the capability.

    Extended capabilities start at 0x100: a 32-bit header (ID bits 0-15, version 16-19, next offset
    20-31); ACS has its capability register at +4 and its control register at +6 (16 bits each).
    """
    if len(config) < 0x104:
        return None
    off, seen = 0x100, set()
    while off and off + 8 <= len(config) and off not in seen:
        seen.add(off)
        head = int.from_bytes(config[off:off + 4], "little")
        if head in (0, 0xFFFFFFFF):
            return None
        if head & 0xFFFF == ACS_CAP_ID:
            return int.from_bytes(config[off + 4:off + 6], "little"), int.from_bytes(config[off + 6:off + 8], "little")
        off = (head >> 20) & 0xFFC
    return None


def acs_listing(root: str = "/sys/bus/pci/devices") -> str:
    """'<bdf> class=0x... acs=none|unreadable|cap=0x....,ctrl=0x....' for the GPUs and RDMA NICs and the
    PCIe bridges above them (the path GPUDirect traffic takes); other bridges do not matter here."""
    ends, bridges = [], set()
    for d in sorted(glob.glob(os.path.join(root, "*"))):
        cls = _read1(os.path.join(d, "class"))
        vendor = _read1(os.path.join(d, "vendor"))
        if cls.startswith(("0x0300", "0x0302", "0x1200", "0x0207")) or (
                cls.startswith("0x0200") and vendor in ("0x15b3", "0x14e4")):
            ends.append(d)
            # /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...: every PCI function on the way up
            for part in os.path.realpath(d).split(os.sep)[:-1]:
                if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", part):
                    bridges.add(os.path.join(root, part))
    lines = []
    for d in sorted(set(ends) | {b for b in bridges if os.path.isdir(b)}):
        cls = _read1(os.path.join(d, "class"))
        try:
            with open(os.path.join(d, "config"), "rb") as fh:
                config = fh.read(4096)
        except OSError:
            config = b""
        if len(config) <= 0x40:
            acs = "unreadable"  # beyond the first 64 bytes, config space is readable by root only
        elif len(config) <= 0x100:
            acs = "none"  # no PCIe extended configuration space (a conventional PCI / virtio function)
        else:
            got = acs_from_config(config)
            acs = "none" if got is None else f"cap=0x{got[0]:04x},ctrl=0x{got[1]:04x}"
        lines.append(f"{os.path.basename(d)} class={cls} acs={acs}")
    return "\n".join(lines) + ("\n" if lines else "")


def _internal(which_one: str, timeout: float) -> tuple[str, int, str, str]:
    if which_one == "pci":
        return "sysfs-pci-scan /sys/bus/pci/devices", 0, pci_listing(), ""
    if which_one == "fm-proc":
        return "scan /proc for nv-fabricmanager", 0, fm_processes(), ""
    if which_one == "acs":
        return "pci-acs: ACS control of PCI bridges, GPUs and NICs from /sys/bus/pci/devices/*/config", 0, acs_listing(), ""
    if which_one == "kmsg":
        return kernel_log(timeout)
    if which_one == "cuda":
        rc, out, err = _run([sys.executable or "python3", "-c", CUDA_PROBE], timeout)
        return "python3 -c <cuda-init probe: cuInit + cuDeviceGetCount via libcuda.so.1>", rc, out, err
    raise ValueError(which_one)


def run_one(probe: dict, timeout: float) -> dict | None:
    started = time.monotonic()
    if probe["internal"]:
        cmd, rc, out, err = _internal(probe["internal"], timeout)
    elif probe["file"]:
        cmd = f"cat {probe['file']}"
        rc, out, err = _read(probe["file"])
    else:
        if probe["optional"] and not which(probe["argv"][0]):
            return None
        cmd = _cmd_text(probe["argv"])
        rc, out, err = _run(probe["argv"], timeout)
    return {"name": probe["name"], "kind": probe["kind"], "cmd": cmd, "rc": rc, "stdout": out,
            "stderr": err[-4000:], "ok_rcs": list(probe["ok_rcs"]),
            "duration_s": round(time.monotonic() - started, 3)}


def hccn_devices(npu_smi_stdout: str) -> list[int]:
    """Device ids for hccn_tool -i: /dev/davinciN when present, else the chips `npu-smi info` lists.

    Reads only the device rows (Phy-ID on A3, the NPU id on A2); the full parser stays on the
    controller (this runs on the node, where only this file ships with accel_probe).
    """
    ids = sorted(int(m.group(1)) for p in glob.glob("/dev/davinci*") if (m := re.fullmatch(r".*/davinci(\d+)", p)))
    if ids:
        return ids
    bus = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
    npu = None
    for line in npu_smi_stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3:
            continue  # banners, separators, the process table
        toks = cells[0].split()
        if toks and toks[0].isdigit() and bus.match(cells[1]):
            dev = int(toks[1]) if len(toks) > 1 and toks[1].isdigit() else npu
            if dev is not None:
                ids.append(dev)
        elif len(toks) >= 2 and toks[0].isdigit():
            npu = int(toks[0])
    return ids


def hccn_probes(devices: list[int], queries=None) -> list[dict]:
    wanted = [q for q in HCCN_QUERIES if queries is None or q[0] in queries]
    return [
        _p(f"hccn-{dev}-{name}", "hccn-tool", ["hccn_tool", "-i", str(dev), flag, "-g"]) for dev in devices
        for name, flag in wanted
    ]


def run_probes(vendor: str = "auto", timeout: float = 60, only: list[str] | None = None,
               devices: list[int] | None = None, workers: int = 8, hccn_queries=None) -> dict:
    """Run every probe for the vendor and the host; return {'vendor', 'host', 'tools', 'probes': [...]}."""
    if vendor == "auto":
        vendor = detect_vendor()
    plan = list(HOST_PROBES) + list(VENDOR_PROBES.get(vendor, []))
    if only:
        plan = [p for p in plan if p["name"] in only]
    results: list[dict] = []
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for res in pool.map(lambda p: run_one(p, timeout), plan):
            if res is not None:
                results.append(res)
        if vendor == "ascend" and (not only or any(n.startswith("hccn") for n in only)):
            npu = next((r for r in results if r["name"] == "npu-smi"), None)
            ids = devices if devices is not None else hccn_devices(npu["stdout"] if npu else "")
            for res in pool.map(lambda p: run_one(p, timeout), hccn_probes(ids, hccn_queries)):
                if res is not None:
                    results.append(res)
    tools = {}
    for t in ("nvidia-smi", "npu-smi", "hccn_tool", "amd-smi", "rocm-smi", "numactl", "lscpu", "ibstat", "systemctl"):
        tools[t] = which(t)
    return {"vendor": vendor, "host": socket.gethostname(), "tools": tools, "probes": results,
            "duration_s": round(time.monotonic() - started, 3)}


# --------------------------------------------------------------------------- bundles on disk


def bundle_text(res: dict) -> str:
    """One probe as a capture file: '# command:' / '# exit status:' header, a blank line, the output."""
    head = [f"# command: {res['cmd']}", f"# exit status: {res['rc']}"]
    err = (res.get("stderr") or "").strip()
    if err:
        head.append("# stderr: " + err.replace("\n", " | ")[:500])
    return "\n".join(head) + "\n\n" + res.get("stdout", "")


def write_bundle(result: dict, directory: str) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    written = []
    for res in result["probes"]:
        path = os.path.join(directory, res["name"] + ".txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(bundle_text(res))
        written.append(path)
    return written
