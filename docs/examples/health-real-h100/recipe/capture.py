#!/usr/bin/env python3
"""Capture the health / fabric outputs on the lent H100 (engineer fabric, issue 18)."""
import os
import subprocess
import sys
import time

D = sys.argv[1]
os.makedirs(D, exist_ok=True)
ENV = dict(os.environ, LC_ALL="C", LANG="C", NCCL_NVLS_ENABLE="0")

def cap(name, argv, shell=False, timeout=120, env=None):
    t = time.monotonic()
    try:
        cp = subprocess.run(argv, shell=shell, capture_output=True, timeout=timeout, env=env or ENV)
        rc, out, err = cp.returncode, cp.stdout.decode("utf-8", "replace"), cp.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", "timed out"
    except OSError as exc:
        rc, out, err = 127, "", str(exc)
    cmd = argv if shell else " ".join(argv)
    head = [f"# source: captured on the lent nvidia-h100-x1 (Firecracker VM), {time.strftime('%Y-%m-%d', time.gmtime())}",
            "# machine: one NVIDIA H100 80GB HBM3 (SXM), Firecracker VM guest",
            "# command: " + cmd, f"# exit status: {rc}"]
    if err.strip():
        head.append("# stderr: " + err.strip().replace("\n", " | ")[:1500])
    with open(os.path.join(D, name + ".txt"), "w") as fh:
        fh.write("\n".join(head) + "\n\n" + out)
    print(name, rc, round(time.monotonic() - t, 2), flush=True)

Q = ("index,pci.bus_id,driver_version,vbios_version,inforom.img,clocks_event_reasons.active,"
     "clocks_throttle_reasons.active,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"
     "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max")
for n, a in [("smi-q-ecc", "-q -d ECC"), ("smi-q-performance", "-q -d PERFORMANCE"), ("smi-q-clock", "-q -d CLOCK"),
             ("smi-q-pcie", "-q -d PCIE"), ("smi-q-row-remapper", "-q -d ROW_REMAPPER"), ("smi-q", "-q"),
             ("smi-qx", "-q -x"), ("nvlink-e", "nvlink -e"), ("nvlink-s", "nvlink -s"), ("nvlink-c", "nvlink -c"),
             ("topo", "topo -m"), ("query-health", f"--query-gpu={Q} --format=csv")]:
    cap(n, ["nvidia-smi"] + a.split())
cap("dmesg", ["dmesg"])
cap("dmesg-xid", "dmesg | grep -i xid", shell=True)
cap("journal-k", ["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"])
cap("lsmod", ["lsmod"])
cap("proc-modules", ["cat", "/proc/modules"])
cap("nvidia-params", ["cat", "/proc/driver/nvidia/params"])
cap("procdrv", ["cat", "/proc/driver/nvidia/version"])
cap("modprobe-d", "grep -r . /etc/modprobe.d/ /run/modprobe.d/ /usr/lib/modprobe.d/ 2>/dev/null", shell=True)
cap("modinfo-peermem", ["modinfo", "nvidia_peermem"])
cap("sys-module-nvidia", "ls /sys/module | grep -i -e nvidia -e peermem -e ib_ ; ls /sys/module/nvidia/parameters 2>&1", shell=True)
cap("lspci-vvv", ["lspci", "-vvv"])
cap("lspci-tree", ["lspci", "-tv"])
cap("pci-config", "for d in /sys/bus/pci/devices/*; do echo \"$d class=$(cat $d/class) vendor=$(cat $d/vendor) device=$(cat $d/device)\"; od -An -tx1 -v $d/config; done", shell=True)
cap("ibstat", ["ibstat"])
cap("ibv-devinfo", ["ibv_devinfo", "-v"])
cap("sys-class-infiniband", "ls -l /sys/class/infiniband/ /sys/class/net/; cat /sys/class/net/*/mtu", shell=True)
cap("ib-write-bw", ["ib_write_bw", "--help"])
cap("uname", ["uname", "-a"])
