"""`vllm bench serve`: the double parses the real release's option names (walked from vLLM 0.23.0's
own parser into data/engines/bench/) and writes vLLM's result JSON; llmb.bench builds the recipes'
command, finds where it runs for a plan service and reads the figures back."""

from __future__ import annotations

import json

import pytest
from enginesim import vllm_bench
from enginesim.api import ApiConfig, serving
from llmb.bench import gate, vllm_bench_argv, vllm_bench_figures, vllm_bench_target

KEY = "sk-bench-test-31"


@pytest.fixture()
def api():
    with serving(ApiConfig(engine="vllm", version="0.19.1", served_names=["kimi-k2-sim"], model_path="/m",
                           api_keys=[KEY])) as url:
        yield url


def test_the_flag_set_is_vllm_0_23_0s_bench_serve():
    fs = vllm_bench.load("0.23.0")
    assert fs["cli"] == "vllm bench serve" and fs["version"] == "0.23.0" and fs["allow_abbrev"] is True
    for flag in ("--backend", "--base-url", "--endpoint", "--served-model-name", "--dataset-name",
                 "--random-input-len", "--random-output-len", "--num-prompts", "--max-concurrency",
                 "--request-rate", "--num-warmups", "--save-result", "--result-dir", "--result-filename",
                 "--percentile-metrics", "--metric-percentiles", "--ignore-eos", "--trust-remote-code"):
        assert flag in fs["flags"], flag
    assert "random" in fs["flags"]["--dataset-name"]["choices"]


def test_double_runs_the_recipes_command_and_writes_vllms_result(api, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    argv = vllm_bench_argv(["vllm"], api, "kimi-k2-sim", "/opt/llmb/models/kimi-k2-sim", 6, 2, 32, 16,
                           str(tmp_path), "r.json", warmups=1, ignore_eos=True)
    assert argv[1:3] == ["bench", "serve"] and KEY not in " ".join(argv)
    assert vllm_bench.main(argv[3:]) == 0
    assert "Serving Benchmark Result" in capsys.readouterr().out
    res = json.loads((tmp_path / "r.json").read_text())
    for key in ("completed", "failed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "p99_e2el_ms",
                "max_concurrency", "num_prompts", "model_id"):
        assert key in res, key
    assert res["completed"] == 6 and res["failed"] == 0 and res["max_concurrency"] == 2
    fig = vllm_bench_figures(res, 6)
    assert fig["tool"] == "vllm bench serve" and fig["success_rate"] == 1.0 and fig["output_token_throughput"] > 0
    assert fig["latency_p99_s"] == pytest.approx(res["p99_e2el_ms"] / 1000, abs=1e-4)
    assert gate(fig, 1.0, 1e9) and not gate(fig, 1.0, 0.001)


def test_without_the_key_the_initial_run_fails(api, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    argv = vllm_bench_argv(["vllm"], api, "kimi-k2-sim", None, 2, 1, 8, 8, str(tmp_path), "r.json")
    assert vllm_bench.main(argv[3:]) == 1
    assert "HTTP 401" in capsys.readouterr().err and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("argv, words", [
    (["--random-input-length", "8"], "unrecognized arguments: --random-input-length"),
    (["--dataset-name", "bogus"], "invalid choice: 'bogus'"),
    (["--num-prompts", "ten"], "invalid int value"),
])
def test_double_refuses_what_the_real_parser_refuses(argv, words, capsys):
    assert vllm_bench.main(argv) == 2
    assert words in capsys.readouterr().err


def test_seed_003s_abbreviations_parse():  # --random-input 8000 --num-prompt 1000 (allow_abbrev)
    from enginesim import flagset

    args, _ = flagset.parse(vllm_bench.load("0.23.0"), ["--random-input", "8000", "--num-prompt", "1000"], 0)
    assert args == {"--random-input-len": 8000, "--num-prompts": 1000}


def test_where_vllm_bench_serve_runs():
    host = {"kind": "systemd", "api": {"base_url": "http://h:8000/v1"},
            "argv": ["/opt/llmb/venvs/vllm-0.19.1/bin/vllm", "serve", "/opt/m", "--port", "8000"]}
    assert vllm_bench_target(host) == {"prefix": ["/opt/llmb/venvs/vllm-0.19.1/bin/vllm"], "model": "/opt/m",
                                       "container": None}
    ctr = {"kind": "container", "api": {"base_url": "x"}, "argv": ["vllm", "serve", "/work/m"],
           "container": {"name": "vllm-kimi", "entrypoint": "/bin/bash", "command": ["-c", 'exec "$@"']}}
    assert vllm_bench_target(ctr)["prefix"] == ["docker", "exec", "-e", "OPENAI_API_KEY", "vllm-kimi", "vllm"]
    a3 = {"kind": "container", "api": {"base_url": "x"},
          "container": {"name": "vllm-ascend", "entrypoint": "vllm", "command": ["serve", "/home/cache/K"]}}
    assert vllm_bench_target(a3)["model"] == "/home/cache/K"
    sglang = {"kind": "systemd", "api": {"base_url": "x"}, "argv": ["/v/bin/python", "-m", "sglang.launch_server"]}
    assert vllm_bench_target(sglang) is None
    assert vllm_bench_target({"kind": "systemd", "api": None, "argv": ["vllm", "serve"]}) is None


def test_bench_tool_auto_picks_vllm_where_every_service_runs_it():
    from llmb.bench import bench_tool

    vllm = {"name": "llmb-vllm", "kind": "systemd", "api": {"base_url": "x"}, "argv": ["/v/bin/vllm", "serve", "/m"]}
    sg = {"name": "llmb-sglang", "kind": "systemd", "api": {"base_url": "x"}, "argv": ["/v/bin/python", "-m", "sglang"]}
    assert bench_tool([vllm]) == "vllm" and bench_tool([sg]) == "client" and bench_tool([]) == "client"
    assert bench_tool([vllm], "client") == "client"
    with pytest.raises(ValueError, match="bench_tool: vllm, but llmb-sglang does not run `vllm serve`"):
        bench_tool([sg], "vllm")
    with pytest.raises(ValueError, match="bench_tool is 'x'"):
        bench_tool([vllm], "x")
