"""llmbctl.console.progress: ansible-runner events -> per stage x host status, duration, weights."""

from __future__ import annotations

from llmbctl.console.progress import FAILED, OK, RUNNING, UNREACHABLE, Progress, stage_of

R = "/srv/llm-bringup"


def _ev(kind: str, host: str | None, path: str, t: int, action: str = "command", res: dict | None = None) -> dict:
    data = {"task": "t", "task_path": f"{R}/{path}:3", "task_action": action}
    if host:
        data["host"] = host
    if res is not None:
        data["res"] = res
    return {"event": kind, "event_data": data, "created": f"2026-11-24T01:00:{t:02d}.000000"}


def test_stage_of_task_files():
    assert stage_of(f"{R}/roles/engine_image/tasks/pull.yml:4") == "engine"
    assert stage_of(f"{R}/roles/ssh_mesh/tasks/check.yml:1") == "ssh_mesh"
    assert stage_of(f"{R}/playbooks/_run.yml:30") == "preflight"
    assert stage_of(f"{R}/playbooks/weights.yml:20") == "weights"
    assert stage_of(f"{R}/playbooks/includes/record.yml:5") is None  # belongs to the stage including it
    assert stage_of("") is None


def test_progress_per_stage_and_host():
    p = Progress()
    for ev in [
        _ev("playbook_on_task_start", None, "roles/verify/tasks/probe.yml", 0),
        _ev("runner_on_start", "node1", "roles/verify/tasks/probe.yml", 0),
        _ev("runner_on_start", "node2", "roles/verify/tasks/probe.yml", 0),
        _ev("runner_on_ok", "node1", "roles/verify/tasks/probe.yml", 3),
        _ev("runner_on_unreachable", "node2", "roles/verify/tasks/probe.yml", 30, res={"msg": "Host key verification failed"}),
        _ev("playbook_on_task_start", None, "roles/weights/tasks/fetch.yml", 31),
        _ev("runner_on_start", "node1", "roles/weights/tasks/fetch.yml", 31),
        _ev("runner_on_ok", "node1", "roles/weights/tasks/fetch.yml", 41, action="model_fetch",
            res={"fetched": ["a", "b"], "fetched_bytes": 2_000_000_000, "fetch_seconds": 8.0, "disk": {"needed": 2_000_000_000}}),
        _ev("playbook_on_task_start", None, "playbooks/includes/record.yml", 42),
        _ev("runner_on_ok", "node1", "playbooks/includes/record.yml", 42),
        _ev("playbook_on_task_start", None, "roles/serve/tasks/level.yml", 43),
        _ev("runner_on_start", "node1", "roles/serve/tasks/level.yml", 43),
        _ev("runner_on_failed", "node1", "roles/serve/tasks/level.yml", 50, res={"msg": "llmb-vllm exited"}),
    ]:
        p.feed(ev)
    assert p.hosts == ["node1", "node2"]
    assert p.cells[("verify", "node1")].status == OK  # closed when weights started
    assert p.cells[("verify", "node2")].status == UNREACHABLE
    assert "Host key" in p.cells[("verify", "node2")].error
    w = p.cells[("weights", "node1")]
    assert w.status == OK and w.seconds == 11.0  # the record task of the stage counts to it
    assert p.cells[("serve", "node1")].status == FAILED and p.cells[("serve", "node1")].error == "llmb-vllm exited"
    assert ("weights", "node2") not in p.cells  # never reached: shown as not run
    assert (p.weights["node1"].bytes, p.weights["node1"].files, p.weights["node1"].rate) == (2_000_000_000, 2, 2.5e8)
    p.feed({"event": "playbook_on_stats", "event_data": {"failures": {"node1": 1}, "dark": {"node2": 1}}})
    assert p.ok is False


def test_running_cell_settles_ok_at_the_end():
    p = Progress()
    p.feed(_ev("playbook_on_task_start", None, "roles/bench/tasks/main.yml", 0))
    p.feed(_ev("runner_on_start", "node1", "roles/bench/tasks/main.yml", 0))
    assert p.cells[("bench", "node1")].status == RUNNING
    p.settle()
    assert p.cells[("bench", "node1")].status == OK
