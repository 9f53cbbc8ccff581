"""Day two on the simulated 2-node cluster (issue 27): `llmb status` through the console.

After `llmb up`, status exits 0 with every planned service active and healthy, the release the API
server reports, the model commit and the devices' memory. Then node1's API server is killed
(SIGKILL; its binary made non-executable first, so that neither systemd's Restart= nor the group's
restart brings it back before status looks, whatever the machine's speed) and node2's unit is
edited by hand: status exits 1 and names both (host, service, check, expected, found), in its
table, its JSON and the run's report. The binary restored, `llmb up` puts the unit back and starts
the service; status exits 0 again. Shares the session's cluster (tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from conftest import ROOT


def llmb(cluster, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_RUN_ID", "LLMB_ARTIFACTS_DIR")}
    if cluster.vault_password_file:
        env["ANSIBLE_VAULT_PASSWORD_FILE"] = cluster.vault_password_file
    return subprocess.run([str(ROOT / ".venv/bin/llmb"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def up(cluster) -> str:
    run_id = f"daytwo-up-{int(time.time() * 1000)}"
    res = llmb(cluster, "up", "-i", str(cluster.inventory), "-e", f"weights_hf_endpoint={cluster.hf_url}",
               "--run-id", run_id)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    return run_id


def status(cluster, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    run_id = f"daytwo-status-{int(time.time() * 1000)}"
    return llmb(cluster, "status", "-i", str(cluster.inventory), "--run-id", run_id, *extra, timeout=600), run_id


def test_status_names_a_killed_service_and_a_hand_edited_unit(cluster):
    dep = json.loads((ROOT / "artifacts" / up(cluster) / "deployment.json").read_text())
    planned = {h: [s["name"] for s in (d["plan"] or {}).get("services") or []] for h, d in dep["hosts"].items()}
    api = next(s for s in dep["hosts"]["node1"]["plan"]["services"] if s["role"] == "api")
    member = planned["node2"][0]

    ok, run_id = status(cluster, "--json")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    summary = json.loads(ok.stdout)
    assert summary["ok"] is True and summary["drift"] == []
    assert summary == json.loads((ROOT / "artifacts" / run_id / "status.json").read_text())
    for host, names in planned.items():
        rec = summary["hosts"][host]
        assert [s["name"] for s in rec["services"]] == names
        assert all(s["state"] == "active" and s["health"]["ok"] is not False and s["since"] for s in rec["services"])
        assert rec["model_commit"] == dep["model"]["commit"] and rec["installed_release"] == dep["engine"]["version"]
        assert len(rec["gpu"]["gpus"]) == 8 and all(g["total_mib"] > 0 for g in rec["gpu"]["gpus"]), rec["gpu"]
    served = next(s for s in summary["hosts"]["node1"]["services"] if s["name"] == api["name"])
    assert served["release"] == dep["engine"]["version"] and served["health"]["ok"] is True

    binary = api["argv"][0]
    unit = f"/etc/systemd/system/{member}.service"
    cluster.node("node1", "chmod", "-x", binary)
    try:
        cluster.node("node1", "systemctl", "kill", "-s", "KILL", f"{api['name']}.service")
        cluster.node("node2", "sed", "-i", "s/^LimitNOFILE=.*/LimitNOFILE=65536/", unit)
        bad, bad_id = status(cluster)
        assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr[-3000:]
        summary = json.loads((ROOT / "artifacts" / bad_id / "status.json").read_text())
        drift = {(d["host"], d["service"], d["check"]): d for d in summary["drift"]}
        killed = drift.get(("node1", api["name"], "state")) or drift.get(("node1", api["name"], "health"))
        assert killed, summary["drift"]
        edited = drift[("node2", member, "unit")]
        assert "LimitNOFILE=65536" in edited["found"] and "LimitNOFILE=1048576" in edited["found"], edited
        # the table names both, and the run's report holds them as failed status results
        assert f"drift: node1 {api['name']}: {killed['check']}" in bad.stdout, bad.stdout[-3000:]
        assert f"drift: node2 {member}: unit: expected the unit the plan renders" in bad.stdout
        report = json.loads((ROOT / "artifacts" / bad_id / "report.json").read_text())
        assert report["stages"]["status"] == {"node1": False, "node2": False} and report["verdict"] == "FAILED"
        assert {f["host"] for f in report["failed"]} == {"node1", "node2"}
    finally:
        cluster.node("node1", "chmod", "+x", binary)

    up(cluster)
    again, _ = status(cluster, "--json")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert json.loads(again.stdout)["drift"] == []


def test_stop_then_start_in_plan_order(cluster):
    """`llmb stop`: every planned unit inactive, in reverse plan order (the API before the Ray head
    and workers), and no group restart brings them back; status names each one (exit 1). `llmb
    start`: plan order, each level ready, health; status exits 0."""
    dep = json.loads((ROOT / "artifacts" / up(cluster) / "deployment.json").read_text())
    planned = {h: [s["name"] for s in (d["plan"] or {}).get("services") or []] for h, d in dep["hosts"].items()}
    run_id = f"daytwo-stop-{int(time.time() * 1000)}"
    stop = llmb(cluster, "stop", "-i", str(cluster.inventory), "--run-id", run_id, timeout=900)
    assert stop.returncode == 0, stop.stdout[-3000:] + stop.stderr[-3000:]
    # the order: each unit's last stop in the journal, the API server's before the Ray units'
    stopped_at = {}
    for host, names in planned.items():
        for name in names:
            state = cluster.node(host, "systemctl", "show", name, "-p", "ActiveState,InactiveEnterTimestampMonotonic")
            props = dict(line.split("=", 1) for line in state.stdout.splitlines() if "=" in line)
            assert props["ActiveState"] == "inactive", (host, name, props)
            stopped_at[(host, name)] = int(props["InactiveEnterTimestampMonotonic"])
    api = next((h, s["name"]) for h, d in dep["hosts"].items() for s in d["plan"]["services"] if s["role"] == "api")
    head_ray = next((h, s["name"]) for h, d in dep["hosts"].items() for s in d["plan"]["services"] if s["role"] == "ray-head")
    assert api[0] == head_ray[0] and stopped_at[api] < stopped_at[head_ray]  # same host: one monotonic clock
    time.sleep(15)  # a group restart would have begun by now
    bad, bad_id = status(cluster)
    assert bad.returncode == 1, bad.stdout[-3000:]
    drift = json.loads((ROOT / "artifacts" / bad_id / "status.json").read_text())["drift"]
    assert sorted((d["host"], d["service"]) for d in drift if d["check"] == "state") == \
        sorted((h, n) for h, names in planned.items() for n in names), drift
    start = llmb(cluster, "start", "-i", str(cluster.inventory), "--run-id", f"daytwo-start-{int(time.time() * 1000)}",
                 timeout=1200)
    assert start.returncode == 0, start.stdout[-3000:] + start.stderr[-3000:]
    again, _ = status(cluster, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["drift"] == [], again.stdout[-3000:]


def test_bad_group_is_refused_with_exit_2(cluster):
    res = llmb(cluster, "stop", "-i", str(cluster.inventory), "--group", "no_such_group", timeout=120)
    assert res.returncode == 2 and "--group 'no_such_group': no such group" in res.stderr, res.stderr[-2000:]
