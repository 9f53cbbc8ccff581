"""Privilege as sites grant it (docs/DESIGN.md, "Privilege"): `become` only at the level of the
plays that write root-owned node state, never on a task that runs on the controller.

Lint-like: walks every play and task file of site.yml, playbooks/ and roles/ (blocks, handlers,
delegated and run_once tasks included).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"localhost", "127.0.0.1", "::1"}
FABRIC_PLAY = "Verify - cross-node fabric as root (ib_write_bw per rail, all_reduce_perf over the SSH mesh)"
# The node plays that need root (engine venvs under /opt/llmb, /etc/llmb, units, docker, the mesh's
# files under root's ~/.ssh); every other play runs as the login user.
BECOME_PLAYS = {
    ("playbooks/engine.yml", "Engine - installed on the host with uv"),
    ("playbooks/engine.yml", "Engine - container image"),
    ("playbooks/weights.yml", "Weights - download once, verify, fan out, patch config.json"),
    ("playbooks/ssh_mesh.yml", "Access - SSH mesh between the accelerator nodes"),
    ("playbooks/serve.yml", "Serve the model"),
    # site.yml's one gate call per host reads what the four stages above wrote as root (dirs.state, units)
    ("playbooks/_gates.yml", "The gated stages' fast path - one call per host for all of them"),
    # the SSH mesh mpirun uses is root's (/etc/llmb/ssh-mesh, 0700): the fabric tests, nothing else of verify
    ("playbooks/verify.yml", FABRIC_PLAY),
    # day two (docs/day-two.md): status reads root's units and docker; stop/start drive the units
    ("playbooks/status.yml", "Status of every node's planned services"),
    ("playbooks/collect.yml", "Collect each node's units, journals, engine and kernel logs and versions"),
    ("playbooks/stop.yml", "Stop the planned services in reverse plan order, drained first where a router can"),
    ("playbooks/start.yml", "Start the planned services in plan order, with health"),
}
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")


def _yaml_files() -> list[Path]:
    files = [ROOT / "site.yml", *sorted((ROOT / "playbooks").rglob("*.yml"))]
    files += sorted(p for p in (ROOT / "roles").rglob("*.yml") if p.parent.name in ("tasks", "handlers"))
    return files


def _tasks(items: Any, inherited_become: Any = None) -> Iterator[tuple[dict, Any]]:
    """Every task (and block) with the `become` it would run with from its enclosing blocks."""
    for t in items or []:
        if not isinstance(t, dict):
            continue
        become = t.get("become", inherited_become)
        yield t, become
        for key in ("block", "rescue", "always"):
            if key in t:
                yield from _tasks(t[key], become)


def _all_tasks() -> Iterator[tuple[Path, dict, Any]]:
    for path in _yaml_files():
        doc = yaml.safe_load(path.read_text()) or []
        rel = path.relative_to(ROOT)
        if path.parent.name in ("tasks", "handlers"):
            for t, become in _tasks(doc):
                yield rel, t, become
            continue
        for play in doc:
            if "import_playbook" in play:
                continue
            for key in TASK_LISTS[:4]:
                for t, become in _tasks(play.get(key), play.get("become")):
                    yield rel, t, become


def _runs_on_controller(task: dict) -> bool:
    if "local_action" in task or task.get("connection") == "local":
        return True
    return str(task.get("delegate_to", "")).strip() in LOCAL


def test_no_controller_task_uses_become():
    """A task delegated to the controller inside a become play would sudo on the operator's machine:
    every such task says `become: false` itself (or its block does)."""
    offenders = [
        f"{rel}: {t.get('name', '?')}"
        for rel, t, become in _all_tasks()
        if _runs_on_controller(t) and become is not False
    ]
    assert not offenders, f"controller tasks without `become: false`: {offenders}"


def test_the_walk_finds_the_controller_tasks():
    """The lint above would pass vacuously if the walk missed the delegated tasks."""
    names = {t.get("name") for _, t, _ in _all_tasks() if _runs_on_controller(t)}
    assert "Generate the cluster key pair once (ed25519)" in names
    assert "Benchmark each endpoint with the client" in names
    assert len(names) >= 5


def test_become_only_at_play_level_on_the_node_plays():
    plays_with_become = set()
    for path in _yaml_files():
        rel = str(path.relative_to(ROOT))
        doc = yaml.safe_load(path.read_text()) or []
        if path.parent.name in ("tasks", "handlers"):
            continue
        for play in doc:
            if "hosts" not in play:
                continue
            if play.get("become"):
                plays_with_become.add((rel, play["name"]))
                assert play["hosts"] not in LOCAL, f"{rel}: play '{play['name']}' on the controller uses become"
    assert plays_with_become == BECOME_PLAYS
    task_become = [
        f"{rel}: {t.get('name', '?')}" for rel, t, _ in _all_tasks() if t.get("become") is True
    ]
    assert not task_become, f"become on a task, not the play: {task_become}"


@pytest.mark.parametrize("playbook", ["playbooks/preflight.yml", "playbooks/bench.yml",
                                      "playbooks/report.yml", "playbooks/_run.yml"])
def test_read_only_stages_need_no_root(playbook):
    doc = yaml.safe_load((ROOT / playbook).read_text())
    assert not [p["name"] for p in doc if p.get("become")], playbook


def test_verify_becomes_root_only_for_the_fabric_tests():
    """The per-node checks and the report run as the login user; the fabric play (tag fabric: opted out
    with verify_fabric: never) becomes root and runs only the fabric tasks (with the run's directory)."""
    doc = yaml.safe_load((ROOT / "playbooks/verify.yml").read_text())
    node_plays = [p for p in doc if p.get("hosts") == "accel_nodes"]
    become = [p for p in node_plays if p.get("become")]
    assert [p["name"] for p in become] == [FABRIC_PLAY]
    (fabric,) = become
    assert fabric["tags"] == ["fabric"]
    imported = [t["ansible.builtin.import_role"] for t in fabric["tasks"]]
    assert [(r["name"], r["tasks_from"]) for r in imported] == [("verify", "prepare"), ("verify", "fabric")]
    # before it the checks as the login user, after it the one report of both
    i = node_plays.index(fabric)
    assert [t["ansible.builtin.import_role"]["tasks_from"] for t in node_plays[i - 1]["tasks"]] == ["checks"]
    assert [t["ansible.builtin.import_role"]["tasks_from"] for t in node_plays[i + 1]["tasks"]] == ["report"]
    assert set(node_plays[i + 1]["tags"]) >= {"verify", "fabric"}
    for name in ("checks.yml", "main.yml"):  # the login user's tasks never reach the fabric tasks
        imports = [t.get("ansible.builtin.import_tasks") for t in yaml.safe_load((ROOT / "roles/verify/tasks" / name).read_text())]
        assert "fabric.yml" not in imports, name
