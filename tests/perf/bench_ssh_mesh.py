#!/usr/bin/env python3
"""The SSH mesh's all-pairs check on a simulated cluster (default 16 nodes = 240 ordered pairs).

Brings up N nodes with scripts/sim-cluster, applies playbooks/ssh_mesh.yml once, then in one run
measures the check alone (`--tags ssh_mesh_check -e ssh_mesh_check_pairs=all`, every ordered pair;
the default checks only the pairs mpirun needs, tests/perf/bench_scale.py measures that one):
  1. pairs in parallel (each node opens ssh_mesh_check_parallel connections at once, the default),
  2. one pair at a time in the whole cluster (ssh_mesh_check_parallel=1, --forks 1), for the ratio,
  3. the check plus `mpirun -np N -H <all nodes> hostname` over the mesh.
Prints wall time of ansible-playbook, the slowest node's row, pairs ok, and the ratios. The issue's
target (under 30 s for 16 nodes in parallel) is printed next to the measure, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from perf_common import ansible_env, cluster, inventory_hosts  # noqa: E402

PLAYBOOK = ROOT / "playbooks" / "ssh_mesh.yml"


def playbook(inv: Path, key_dir: Path, *extra: str, json_out: bool = True) -> tuple[float, dict]:
    env = ansible_env()
    if json_out:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    argv = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), str(PLAYBOOK),
            "-e", f"ssh_mesh_key_dir={key_dir}", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"ansible-playbook {' '.join(extra)} failed (rc {p.returncode}):\n"
                         + (failed_msgs(p.stdout) if json_out else p.stdout[-3000:]) + f"\n{p.stderr[-2000:]}")
    return dt, (json.loads(p.stdout) if json_out else {})


def failed_msgs(stdout: str) -> str:
    try:
        report = json.loads(stdout)
    except ValueError:
        return stdout[-3000:]
    out = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, res in task["hosts"].items():
                for r in [res, *res.get("results", [])]:
                    if r.get("failed"):
                        out.append(f"{host}: {task['task']['name']}: {r.get('msg')}")
    return "\n".join(out)


def rows(report: dict) -> list[dict]:
    """The llmb_ssh_mesh_check results (one per node and port) from a json-callback report."""
    out = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            if "SSH from this node to " not in task["task"]["name"]:  # roles/ssh_mesh/tasks/check.yml
                continue
            for res in task["hosts"].values():
                out.extend(r for r in res.get("results", []) if "pairs" in r)
    return out


def summary(report: dict) -> tuple[int, int, float]:
    rs = rows(report)
    pairs = [p for r in rs for p in r["pairs"]]
    return len(pairs), sum(1 for p in pairs if p["ok"]), max((r["seconds"] for r in rs), default=0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--name", default="bench-sshmesh")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    ap.add_argument("--parallel-only", action="store_true",
                    help="only the parallel check (make perf-smoke: proves the bench runs, cheaply)")
    ap.add_argument("--inventory", type=Path, help="use this running cluster's inventory (sim-cluster inventory)")
    a = ap.parse_args()
    ctx = contextlib.nullcontext(a.inventory) if a.inventory else cluster(a.name, a.nodes, "h800-hgx8", keep=a.keep)
    with ctx as inv:
        a.nodes = len(inventory_hosts(inv))
        key_dir = inv.parent / "mesh-key"
        setup, _ = playbook(inv, key_dir, "-e", "ssh_mesh_check=false", json_out=False)
        res = {}
        for label, extra in (
            ("check, pairs in parallel", ["-e", "ssh_mesh_check_mpirun=false"]),
            ("check, one pair at a time", ["-e", "ssh_mesh_check_mpirun=false", "-e", "ssh_mesh_check_parallel=1",
                                           "--forks", "1"]),
            ("check + mpirun over all nodes", []),
        ):
            if a.parallel_only and label != "check, pairs in parallel":
                continue
            # every ordered pair (ssh_mesh_check_pairs=all; the default checks only mpirun's pairs)
            dt, report = playbook(inv, key_dir, "--tags", "ssh_mesh_check", "-e", "ssh_mesh_check_pairs=all", *extra)
            res[label] = (dt, *summary(report))
    expected = a.nodes * (a.nodes - 1)
    par = res["check, pairs in parallel"][0]
    print(f"\nSSH mesh on {a.nodes} simulated nodes ({expected} ordered pairs); first apply of the stage: {setup:.1f} s")
    print(f"{'variant':34} {'wall s':>7} {'pairs ok':>9} {'slowest row s':>14} {'x parallel':>11}")
    for k, (dt, n, ok, slow) in res.items():
        print(f"{k:34} {dt:7.1f} {f'{ok}/{n}':>9} {slow:14.2f} {dt / par:11.2f}")
    serial = res.get("check, one pair at a time")
    print(f"parallel speed-up: {f'{serial[0] / par:.1f}x' if serial else 'not measured (--parallel-only)'}; "
          f"target for {a.nodes} nodes: check under 30 s -> {par:.1f} s ({'met' if par < 30 else 'NOT met'})")
    bad = [k for k, v in res.items() if v[1] != expected or v[2] != expected]
    if bad:
        print(f"pairs missing or failed in: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
