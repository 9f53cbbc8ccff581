#!/usr/bin/env python3
"""The verify stage on N simulated nodes (default 16) against a plain parallel SSH loop running the
same probe commands.

Brings up a simulated cluster (scripts/sim-cluster, profile h800-hgx8 by default), then in one run
measures, after a warm-up that opens the SSH control connections on both sides:
  1. plain parallel SSH loop: every host in parallel, one multiplexed `ssh` per probe command
     (the same commands accel_probe runs: nvidia-smi -q -x / --query-gpu / topo -m / nvlink -s,
     /proc/driver/nvidia/version, systemctl is-active nvidia-fabricmanager, the CUDA-init probe,
     numactl -H, lscpu -J, numa_balancing, the sysfs PCI scan), outputs kept, nothing parsed;
  2. the same commands as one shell script per host (one ssh each), for reference;
  3. ansible-playbook playbooks/verify.yml -e verify_fabric=never (stock linear strategy, pipelining,
     ControlPersist), which also parses, compares with the profile and writes every result file (the
     cross-node fabric tests, which have no counterpart in the loop, left out: they run by themselves
     once the SSH mesh exists);
  4. the same with Mitogen's strategy (opt-in; --no-mitogen to skip).
Prints the seconds of each and the ratio to the SSH loop. No absolute time is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from llmb.hw.probes import CUDA_PROBE, HOST_PROBES, VENDOR_PROBES  # noqa: E402
from perf_common import ansible_env, cluster, inventory_hosts  # noqa: E402

PCI_SCAN = ("for d in /sys/bus/pci/devices/*; do c=$(cat $d/class); case $c in 0x0300*|0x0302*|0x1200*|0x0207*) "
            "echo \"$d class=$c numa=$(cat $d/numa_node) vendor=$(cat $d/vendor) device=$(cat $d/device) "
            "cpus=$(cat $d/local_cpulist)\";; esac; done")
# What the simulator does not model (see molecule/verify/molecule.yml), so that the run passes.
OVERRIDES = {"settings": {"numa_balancing": None},
             "rdma": {"nics": 4, "rail_per_device": False}}
# The probes and their judgement only: the cross-node fabric tests (which run by themselves once the SSH
# mesh exists) have no counterpart in the loop.
NO_FABRIC = ("-e", "verify_fabric=never")


def probe_commands(vendor: str = "nvidia") -> list[str]:
    """Shell command lines equivalent to accel_probe's probes for the vendor."""
    cmds = []
    for p in HOST_PROBES + VENDOR_PROBES[vendor]:
        if p["file"]:
            cmds.append(f"cat {p['file']}")
        elif p["internal"] == "pci":
            cmds.append(PCI_SCAN)
        elif p["internal"] == "fm-proc":
            cmds.append("pgrep -a nv-fabricmanage || true")
        elif p["internal"] == "cuda":
            cmds.append("python3 -c " + shlex.quote(CUDA_PROBE))
        elif p["internal"] == "acs":  # the config space of every PCI function (the probe parses ACS from it)
            cmds.append("cat /sys/bus/pci/devices/*/config >/dev/null 2>&1 || true")
        elif p["internal"] == "kmsg":  # the kernel log, NVRM / Xid lines kept
            cmds.append("(dmesg || journalctl -k -b --no-pager -q) 2>/dev/null | grep -E 'NVRM|Xid' || true")
        elif p["internal"]:
            raise SystemExit(f"bench_verify: accel_probe's internal probe {p['internal']!r} has no shell "
                             "equivalent here: add one to probe_commands")
        elif p["optional"]:
            cmds.append(f"command -v {p['argv'][0]} >/dev/null && {shlex.join(p['argv'])} || true")
        else:
            cmds.append(shlex.join(p["argv"]) + " || true")
    return cmds


def ssh_args(h: dict, cp: Path) -> list[str]:
    return ["ssh", "-i", h["key"], "-o", f"UserKnownHostsFile={h['known_hosts']}", "-o", "BatchMode=yes",
            "-o", "ControlMaster=auto", "-o", f"ControlPath={cp}/%C", "-o", "ControlPersist=120", f"root@{h['ip']}"]


