"""Verify's cross-node fabric stage on the converged 2-node cluster, logged in as the suite's login
(a sudo user by default: the fabric play becomes root for the root-owned SSH mesh, docs/verify.md
"Cross-node fabric"). Runs after test_site.py (file order), so the mesh of stage 4 exists.

Simulator faults (tests/sim/accelsim) on both nodes at once: node2 loses a rail (mlx5_3) and NCCL
falls back to sockets there; node1 has an Xid on GPU3 and a thermally throttled GPU5. One
`verify.yml --tags fabric -e verify_fabric_record_rails=true` must name each by host and device, and
the launch plan read afterwards gives each node's services the rails recorded for it (NCCL_IB_HCA).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAILS = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]  # the simulated H800's four NICs
FAULTS = {
    "node1": ["xid gpu=3 code=79", "throttle gpu=5 reason=hw_thermal_slowdown"],
    "node2": ["rail_down nic=mlx5_3", "socket_fallback"],
}


def _fail_text(run) -> str:
    return run.out[-6000:]


def _accelsim(cluster, node: str, *args: str):
    proc = cluster.node(node, "accelsim", "fault", *args, check=False)
    assert proc.returncode == 0, f"{node}: accelsim fault {' '.join(args)}: {proc.stderr}"


def test_fabric_names_rail_socket_fallback_and_gpu_faults_then_plan_uses_recorded_rails(cluster):
    host_vars = cluster.inventory.parent / "host_vars"
    recorded = {n: host_vars / n / "llmb_rdma.yml" for n in FAULTS}
    assert not any(p.exists() for p in recorded.values()), "rails recorded before this test: a leftover"
    run_id = f"e2e-fabric-{int(time.time() * 1000)}"
    try:
        for node, faults in FAULTS.items():
            for fault in faults:
                _accelsim(cluster, node, "add", *fault.split())
        run = cluster.playbook("playbooks/verify.yml", "--tags", "fabric", "-e", "verify_fabric_record_rails=true",
                               env={"LLMB_RUN_ID": run_id})
        assert run.rc != 0, "verify passed with faults on both nodes:\n" + _fail_text(run)
        summary = json.loads((ROOT / "artifacts" / run_id / "verify" / "summary.json").read_text())
        assert sorted(summary["failed_hosts"]) == ["node1", "node2"], summary["report"]
        report = "\n".join(summary["report"])
        failed = {r["host"]: {c["id"]: c for c in r["checks"]} for r in summary["results"]}
        # the fabric ran (as root: the mesh is root's, whoever logs in), and the all-reduce with it
        fabric = json.loads((ROOT / "artifacts" / run_id / "verify" / "fabric.json").read_text())
        assert fabric["allreduce"] and not fabric["allreduce"].get("skipped"), fabric["allreduce"]
        # node2: the rail that is down, by host and NIC (ib_write_bw's own words), and NCCL's socket fallback
        assert "node2: fabric.rail.mlx5_3: expected rail mlx5_3 Active, found down: Port number 1 state is Down." \
            in report, report
        assert failed["node2"]["fabric.transport"]["found"].startswith("socket"), failed["node2"]
        assert "node2: fabric.transport: expected NET/IB (InfiniBand or RoCE), found socket" in report, report
        # node1: the Xid GPU and the throttled GPU, by host and GPU
        assert "node1: health.xid.GPU3: expected no Xid event since boot on GPU3" in report, report
        assert "Xid 79" in failed["node1"]["health.xid.GPU3"]["found"]
        assert "node1: health.throttle.GPU5: expected no clock slowdown reason" in report, report
        assert "hw_thermal_slowdown" in failed["node1"]["health.throttle.GPU5"]["found"]
        # nothing named on the wrong host
        assert not any(k.startswith(("health.xid", "health.throttle")) for k in failed["node2"]), failed["node2"]
        assert "fabric.rail.mlx5_3" not in failed["node1"] and "fabric.transport" not in failed["node1"], failed["node1"]
        assert fabric["rails"]["node2"]["llmb_rdma_rails"] == RAILS[:3], fabric["rails"]
        assert fabric["rails"]["node1"]["llmb_rdma_rails"] == RAILS, fabric["rails"]

        # the rails the fabric found working, recorded for the planner: node2 without its dead rail
        assert all(p.exists() for p in recorded.values()), run.out[-3000:]
        proc = subprocess.run([str(ROOT / "scripts/launch-plan"), "-i", str(cluster.inventory), "--format", "json"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        hca = {(h["host"], s["name"]): s["env"].get("NCCL_IB_HCA") for h in json.loads(proc.stdout) for s in h["services"]}
        assert hca and all(v is not None for v in hca.values()), hca
        for (host, service), value in hca.items():
            want = "=" + ",".join(RAILS if host == "node1" else RAILS[:3])
            assert value == want, f"{host} {service}: NCCL_IB_HCA {value}, expected {want}"
        print(f"\nverify --tags fabric with faults on both nodes: {run.seconds:.0f}s")
    finally:
        for node in FAULTS:
            cluster.node(node, "accelsim", "fault", "clear", check=False)
        for path in recorded.values():
            path.unlink(missing_ok=True)
            if path.parent.exists() and not any(path.parent.iterdir()):
                path.parent.rmdir()
        if host_vars.exists() and not any(host_vars.iterdir()):
            host_vars.rmdir()
