"""The mi355x-8 platform profile (data/platforms/mi355x-8.yml) and its vLLM ROCm plan from seed 003
("AMD GPU Support": MI300X, MI325X and MI355X share one docker run and one vllm serve command)."""

from __future__ import annotations

import sys
from pathlib import Path

from planner_helpers import assert_container_matches, flagset_of, parse_docker_run, recipe_tokens, service
from test_planner_golden import (
    SEED_003_ROCM_DOCKER,
    SEED_003_ROCM_ENV,
    SEED_003_ROCM_SERVE,
    assert_serve_flags,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hw"))

import hwsynth  # noqa: E402
from llmbctl.hw.facts import build_facts  # noqa: E402
from llmbctl.verify import load_profile, summarize, verify  # noqa: E402


def test_mi355x_plan_is_seed_003s_amd_command(planned, data):
    (host,) = planned("mi355x").to_list()
    svc = service(host, "Kimi-K2-Thinking")
    assert_container_matches(svc, parse_docker_run(SEED_003_ROCM_DOCKER, {}), image_repo="vllm/vllm-openai-rocm")
    for key, value in SEED_003_ROCM_ENV.items():
        assert svc["env"][key] == value
    model = "/work/data/models/Kimi-K2-Thinking"
    fs = flagset_of(data, "vllm", "0.19.1")
    assert_serve_flags(
        fs, svc["argv"], recipe_tokens(SEED_003_ROCM_SERVE, {"moonshotai/Kimi-K2-Thinking": model}), 2, model
    )


def test_mi355x_profile_takes_an_mi355x_node_and_refuses_an_mi325x():
    profile = load_profile("mi355x-8")
    assert profile["vendor"] == "amd" and profile["devices"]["count"] == 8
    good = build_facts(hwsynth.amd(model="AMD Instinct MI355X", vram=294912, driver="6.14.14"))
    r = summarize("node1", profile, verify(good, profile), good)
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    assert sum(c["id"].startswith("interconnect.") for c in r["checks"]) == 28  # XGMI full mesh of 8
    wrong = build_facts(hwsynth.amd(model="AMD Instinct MI325X", vram=262128, driver="6.14.14"))
    bad = {c["id"] for c in summarize("node1", profile, verify(wrong, profile), wrong)["checks"] if not c["ok"]}
    assert any(i.startswith("device") for i in bad), bad
    old = build_facts(hwsynth.amd(model="AMD Instinct MI355X", vram=294912, driver="6.10.5"))
    bad = {c["id"] for c in summarize("node1", profile, verify(old, profile), old)["checks"] if not c["ok"]}
    assert any("driver" in i for i in bad), bad
