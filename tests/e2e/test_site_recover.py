"""Disaster recovery end to end, after test_site.py (file order) on the same converged cluster:
node2 is replaced (its container recreated: new host key, empty disk). recover.yml stops at once
with the new key's fingerprint and the fix; with exactly that key accepted it rebuilds node2
(weights from node1, verified) while node1 changes nothing but its mesh keys."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

CLUSTER = os.environ.get("LLMB_E2E_CLUSTER", "e2e")  # as conftest.py names it
ROOT = Path(__file__).resolve().parents[2]
NODE = "node2"


def _sim():
    loader = importlib.machinery.SourceFileLoader("sim_cluster", str(ROOT / "scripts/sim-cluster"))
    spec = importlib.util.spec_from_loader("sim_cluster", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _fingerprint(cluster) -> str:
    pub = cluster.node(NODE, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
    out = subprocess.run(["ssh-keygen", "-lf", "-"], input=pub, capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def _report(run) -> dict:
    """The run's report.json, named by report.yml's summary line (`run <id>: OK|FAILED`)."""
    m = re.search(r"report\.html: (\S+?)/report\.html", run.out)
    assert m, "no report.html line in the output:\n" + run.out[-3000:]
    return json.loads((Path(m.group(1)) / "report.json").read_text())


@pytest.fixture(scope="module")
def replaced(cluster):
    """Replace node2 as a site would: a fresh machine at the same address (new host key, empty disk)."""
    sim = _sim()
    cname = f"{CLUSTER}-{NODE}"
    old_fp = _fingerprint(cluster)
    image = subprocess.run(["docker", "inspect", "-f", "{{.Config.Image}}", cname], capture_output=True, text=True,
                           check=True).stdout.strip()
    state = ROOT / ".cache/sim" / CLUSTER
    info = json.loads((state / "cluster.json").read_text())
    t0 = time.monotonic()
    sim.start_node(CLUSTER, NODE, image, f"llmb-{CLUSTER}", [])  # removes the old container first
    new = sim.provision(CLUSTER, NODE, info["profile"], (state / "id_ed25519.pub").read_text(), sim.engine_wheelhouse())
    print(f"replaced {NODE} in {time.monotonic() - t0:.1f}s")
    # Docker gives the recreated container the freed address back (lowest free); the inventory pins it
    assert new["ip"] == cluster.ip(NODE), f"recreated {NODE} got {new['ip']}, not {cluster.ip(NODE)}"
    assert cluster.node(NODE, "test", "-e", "/opt/llmb/models", check=False).returncode != 0  # empty disk
    new_fp = _fingerprint(cluster)
    assert new_fp != old_fp
    return new_fp


def test_recover_stops_at_once_on_the_new_host_key_with_the_fix(cluster, replaced):
    # Ansible's own start and stage 0 (controller only) on this machine right now, up to the name
    # check: the shared CI machine is loaded at times, and that part is no wait of the recovery's.
    base = cluster.playbook("playbooks/recover.yml", "-e", "llmb_recover_host=no-such-node")
    assert base.rc != 0 and "found no-such-node" in base.out, base.out[-2000:]
    run = cluster.playbook("playbooks/recover.yml", "-e", f"llmb_recover_host={NODE}")
    assert run.rc != 0
    print(f"host-key stop in {run.seconds:.1f}s (ansible-playbook's start and stage 0: {base.seconds:.1f}s)")
    assert run.seconds - base.seconds < 5, f"took {run.seconds:.1f}s ({base.seconds:.1f}s to start) to say what to do"
    assert f"presented: ssh-ed25519 {replaced}" in run.out, run.out[-3000:]
    assert f"-e llmb_recover_host={NODE} -e llmb_recover_hostkey={replaced}" in run.out
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" not in run.out


def test_recover_refuses_a_fingerprint_the_node_does_not_present(cluster, replaced):
    wrong = "SHA256:" + "A" * 43
    run = cluster.playbook("playbooks/recover.yml", "-e", f"llmb_recover_host={NODE}", "-e", f"llmb_recover_hostkey={wrong}")
    assert run.rc != 0 and "refusing to pin a key the node does not hold" in run.out and replaced in run.out


def test_recover_with_the_accepted_key_rebuilds_the_node(cluster, replaced):
    run = cluster.playbook("playbooks/recover.yml", "-e", f"llmb_recover_host={NODE}", "-e", f"llmb_recover_hostkey={replaced}")
    print(f"recovery in {run.seconds:.1f}s")
    assert run.rc == 0, run.out[-6000:]
    recap = run.recap()
    assert recap[NODE]["failed"] == 0 and recap[NODE]["changed"] > 0
    node1_changes = [t for t in run.changed_tasks() if t.endswith("[node1]") or "[node1 ->" in t]
    assert node1_changes, "the mesh keys of node1 should change (node2's new host key)"
    # node1 pins node2's new key in the mesh, and serves its verified copy to node2 while node2
    # fetches (the relay: a transient unit started and stopped); nothing else of node1 changes
    assert all("ssh_mesh" in t or "relay server" in t for t in node1_changes), node1_changes
    rep = _report(run)
    assert rep["ok"] is True, rep["failed"]
    w = rep["weights"][NODE]
    assert w["source"] == "node1" and w["fetched_bytes"] and w["verified_bytes"], w
    assert rep["weights"]["node1"]["fetched_bytes"] in (0, None)
    # the key pinned is exactly the accepted one: plain ssh with the inventory's known_hosts passes
    kh = ROOT / ".cache/sim" / CLUSTER / "known_hosts"
    out = subprocess.run(["ssh-keygen", "-F", cluster.ip(NODE), "-f", str(kh)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.count("ssh-ed25519") == 1
