"""plugins/modules/llmb_vllm_bench.py run as Ansible runs it, against the engine double's
`vllm bench serve` (a venv-like bin/vllm) and its API requiring a key: the key reaches vLLM's client
through the environment only; the figures come back under vLLM's names; a missed threshold is
returned (fail_on_gate: false) or fails the module."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import llmb
import llmb.bench
import pytest
from enginesim.api import ApiConfig, ApiServer
from enginesim.runtime import Log
from module_runner import run_module as _run_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
sys.modules.setdefault("ansible.module_utils.llmb", llmb)
sys.modules.setdefault("ansible.module_utils.llmb.bench", llmb.bench)
KEY = "sk-module-bench-5"


def run_module(args: dict, monkeypatch, capsys) -> dict:
    return _run_module("llmb_vllm_bench", args, monkeypatch, capsys, last_line=True)  # after the API access log


@pytest.fixture()
def service(tmp_path):
    cfg = ApiConfig(engine="vllm", version="0.19.1", served_names=["kimi-k2-sim"], model_path="/m", api_keys=[KEY])
    srv = ApiServer(cfg, "127.0.0.1", 0, Log())
    srv.ready.set()
    vllm = tmp_path / "venv/bin/vllm"
    vllm.parent.mkdir(parents=True)
    vllm.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                    "from enginesim.vllm_cli import main\nsys.exit(main())\n")
    vllm.chmod(0o755)
    yield {"name": "llmb-vllm", "kind": "systemd", "argv": [str(vllm), "serve", "/opt/m", "--port", "8000"],
           "api": {"base_url": f"http://127.0.0.1:{srv.port}/v1", "served_model_name": "kimi-k2-sim"}}
    srv.httpd.shutdown()
    srv.httpd.server_close()


def test_runs_vllm_bench_serve_with_the_key_in_its_environment(service, monkeypatch, capsys):
    out = run_module({"service": service, "requests": 4, "concurrency": 2, "input_len": 16, "output_len": 8,
                      "api_key": KEY, "min_output_tok_s": 0.001, "host": "node1"}, monkeypatch, capsys)
    assert not out.get("failed"), out
    assert out["argv"][1:3] == ["bench", "serve"] and KEY not in json.dumps(out["argv"])
    res = out["result"]
    assert res["tool"] == "vllm bench serve" and res["completed"] == 4 and res["succeeded"] == 4
    assert res["output_token_throughput"] > 0 and "mean_ttft_ms" in res and "p99_e2el_ms" in res
    assert out["violations"] == []


def test_a_missed_threshold_is_returned_or_fails(service, monkeypatch, capsys):
    args = {"service": service, "requests": 2, "concurrency": 1, "input_len": 8, "output_len": 8, "api_key": KEY,
            "min_output_tok_s": 1e9, "host": "node1", "fail_on_gate": False}
    out = run_module(args, monkeypatch, capsys)
    assert not out.get("failed") and out["result"]["completed"] == 2
    assert out["violations"] and "node1: benchmark below thresholds: output throughput" in out["violations"][0]
    out = run_module(dict(args, fail_on_gate=True), monkeypatch, capsys)
    assert out["failed"] and "below thresholds" in out["msg"] and out["result"]["completed"] == 2


def test_without_the_key_vllm_bench_serve_fails_with_its_own_message(service, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = run_module({"service": service, "requests": 2, "concurrency": 1, "input_len": 8, "output_len": 8},
                     monkeypatch, capsys)
    assert out["failed"] and "exited with status 1" in out["msg"] and "HTTP 401" in out["msg"]
