"""llmb_stage_gate's action plugin (plugins/action/llmb_stage_gate.py): in site.yml a stage's check
takes its verdict from the run's one check_all call per host while llmbctl.stagegate.prefetched says it
holds, without running the module on the node; otherwise (a single-stage run, an earlier stage that
acted, another digest) the module runs on the node as before."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

REPO = Path(__file__).resolve().parents[3]
NODE = {"changed": False, "converged": False, "differs": ["asked the node"], "record": "/n"}


def _run(args, monkeypatch):
    spec = importlib.util.spec_from_file_location("llmb_stage_gate_action", REPO / "plugins/action/llmb_stage_gate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    calls = []
    act = object.__new__(mod.ActionModule)
    act._task = SimpleNamespace(args=args)
    act._execute_module = lambda module_name, module_args, task_vars: calls.append((module_name, module_args)) or dict(NODE)
    return act.run(task_vars={}), calls


GATES = {"changed": False, "verdicts": {
    s: {"converged": True, "differs": [], "record": f"/r/{s}", "digest": f"sha256:{s}"}
    for s in ("engine", "weights", "ssh_mesh", "serve")}}
CHECK = {"action": "check", "stage": "serve", "digest": "sha256:serve", "watch": {}, "state_dir": "/var/lib/llmb"}


def test_a_valid_verdict_is_returned_without_running_the_module(monkeypatch):
    out, calls = _run({**CHECK, "gates": GATES, "acted": []}, monkeypatch)
    assert calls == [] and out["converged"] is True and out["prefetched"] is True and out["changed"] is False


@pytest.mark.parametrize("more", [
    {},                                                   # a single-stage run: no check_all result
    {"gates": {}, "acted": []},
    {"gates": GATES, "acted": ["engine"]},                # the engine stage ran in full before serve
    {"gates": GATES, "acted": [], "digest": "sha256:x"},  # serve's inputs moved since check_all
    {"gates": {"skipped": True}, "acted": []},
])
def test_otherwise_the_module_runs_on_the_node_without_the_gate_arguments(more, monkeypatch):
    out, calls = _run({**CHECK, **more}, monkeypatch)
    assert out["differs"] == ["asked the node"]
    assert len(calls) == 1 and calls[0][0] == "llmb_stage_gate"
    assert "gates" not in calls[0][1] and "acted" not in calls[0][1] and calls[0][1]["action"] == "check"


def test_record_and_check_all_always_run_the_module(monkeypatch):
    for action in ("record", "check_all"):
        _, calls = _run({**CHECK, "action": action, "gates": GATES, "acted": []}, monkeypatch)
        assert [c[1]["action"] for c in calls] == [action]


def test_an_unknown_stage_in_acted_is_refused(monkeypatch):
    with pytest.raises(AnsibleActionFail, match="acted: unknown stage"):
        _run({**CHECK, "gates": GATES, "acted": ["verify"]}, monkeypatch)


def test_prefetched_all_decides_every_host_on_the_controller_without_a_module(monkeypatch):
    args = {"action": "prefetched_all", "stage": "serve", "hosts": ["n1", "n2"], "gates": {"n1": GATES, "n2": GATES},
            "acted_by_host": {"n2": []}, "digests": {"n1": "sha256:serve", "n2": "sha256:serve"}}
    out, calls = _run(args, monkeypatch)
    assert calls == [] and out["converged"] is True and out["changed"] is False and sorted(out["hosts"]) == ["n1", "n2"]
    out, calls = _run({**args, "acted_by_host": {"n2": ["engine"]}}, monkeypatch)
    assert calls == [] and out["converged"] is False and out["differs"][0].startswith("n2: ")
    with pytest.raises(AnsibleActionFail, match="llmb_stage_gate serve: acted: expected"):
        _run({**args, "acted_by_host": ["engine"]}, monkeypatch)
