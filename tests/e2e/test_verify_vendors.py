"""Issue #30 end to end: playbooks/verify.yml on simulated clusters of their own (scripts/sim-cluster;
no site.yml converge, so this file does not use the session cluster of conftest.py).

- A3, 2 nodes: node1's NPU3 gets no answer from its peer (accelsim fault hccn_ping_lost); the fabric
  play's NPU pings (hccn_tool -i N -ping -g address A, NPU i to NPU i of the other node) name the pair
  by host, NPU and address, and nothing else fails.
- NVIDIA (H800 HGX), 1 node: ibstat aborts at mlx5_2 with `ibpanic:` and exit 255 (accelsim fault
  ibstat_abort); verify fails on it instead of taking the devices printed before as the whole story.

Cluster names start with `verify-` (LLMB_E2E_VERIFY_PREFIX overrides) and are taken down at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from perf_common import SIM, ansible_env, cluster  # noqa: E402

PREFIX = os.environ.get("LLMB_E2E_VERIFY_PREFIX", "verify-")
# What the simulator does not model (molecule/verify/molecule.yml): numa_balancing comes from the
# container host's kernel; the simulated H800 has the public capture's 4 NICs.
OVERRIDES = {"a3-16npu": {"settings": {"numa_balancing": None}},
             "h800-hgx8": {"settings": {"numa_balancing": None}, "rdma": {"nics": 4, "rail_per_device": False}}}


def _fault(name: str, node: str, *fault: str) -> None:
    proc = subprocess.run([str(SIM), "fault", "--name", name, node, "add", *fault], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _verify(inv: Path, platform: str, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    argv = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inv), "playbooks/verify.yml",
            "-e", f"llmb_platform={platform}", "-e", f"llmb_artifacts_dir={out}",
            "-e", json.dumps({"verify_profile_overrides": OVERRIDES[platform]})]
    env = ansible_env()
    env["LLMB_RUN_ID"] = f"e2e-verify-{int(time.time() * 1000)}"
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    (out / "verify.log").write_text(proc.stdout + proc.stderr)
    summary_path = out / "verify" / "summary.json"
    assert summary_path.exists(), (proc.stdout + proc.stderr)[-4000:]
    return proc, json.loads(summary_path.read_text())


@contextlib.contextmanager
def _verified_with_fault(out: Path, tag: str, nodes: int, platform: str, *fault: str):
    """The verify stage on a fresh cluster (``nodes`` of ``platform``) with ``fault`` on node1, the cluster up
    while the block runs: (the run, its summary, the summary's report as text)."""
    name = f"{PREFIX}{tag}-{os.getpid()}"
    with cluster(name, nodes, platform) as inv:
        _fault(name, "node1", *fault)
        proc, summary = _verify(inv, platform, out)
        yield proc, summary, "\n".join(summary["report"])


def test_a3_two_nodes_names_the_npu_pair_that_cannot_reach_each_other(tmp_path):
    with _verified_with_fault(tmp_path, "a3", 2, "a3-16npu", "hccn_ping_lost", "device=3") as (proc, summary, report):
        assert proc.returncode != 0, "verify passed with an NPU that gets no answer:\n" + proc.stdout[-3000:]
        assert summary["failed_hosts"] == ["node1"], report
        fabric = json.loads((tmp_path / "verify" / "fabric.json").read_text())
        pair = next(p for p in fabric["hccn_pairs"]["node1"] if p["device"] == 3)
        line = (f"node1: fabric.hccn_ping.NPU3.node2: expected NPU3 of node1 reaches NPU3 of node2 ({pair['address']}): "
                "3 of 3 replies, found 0 of 3 replies (100.00% packet loss): recv time out seq=0")
        assert line in report, report
        failed = [ln for ln in summary["report"] if ln.startswith("node1: ")]
        assert len(failed) == 1, report  # only that pair: every other pair (32 pings) and per-node check passes
        assert len(fabric["hccn_pairs"]["node2"]) == 16 and len(fabric["hccn_ping"]["node2"]["pings"]) == 16
        print(f"\nA3 2 nodes, NPU3 of node1 silenced: {line}")


def test_nvidia_verify_fails_on_an_aborted_ibstat(tmp_path):
    with _verified_with_fault(tmp_path, "nv", 1, "h800-hgx8", "ibstat_abort", "nic=mlx5_2") as (proc, summary, report):
        assert proc.returncode != 0 and summary["failed_hosts"] == ["node1"], report
        failed = {c["id"]: c for r in summary["results"] for c in r["checks"] if not c["ok"]}
        cap = failed.get("capture.ibstat")
        assert cap is not None, report
        assert "exit status 255" in cap["found"] and "ibpanic" in cap["found"] and "mlx5_2" in cap["found"], cap
        print(f"\nH800 1 node, ibstat aborted at mlx5_2: {next(ln for ln in summary['report'] if 'capture.ibstat' in ln)}")
