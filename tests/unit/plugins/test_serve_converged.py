"""llmb_serve_converged (plugins/action/llmb_serve_converged.py, llmbctl.serveresult): where serve was found
converged on every host, one task smoke-tests every planned endpoint for real (the engine double answers
over HTTP) and writes every host's serve result, the record the per-host tasks (roles/serve/tasks/smoke.yml,
report.yml) write when nothing restarted; a failing endpoint writes nothing and hands over to them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from enginesim.api import ApiConfig, serving
from llmbctl.serveresult import ServeResultError, converged_results

REPO = Path(__file__).resolve().parents[3]
KEY = "sk-test-0123456789"
CLOCK = {"localhost": {"llmb_stage_started": "2026-11-27T09:00:00.000000Z"}}


@pytest.fixture()
def server():
    with serving(ApiConfig(engine="vllm", version="0.19.1", served_names=["kimi-k2-sim"], model_path="/m",
                           api_keys=[KEY])) as url:
        yield url


def _hosts(base_url, model="kimi-k2-sim"):
    api = {"base_url": base_url, "served_model_name": model, "reasoning": False, "tool_calls": False,
           "vision": False, "api_key": {"var": "serve_key"}}
    return {"n1": {"plan": {"services": [{"name": "llmb-vllm", "api": api}, {"name": "llmb-sshd", "api": None}]}},
            "n2": {"plan": {"services": [{"name": "llmb-vllm-worker", "api": None}]}},
            "n3": {"plan": None}}


def _act(args, hostvars, check_mode=False):
    spec = importlib.util.spec_from_file_location("llmb_serve_converged_action",
                                                  REPO / "plugins/action/llmb_serve_converged.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    act = object.__new__(mod.ActionModule)
    act._task = SimpleNamespace(check_mode=check_mode)
    args = {"hosts": ["n1", "n2", "n3"], "smoke": True, "tool_choice": "auto", "timeout_s": 10, **args}
    return act.act(args, {"hostvars": {**CLOCK, **hostvars}}, {})


def test_every_endpoint_is_smoke_tested_and_every_host_recorded_as_the_per_host_tasks_do(server, tmp_path):
    got = _act({"artifacts_dir": str(tmp_path), "document_hosts": _hosts(server)}, {"n1": {"serve_key": KEY}})
    assert got["recorded"] is True and got["changed"] is False and got["smoked"] == 1
    docs = {h: json.loads((tmp_path / "serve" / f"{h}.json").read_text()) for h in ("n1", "n2", "n3")}
    checks = docs["n1"]["smoke"][0]
    assert [c["check"] for c in checks] == ["served-model-name", "chat-completion", "unknown-model-404"]
    assert all(c["ok"] for c in checks) and checks[0]["found"] == ["kimi-k2-sim"]
    assert {k: docs["n1"][k] for k in ("services", "restarted", "healthy", "compile_cache", "ok", "stage", "started")} == {
        "services": ["llmb-vllm", "llmb-sshd"], "restarted": [], "healthy": [], "compile_cache": {}, "ok": True,
        "stage": "serve", "started": "2026-11-27T09:00:00.000Z"}
    assert docs["n2"]["services"] == ["llmb-vllm-worker"] and docs["n2"]["smoke"] == []
    assert docs["n3"]["services"] == [] and docs["n3"]["smoke"] == []


def test_a_failing_endpoint_writes_nothing_and_names_the_host(server, tmp_path):
    # the wrong served name: /v1/models does not list it, the chat is refused
    got = _act({"artifacts_dir": str(tmp_path), "document_hosts": _hosts(server, "other")}, {"n1": {"serve_key": KEY}})
    assert got["recorded"] is False and not (tmp_path / "serve").exists()
    assert got["failures"][0].startswith("n1: smoke test failed") and "served-model-name" in got["failures"][0]
    # without the key the server refuses (401): the token comes from the host's variable
    got = _act({"artifacts_dir": str(tmp_path), "document_hosts": _hosts(server)}, {"n1": {"serve_key": "wrong"}})
    assert got["recorded"] is False and "HTTP 401" in got["failures"][0]


def test_check_mode_and_smoke_off_send_nothing_and_record_an_empty_transcript_per_api(tmp_path):
    dead = "http://127.0.0.1:9/v1"  # nothing listens: a request would fail
    for check_mode, smoke in ((True, True), (False, False)):
        got = _act({"artifacts_dir": str(tmp_path), "document_hosts": _hosts(dead), "smoke": smoke}, {}, check_mode)
        assert got["recorded"] is True and got["smoked"] == 0
        assert json.loads((tmp_path / "serve" / "n1.json").read_text())["smoke"] == [{}]


def test_an_unset_api_key_variable_is_named_and_hands_over_to_the_per_host_tasks(server, tmp_path):
    got = _act({"artifacts_dir": str(tmp_path), "document_hosts": _hosts(server)}, {"n1": {}})
    assert got["recorded"] is False and not (tmp_path / "serve").exists()
    assert got["failures"] == ["n1: serve smoke test: the API key's variable serve_key is not set"]


def test_a_malformed_argument_fails_the_task(tmp_path):
    with pytest.raises(AnsibleActionFail, match="llmb_serve_converged: document hosts: expected a mapping"):
        _act({"artifacts_dir": str(tmp_path), "document_hosts": ["n1"]}, {})


@pytest.mark.parametrize(("hosts", "message"), [
    ({"n1": {"plan": {"services": "x"}}}, "n1: plan.services: expected a list"),
    ({"n1": {"plan": {"services": [{"name": "s", "api": {"base_url": 3, "served_model_name": "m"}}]}}},
     "n1: service s: api.base_url: expected a non-empty string"),
    ({"n1": {"plan": {"services": [{"name": "s", "api": {"base_url": "u", "served_model_name": "m", "reasoning": "yes"}}]}}},
     "n1: service s: api.reasoning: expected true or false"),
])
def test_a_malformed_plan_is_refused_by_name(hosts, message):
    with pytest.raises(ServeResultError, match=message):
        converged_results(hosts, ["n1"], None)
