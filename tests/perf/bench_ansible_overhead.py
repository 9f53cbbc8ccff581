#!/usr/bin/env python3
"""Ansible's cost per task and host on a simulated cluster, against a plain parallel SSH loop.

Brings up N simulated nodes (default 16), then in one run measures:
  1. ansible-playbook with N trivial `command` tasks, stock linear strategy (SSH pipelining +
     ControlPersist from ansible.cfg),
  2. the same playbook with Mitogen's strategy (opt-in),
  3. a plain parallel SSH loop (one multiplexed connection per host) running the same commands.
Prints seconds per task-host for each and the ratios. No absolute time is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from perf_common import ansible_env, cluster, inventory_hosts  # noqa: E402

CMD = "python3 -c pass"


def playbook(tasks: int) -> str:
    body = "\n".join(
        f"    - name: trivial task {i}\n      ansible.builtin.command: {CMD}\n      changed_when: false"
        for i in range(tasks)
    )
    return f"- name: bench\n  hosts: accel_nodes\n  gather_facts: false\n  tasks:\n{body}\n"


def run_ansible(inv: Path, tasks: int, mitogen: bool) -> float:
    env = ansible_env(mitogen=mitogen)
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False, dir=ROOT / ".cache") as f:
        f.write(playbook(tasks))
    try:
        # warm-up: open the control connections, as a real run's first task does
        subprocess.run([str(ROOT / ".venv/bin/ansible"), "-i", str(inv), "accel_nodes", "-m", "ansible.builtin.ping"],
                       env=env, cwd=ROOT, capture_output=True, check=True)
        t0 = time.perf_counter()
        p = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), f.name],
                           env=env, cwd=ROOT, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"ansible-playbook failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        return dt
    finally:
        os.unlink(f.name)


def run_ssh_loop(hosts: list[dict], tasks: int) -> float:
    cp = Path(tempfile.mkdtemp(prefix="llmb-cp-"))

    def ssh_args(h: dict) -> list[str]:
        return ["ssh", "-i", h["key"], "-o", f"UserKnownHostsFile={h['known_hosts']}", "-o", "BatchMode=yes",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={cp}/%C", "-o", "ControlPersist=60",
                f"root@{h['ip']}"]

    def one_host(h: dict) -> None:
        for _ in range(tasks):
            subprocess.run([*ssh_args(h), CMD], check=True, capture_output=True)

    with ThreadPoolExecutor(len(hosts)) as ex:   # warm-up: masters up
        list(ex.map(lambda h: subprocess.run([*ssh_args(h), "true"], check=True), hosts))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(hosts)) as ex:
        list(ex.map(one_host, hosts))
    dt = time.perf_counter() - t0
    for h in hosts:
        subprocess.run([*ssh_args(h)[:-1], "-O", "exit", f"root@{h['ip']}"], capture_output=True)
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--no-mitogen", action="store_true")
    ap.add_argument("--inventory", type=Path, help="use this running cluster's inventory (sim-cluster inventory)")
    a = ap.parse_args()
    ctx = contextlib.nullcontext(a.inventory) if a.inventory else cluster("perf-ansible", a.nodes, "h800-hgx8")
    with ctx as inv:
        hosts = inventory_hosts(inv)
        th = a.tasks * len(hosts)
        res = {"ssh loop": run_ssh_loop(hosts, a.tasks), "ansible (linear, pipelining)": run_ansible(inv, a.tasks, False)}
        if not a.no_mitogen:
            res["ansible (mitogen_linear)"] = run_ansible(inv, a.tasks, True)
    base = res["ssh loop"]
    print(f"\n{a.tasks} trivial tasks x {len(hosts)} hosts = {th} task-hosts ({CMD!r} each)")
    print(f"{'runner':32} {'total s':>8} {'s/task-host':>12} {'x ssh loop':>11}")
    for k, v in res.items():
        print(f"{k:32} {v:8.2f} {v / th:12.4f} {v / base:11.1f}")
    if "ansible (mitogen_linear)" in res:
        print(f"mitogen speed-up over linear: {res['ansible (linear, pipelining)'] / res['ansible (mitogen_linear)']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
