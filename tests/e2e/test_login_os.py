"""Logins as sites grant them and the other tested node OS (docs/check-mode.md, README "Node
operating systems"). The full suite runs on the shared cluster (LLMB_E2E_OS, default Debian 12,
LLMB_E2E_LOGIN, default a NOPASSWD sudo user); here, cheaply:
- root login on that converged cluster changes nothing (same files, same owners, as with sudo);
- the core bring-up on the other OS (Debian 13 by default) logged in as a sudo user whose sudo
  asks a password kept in ansible-vault: dry run on the fresh cluster, real run, the two agree
  (with Open MPI 5 there: the mesh's mpirun check names its launcher by host name, prrte#2258).
"""

from __future__ import annotations

import json
import time

import pytest
from checkmode import compare
from conftest import CLUSTER, NODE_OS, ROOT, Cluster, hub_for, sim_up

OTHER_OS = "trixie" if NODE_OS == "bookworm" else "bookworm"
# the engine venv's Python is the node's own (offline wheelhouse: uv cannot download one); inventories/sim
# pins bookworm's
NODE_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}


def _fail_text(run) -> str:
    return run.out[-6000:]


def test_root_login_finds_the_converged_cluster_unchanged(cluster):
    run = cluster.playbook("site.yml", "-e", "ansible_user=root")
    assert run.rc == 0, _fail_text(run)
    recap = run.recap()
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), (recap, run.changed_tasks())


@pytest.fixture(scope="module")
def other_os_cluster(tmp_path_factory):
    name = f"{CLUSTER}-{OTHER_OS}"
    t0 = time.monotonic()
    inv = sim_up(name, "--vars-from", str(ROOT / "inventories/sim"), "--os", OTHER_OS, "--login", "sudo-password")
    up_s = time.monotonic() - t0
    with hub_for(name, tmp_path_factory, "-other") as (hub, url):
        c = Cluster(inv, url, hub)
        c.up_seconds = up_s
        yield c


def test_other_os_with_vaulted_sudo_password_dry_run_then_bring_up(other_os_cluster):
    c = other_os_cluster
    info = json.loads((c.inventory.parent / "cluster.json").read_text())
    assert info["os"] == OTHER_OS and info["login"] == "sudo-password" and info["user"] != "root"
    assert "!vault" in c.inventory.read_text() and "ansible_become_password" in c.inventory.read_text()
    py = ("-e", f"engine_host_python={NODE_PYTHON[OTHER_OS]}")
    dry = c.playbook("site.yml", "--check", "--diff", *py)
    assert dry.rc == 0, "dry run on a fresh cluster failed:\n" + _fail_text(dry)
    run = c.playbook("site.yml", *py)
    assert run.rc == 0, _fail_text(run)
    only_dry, only_real = compare(dry.out, run.out)
    assert not only_dry and not only_real, (sorted(only_dry), sorted(only_real))
    run_dirs = sorted((ROOT / "artifacts").glob("e2e-*"), key=lambda p: p.stat().st_mtime)
    report = json.loads((run_dirs[-1] / "report.json").read_text())
    assert report["ok"] is True and "kimi-k2-sim" in report["smoke_answer"], report
    print(f"\n{OTHER_OS} core bring-up: up {c.up_seconds:.0f}s, dry run {dry.seconds:.0f}s, real run {run.seconds:.0f}s")


def test_files_are_owned_as_documented(cluster):
    """become writes root-owned node state whoever logs in (docs/DESIGN.md, Privilege)."""
    out = cluster.node("node1", "stat", "-c", "%n %U:%G %a", "/etc/llmb", "/opt/llmb", "/etc/llmb/llmb-vllm.env",
                       "/etc/systemd/system/llmb-vllm.service").stdout.split("\n")
    rows = dict(line.split(" ", 1) for line in out if line)
    assert rows["/etc/llmb"] == "root:root 700"
    assert rows["/opt/llmb"].startswith("root:root")
    assert rows["/etc/llmb/llmb-vllm.env"] == "root:root 600"
    assert rows["/etc/systemd/system/llmb-vllm.service"] == "root:root 644"