def timed_on_every_host(hosts: list[dict], cp: Path, one: Callable[[dict], Any]) -> tuple[list, float]:
    """``one`` on every host at once over warm SSH control masters (under ``cp``): its answers, the seconds
    taken (the warm-up and the masters' exit not counted)."""
    with ThreadPoolExecutor(len(hosts)) as ex:  # warm-up: control masters up
        list(ex.map(lambda h: subprocess.run([*ssh_args(h, cp), "true"], check=True), hosts))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(hosts)) as ex:
        answers = list(ex.map(one, hosts))
    dt = time.perf_counter() - t0
    for h in hosts:
        subprocess.run([*ssh_args(h, cp)[:-1], "-O", "exit", f"root@{h['ip']}"], capture_output=True, check=False)
    return answers, dt


def run_ssh(hosts: list[dict], cmds: list[str], one_script: bool) -> float:
    cp = Path(tempfile.mkdtemp(prefix="llmb-vcp-"))

    def one_host(h: dict) -> int:
        out = 0
        batches = ["\n".join(cmds)] if one_script else cmds
        for c in batches:
            r = subprocess.run([*ssh_args(h, cp), c], capture_output=True, check=False)
            out += len(r.stdout)
        return out

    sizes, dt = timed_on_every_host(hosts, cp, one_host)
    if min(sizes) < 10000:
        raise SystemExit(f"the SSH loop got too little output ({min(sizes)} bytes from one host): probes failed?")
    return dt


def run_verify(inv: Path, platform: str, mitogen: bool, out: Path, *extra: str) -> float:
    """Seconds of verify.yml (after an untimed ping that opens the control connections); `extra`:
    more ansible-playbook arguments."""
    env = ansible_env(mitogen=mitogen)
    subprocess.run([str(ROOT / ".venv/bin/ansible"), "-i", str(inv), "accel_nodes", "-m", "ansible.builtin.ping"],
                   env=env, cwd=ROOT, capture_output=True, check=True)
    argv = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), "playbooks/verify.yml",
            "-e", f"llmb_platform={platform}", "-e", f"llmb_artifacts_dir={out}",
            "-e", json.dumps({"verify_profile_overrides": OVERRIDES}), *extra]
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"verify failed:\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
    summary = json.loads((out / "verify" / "summary.json").read_text())
    if not summary["ok"]:
        raise SystemExit(f"verify reported deviations: {summary['report'][:5]}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--profile", default="h800-hgx8")
    ap.add_argument("--no-mitogen", action="store_true")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    ap.add_argument("--inventory", type=Path, help="use this running cluster's inventory (sim-cluster inventory)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side, interleaved; the median is shown")
    a = ap.parse_args()
    cmds = probe_commands("nvidia")
    ctx = contextlib.nullcontext(a.inventory) if a.inventory else cluster("perf-verify", a.nodes, a.profile, keep=a.keep)
    runs: dict[str, list[float]] = {}
    with ctx as inv, tempfile.TemporaryDirectory() as tmp:
        hosts = inventory_hosts(inv)
        for i in range(a.repeat):
            for name, fn in (
                ("ssh loop (one ssh per command)", lambda: run_ssh(hosts, cmds, one_script=False)),
                ("ssh (one script per host)", lambda: run_ssh(hosts, cmds, one_script=True)),
                ("verify.yml (linear, pipelining)", lambda i=i: run_verify(inv, a.profile, False, Path(tmp) / f"l{i}", *NO_FABRIC)),
                ("verify.yml (mitogen_linear)", lambda i=i: run_verify(inv, a.profile, True, Path(tmp) / f"m{i}", *NO_FABRIC)),
            ):
                if a.no_mitogen and "mitogen" in name:
                    continue
                runs.setdefault(name, []).append(fn())
    res = {k: statistics.median(v) for k, v in runs.items()}
    base = res["ssh loop (one ssh per command)"]
    print(f"\nverify on {len(hosts)} simulated {a.profile} nodes; {len(cmds)} probe commands per node; "
          f"median of {a.repeat} interleaved runs (all runs in seconds in brackets)")
    print(f"{'runner':34} {'seconds':>8} {'x ssh loop':>11}")
    for k, v in res.items():
        print(f"{k:34} {v:8.2f} {v / base:11.2f}   [{', '.join(f'{x:.1f}' for x in runs[k])}]")
    print(f"ratio verify.yml / ssh loop: {res['verify.yml (linear, pipelining)'] / base:.2f} (target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
