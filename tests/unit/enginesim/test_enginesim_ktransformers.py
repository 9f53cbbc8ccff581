"""KTransformers through the double: the plan of inventories/ktransformers (seed 004's command, with and
without the AMX rules) run as a real process, smoke-tested as the serve stage does (llmb.smoke)."""

from __future__ import annotations

import sys

import pytest
from enginesim_helpers import PYTHON, REPO, Proc, free_port, make_model, run, sim_env, wait_port
from llmb.smoke import run_smoke
from llmbctl.planner import plan_inventory

sys.path.insert(0, str(REPO / "tests" / "unit" / "module_utils" / "planner"))
from planner_helpers import load_inventory  # noqa: E402


def planned_argv(model_dir, port: int, amx: bool) -> list[str]:
    hv, groups = load_inventory("ktransformers")
    for vars_ in hv.values():
        vars_.update(llmb_model_dir=str(model_dir), llmb_api_port=port, llmb_api_host="127.0.0.1", ansible_host="127.0.0.1",
                     llmb_cpu_amx=amx)
    (host,) = plan_inventory(hv, groups, str(REPO / "data")).to_list()
    (svc,) = host["services"]
    assert svc["argv"][1:3] == ["-m", "ktransformers.server.main"]
    return [PYTHON, *svc["argv"][1:]], svc["api"]


def env_for(tmp_path):
    return sim_env(tmp_path / "s", PYTHONPATH=str(REPO / "tests" / "enginesim"))


@pytest.mark.parametrize("amx", [False, True])
def test_plan_serves_and_passes_the_smoke_test(tmp_path, amx):
    model = make_model(tmp_path / "K2")
    (model / "Kimi-K2-Instruct-Q4_K_M-00001-of-00002.gguf").write_bytes(b"GGUF")
    port = free_port()
    argv, api = planned_argv(model, port, amx)
    assert ("--optimize_config_path" in argv) is amx
    with Proc(argv, env_for(tmp_path), tmp_path / "kt.log") as proc:
        wait_port(port)
        checks = run_smoke(api["base_url"], api["served_model_name"], api["reasoning"], api["tool_calls"],
                           timeout=20)
        assert checks and all(c["ok"] for c in checks), (checks, proc.output())


def test_gguf_folder_without_gguf_files_is_refused(tmp_path):
    model = make_model(tmp_path / "K2")  # configuration files only: the GGUF files are missing
    argv, _ = planned_argv(model, free_port(), False)
    res = run(argv, env_for(tmp_path))
    assert res.returncode != 0 and "no .gguf file" in res.stdout + res.stderr
