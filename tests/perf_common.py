"""Helpers shared by the benchmarks under tests/perf/ and the end-to-end tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "scripts" / "sim-cluster"


class Run:
    """An ansible-playbook run: its exit status, its output (stdout then stderr), how long it took."""

    def __init__(self, proc: subprocess.CompletedProcess, seconds: float):
        self.rc = proc.returncode
        self.out = proc.stdout + proc.stderr
        self.seconds = seconds

    def recap(self) -> dict[str, dict[str, int]]:
        rows = {}
        for m in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", self.out, re.M):
            rows[m.group(1)] = {"ok": int(m.group(2)), "changed": int(m.group(3)),
                                "unreachable": int(m.group(4)), "failed": int(m.group(5))}
        return rows

    def changed_tasks(self) -> list[str]:
        tasks, cur = [], None
        for line in self.out.splitlines():
            if line.startswith("TASK ["):
                cur = line
            elif line.startswith("changed:") and cur:
                tasks.append(f"{cur} {line}")
        return tasks

    def tail(self, n: int = 6000) -> str:
        return self.out[-n:]


def run_playbook(inventory: Path, playbook: str, *args: str, run_id: str, log_dir: Path, log_name: str,
                 env: dict | None = None, timeout: int = 1500) -> Run:
    """ansible-playbook from the checkout with the tests' environment (LLMB_RUN_ID ``run_id``, no colour,
    ``env`` on top); its output is kept in ``log_dir``/<log_name>-<epoch seconds>.log."""
    e = ansible_env()
    e.update({"LLMB_RUN_ID": run_id, "ANSIBLE_NOCOLOR": "1"})
    e.update(env or {})
    t0 = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), playbook, *args],
                          cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)
    run = Run(proc, time.monotonic() - t0)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{log_name}-{int(time.time())}.log").write_text(run.out)
    return run


def ansible_env(mitogen: bool = False) -> dict[str, str]:
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8", ANSIBLE_FORCE_COLOR="0",
               PATH=f"{ROOT / '.venv/bin'}:{os.environ.get('PATH', '')}")
    env.pop("ANSIBLE_STRATEGY", None)
    if mitogen:
        out = subprocess.run([str(ROOT / "scripts/mitogen-env")], capture_output=True, text=True, check=True).stdout
        for part in out.replace("export ", "").split():
            k, v = part.split("=", 1)
            env[k] = v
    return env


def cluster_name(name: str) -> str:
    """The name of a cluster a benchmark brings up: LLMB_PERF_CLUSTER_PREFIX + name, so that runs on a
    shared machine (one prefix each) never take down each other's clusters."""
    return os.environ.get("LLMB_PERF_CLUSTER_PREFIX", "") + name


@contextlib.contextmanager
def cluster(name: str, nodes: int, profile: str, keep: bool = False, extra: list[str] | None = None) -> Iterator[Path]:
    """A simulated cluster for the duration of a with-block (named cluster_name(name)); yields its inventory path."""
    name = cluster_name(name)
    try:
        subprocess.run([str(SIM), "up", "--name", name, "--nodes", str(nodes), "--profile", profile, *(extra or [])],
                       check=True)
        yield Path(subprocess.run([str(SIM), "inventory", "--name", name], capture_output=True, text=True,
                                  check=True).stdout.strip())
    finally:
        if not keep:
            subprocess.run([str(SIM), "down", "--name", name], capture_output=True)


def inventory_hosts(inv: Path) -> list[dict]:
    """[{name, ip, node_ip, key, known_hosts}] from an inventory written by sim-cluster (ip: the address
    the controller reaches, node_ip: the cluster-network address the nodes reach each other at)."""
    data = json.loads("".join(line for line in inv.read_text().splitlines(keepends=True) if not line.startswith("#")))
    grp = data["all"]["children"]["accel_nodes"]
    key = grp["vars"]["ansible_ssh_private_key_file"]
    known = str(Path(key).parent / "known_hosts")
    return [{"name": n, "ip": hv["ansible_host"], "node_ip": hv.get("llmb_node_ip", hv["ansible_host"]), "key": key,
             "known_hosts": known} for n, hv in grp["hosts"].items()]
