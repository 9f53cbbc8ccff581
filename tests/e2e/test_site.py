"""site.yml end to end on the simulated cluster: converge, idempotence, check mode, then faults.

Tests run in file order and share one cluster: the converge test must pass first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from checkmode import compare

ROOT = Path(__file__).resolve().parents[2]


def _fail_text(run) -> str:
    return run.out[-6000:]


def test_site_converges_all_stages(cluster):
    # The operator's first command on untouched nodes: a dry run through every stage (docs/check-mode.md).
    dry = cluster.playbook("site.yml", "--check", "--diff")
    assert dry.rc == 0, "dry run on a fresh cluster failed:\n" + _fail_text(dry)
    run = cluster.playbook("site.yml")
    assert run.rc == 0, _fail_text(run)
    only_dry, only_real = compare(dry.out, run.out)
    assert not only_dry and not only_real, (
        f"the dry run ({dry.seconds:.0f}s) said other than the real run did: reported but not changed "
        f"{sorted(only_dry)}; changed but not reported {sorted(only_real)} (docs/check-mode.md)")
    recap = run.recap()
    assert set(recap) >= {"node1", "node2"}
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in recap.values()), recap
    run_dirs = sorted((ROOT / "artifacts").glob("e2e-*"), key=lambda p: p.stat().st_mtime)
    report = json.loads((run_dirs[-1] / "report.json").read_text())
    assert report["ok"] is True, report
    for stage in ("verify", "weights", "serve", "bench"):
        assert stage in report["stages"], f"no {stage} results in {run_dirs[-1]}"
    assert report["endpoint"] == f"http://{cluster.ip('node1')}:8000/v1"
    assert "kimi-k2-sim" in report["smoke_answer"]
    # untouched nodes: the engine's compile cache was empty at its first start (llmb.compile_cache)
    vllm = [r for r in report["serve"]["healthy"]["node1"] if r["service"] == "llmb-vllm"]
    assert [r["compile_cache"] for r in vllm] == ["cold"], report["serve"]["healthy"]
    # systemd knew the unit's start: the time to healthy is from it, not only the health wait
    assert re.search(r"llmb-vllm on node1: healthy [0-9.]+ s after its start \(compile cache cold\)",
                     (run_dirs[-1] / "report.md").read_text())
    # Ray's GCS binds every interface; the llmb-bindto preload the serve role built keeps it on the
    # head's cluster address: listening there only, and refused on the head's loopback
    head = cluster.ip("node1")
    ss = cluster.node("node1", "ss", "-Hltn", "sport = :6379").stdout.split()
    assert ss[3:4] in ([f"{head}:6379"], [f"[::ffff:{head}]:6379"]), ss
    probe = "import socket,sys\ntry: socket.create_connection((sys.argv[1], 6379), 3); print('open')\nexcept OSError as e: print(e.errno)"
    assert cluster.node("node1", "python3", "-c", probe, "127.0.0.1").stdout.split() == ["111"]  # refused
    assert cluster.node("node1", "python3", "-c", probe, head).stdout.split() == ["open"]


def test_second_run_changes_nothing(cluster):
    run = cluster.playbook("site.yml")
    assert run.rc == 0, _fail_text(run)
    recap = run.recap()
    assert all(r["changed"] == 0 for r in recap.values()), (recap, run.changed_tasks())


def test_check_diff_on_converged_cluster_reports_no_change(cluster):
    run = cluster.playbook("site.yml", "--check", "--diff")
    assert run.rc == 0, _fail_text(run)
    recap = run.recap()
    assert all(r["changed"] == 0 and r["failed"] == 0 for r in recap.values()), (recap, run.changed_tasks())


# The serve stage's fast path still runs these (smoke test, result: in one task, roles/serve/tasks/converged.yml,
# per host where an endpoint fails); any other task of a gated stage's role means the stage acted
# (playbooks/tasks/stage_gate.yml)
FOLDED = "Smoke-test every endpoint and record every host's result (one task, from the controller)"
FAST_PATH_TASKS = {FOLDED, "OpenAI smoke tests against the endpoint (from the controller, as a client would)",
                   "Record this host's serve result"}
GATED_ROLES = {"engine_host": "engine", "engine_image": "engine", "weights": "weights", "ssh_mesh": "ssh_mesh",
               "serve": "serve"}


def _stages_acted(out: str) -> set[str]:
    acted = set()
    for m in re.finditer(r"^TASK \[(\w+) : (.+?)\] \**$", out, re.M):
        if m.group(1) in GATED_ROLES and m.group(2) not in FAST_PATH_TASKS:
            acted.add(GATED_ROLES[m.group(1)])
    return acted


def test_fast_path_acts_in_exactly_the_stage_whose_input_or_state_changed(cluster):
    """Issue 29: the converged re-run (test_second_run_changes_nothing) ran no gated stage's tasks; one
    changed input runs exactly the stage that reads it; a file a stage made, edited on one node, runs
    that stage, which puts it back; then nothing acts again."""
    quiet = cluster.playbook("site.yml")
    assert quiet.rc == 0, _fail_text(quiet)
    assert _stages_acted(quiet.out) == set(), sorted(set(re.findall(r"^TASK \[((?:engine_host|weights|ssh_mesh|serve) : .+?)\]", quiet.out, re.M)))[:20]
    assert all(r["changed"] == 0 for r in quiet.recap().values()), (quiet.recap(), quiet.changed_tasks())
    # serve's converged path: the endpoint smoke-tested for real and every host's result written, in one task
    assert f"TASK [serve : {FOLDED}]" in quiet.out and "TASK [serve : OpenAI smoke tests" not in quiet.out
    run_dir = sorted((ROOT / "artifacts").glob("e2e-*"), key=lambda p: p.stat().st_mtime)[-1]
    serve = {h: json.loads((run_dir / "serve" / f"{h}.json").read_text()) for h in ("node1", "node2")}
    checks = serve["node1"]["smoke"][0]
    assert [c["check"] for c in checks][:2] == ["served-model-name", "chat-completion"] and all(c["ok"] for c in checks)
    assert serve["node1"]["restarted"] == [] and serve["node2"]["smoke"] == [], serve
    report = json.loads((run_dir / "report.json").read_text())
    assert report["ok"] is True and "kimi-k2-sim" in report["smoke_answer"], report
    # one input of one stage (a serve knob): serve runs in full, changes nothing, the others do not run
    knob = cluster.playbook("site.yml", "-e", "serve_health_interval_s=3")
    assert knob.rc == 0, _fail_text(knob)
    assert _stages_acted(knob.out) == {"serve"}
    assert all(r["changed"] == 0 for r in knob.recap().values()), (knob.recap(), knob.changed_tasks())
    # drift: the mesh's client configuration edited on node2; the knob back to its default (serve again)
    path = "/etc/llmb/ssh-mesh/ssh_config"
    before = cluster.node("node2", "cat", path).stdout
    cluster.node("node2", "sh", "-c", f"echo '# drift' >> {path}")
    drift = cluster.playbook("site.yml")
    assert drift.rc == 0, _fail_text(drift)
    assert _stages_acted(drift.out) == {"ssh_mesh", "serve"}
    changed = {(h, t.split("] ")[0]) for t in drift.changed_tasks() for h in re.findall(r"changed: \[(\w+)", t)}
    assert changed and all(h == "node2" and "ssh_mesh :" in t for h, t in changed), drift.changed_tasks()
    assert cluster.node("node2", "cat", path).stdout == before
    again = cluster.playbook("site.yml", "--check", "--diff")
    assert again.rc == 0 and _stages_acted(again.out) == set(), _fail_text(again)
    assert all(r["changed"] == 0 for r in again.recap().values()), (again.recap(), again.changed_tasks())


def _fault(cluster, node: str, unit: str, fault: str):
    cluster.node(node, "sh", "-c", f"mkdir -p /etc/llmb-enginesim && echo {fault} > /etc/llmb-enginesim/faults")
    cluster.node(node, "systemctl", "restart", unit, check=False)


def _clear(cluster):
    for n in ("node1", "node2"):
        cluster.node(n, "rm", "-f", "/etc/llmb-enginesim/faults")
        cluster.node(n, "sh", "-c", "iptables -F OUTPUT")
    for n, unit in (("node1", "llmb-ray"), ("node2", "llmb-ray"), ("node1", "llmb-vllm")):
        cluster.node(n, "systemctl", "restart", unit, check=False)


@pytest.fixture()
def healed(cluster):
    """Clears the fault and restarts the units; the next test's serve run (and the last test,
    which asserts it) brings the cluster back, so there is no separate healing run per fault."""
    yield
    _clear(cluster)


def test_engine_exiting_at_start_names_host_and_shows_journal(cluster, healed):
    _fault(cluster, "node1", "llmb-vllm", "exit_at_start")
    run = cluster.playbook("playbooks/serve.yml")
    assert run.rc != 0
    assert "node1" in run.out and "llmb-vllm" in run.out
    assert "exit" in run.out and "log lines" in run.out
    assert "exit_at_start" in run.out or "Traceback" in run.out or "error" in run.out.lower()


def test_worker_whose_head_is_unreachable_fails_with_cause(cluster, healed):
    head = cluster.ip("node1")
    cluster.node("node2", "iptables", "-A", "OUTPUT", "-p", "tcp", "-d", head, "--dport", "6379", "-j", "REJECT")
    cluster.node("node2", "systemctl", "restart", "llmb-ray", check=False)
    run = cluster.playbook("playbooks/serve.yml")
    assert run.rc != 0
    assert "node2" in run.out and "llmb-ray" in run.out
    assert f"{head}:6379" in run.out  # the double's log line names the address it could not reach


def test_endpoint_never_healthy_times_out_with_log_tail(cluster, healed):
    _fault(cluster, "node1", "llmb-vllm", "never_healthy")
    run = cluster.playbook("playbooks/serve.yml", "-e", "serve_health_timeout_s=20")
    assert run.rc != 0
    assert "node1" in run.out and "not ready within 20s" in run.out and "log lines" in run.out


def test_smoke_answer_without_reasoning_content_fails(cluster, healed):
    _fault(cluster, "node1", "llmb-vllm", "no_reasoning")
    run = cluster.playbook("playbooks/serve.yml")
    assert run.rc != 0
    assert "node1: smoke test failed" in run.out and "reasoning-content" in run.out
    assert "/chat/completions" in run.out


def test_serve_recovers_after_the_faults(cluster):
    """Runs after the fault tests (file order): with the faults gone, the serve stage converges again."""
    _clear(cluster)
    run = cluster.playbook("playbooks/serve.yml")
    assert run.rc == 0, "the serve stage did not recover after the fault tests:\n" + _fail_text(run)
