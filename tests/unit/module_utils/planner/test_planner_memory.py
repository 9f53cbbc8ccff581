"""Memory fit (planner/memory.py) against the real logs of seed 003 and the recipes of seed 004."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from llmbctl.planner import memory, plan_inventory
from llmbctl.planner.model import PlanError
from planner_helpers import REPO, load_inventory, memory_fit

DATA = str(REPO / "data")
GIB = 1024**3

# seed 003 startup logs (vLLM, Kimi-K2-Thinking, one 8x H200 node, defaults)
SEED003_KV_GIB = 46.80
SEED003_TOKENS_TP8 = 715_072
SEED003_TOKENS_DCP8 = 5_721_088


def _plan(name: str, **overrides):
    hv, groups = load_inventory(name)
    for host in hv.values():
        host.update(overrides)
    return plan_inventory(hv, groups, DATA)


def _within(predicted: float, logged: float, pct: float = 10.0) -> bool:
    return abs(predicted - logged) <= logged * pct / 100


def test_bytes_per_token_is_576_x_61_x_2():
    bpt, layers, formula = memory.kv_per_token(
        {"kv_cache": {"kind": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_hidden_layers": 61}},
        None,
        1,
    )
    assert (bpt, layers) == (70_272, 61) and "(512 + 64) x 61 layers x 2 bytes" in formula
    fp8, _, _ = memory.kv_per_token(
        {"kv_cache": {"kind": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_hidden_layers": 61}},
        "fp8",
        2,
    )
    assert fp8 == 576 * 31 * 1  # PP 2: the rank with ceil(61 / 2) layers


def test_seed_003_tp8_matches_the_log():
    planned = _plan("h200", llmb_decode_context_parallel=1)
    fit = memory_fit(planned)
    kv_gib = fit.kv_available_bytes / GIB
    assert _within(kv_gib, SEED003_KV_GIB), kv_gib
    assert _within(fit.kv_tokens, SEED003_TOKENS_TP8), fit.kv_tokens
    assert fit.kv_bytes_per_token == 70_272 and fit.dcp == 1 and fit.max_model_len == 262_144
    note = [n for n in planned.notes if n.startswith("memory:")]
    assert note and f"{fit.kv_tokens:,} tokens per instance" in note[0]


def test_seed_003_tp8_dcp8_matches_the_log():
    fit = memory_fit(_plan("h200"))  # the sample inventory is seed 003's TP8 + DCP8
    assert _within(fit.kv_available_bytes / GIB, SEED003_KV_GIB)
    assert _within(fit.kv_tokens, SEED003_TOKENS_DCP8), fit.kv_tokens
    assert fit.dcp == 8
    # DCP multiplies the tokens, not the memory (the log's two runs show the same 46.80 GiB)
    tp8 = memory_fit(_plan("h200", llmb_decode_context_parallel=1))
    assert fit.kv_tokens == tp8.kv_tokens * 8


def test_the_headroom_is_what_seed_003_leaves():
    """The constant is the log's non-KV peak: budget - weights - logged KV, to within 0.5 GiB."""
    fit = memory_fit(_plan("h200", llmb_decode_context_parallel=1))
    measured = (fit.budget_bytes - fit.weights_bytes) / GIB - SEED003_KV_GIB
    assert abs(measured - memory.NON_KV_HEADROOM_GIB) < 0.5, measured


# vLLM 0.26.0 on 4x H200 (issue 23, docs/examples/serve-real-multinode/loadrate/): kimi-k2-wide, TP 4,
# --enforce-eager, max-model-len 4096, default 0.92: "Available KV cache memory" with each loader
WIDE_EAGER_KV_GIB = {"default": 117.74, "fastsafetensors": 117.24}


def test_without_cuda_graphs_the_headroom_is_what_the_real_eager_start_left():
    """--enforce-eager captures no CUDA graphs: the 4x H200 start left 3.17-3.67 GiB of non-KV peak, not 10."""
    planned = _plan("h200", llmb_model="kimi-k2-wide", llmb_platform="h200-x4", llmb_tensor_parallel=4,
                    llmb_decode_context_parallel=1, llmb_engine_version="0.26.0",
                    llmb_engine_args={"enforce-eager": True, "max-model-len": 4096})
    fit = memory_fit(planned)
    assert fit.headroom_gib == memory.EAGER_HEADROOM_GIB < memory.NON_KV_HEADROOM_GIB
    for logged in WIDE_EAGER_KV_GIB.values():
        assert abs(fit.kv_available_bytes / GIB - logged) < 0.5, (fit.kv_available_bytes / GIB, logged)
    note = next(n for n in planned.notes if n.startswith("memory:"))
    assert "activation headroom (no CUDA graphs) 3.5 GiB" in note
    graphs = memory_fit(_plan("h200", llmb_model="kimi-k2-wide", llmb_platform="h200-x4", llmb_tensor_parallel=4,
                              llmb_decode_context_parallel=1, llmb_engine_version="0.26.0",
                              llmb_engine_args={"max-model-len": 4096}))
    assert graphs.headroom_gib == memory.NON_KV_HEADROOM_GIB  # CUDA graphs on: the seed-003 calibration


SEED004_ONE_NODE = {
    "llmb_model": "kimi-k2-instruct",
    "llmb_decode_context_parallel": 1,
    "llmb_engine_args": {"max-model-len": 131072},
}


def test_seed_004_fp8_128k_on_one_h200_node_is_refused_with_the_arithmetic():
    with pytest.raises(PlanError) as err:
        _plan("h200", **SEED004_ONE_NODE)
    problems = [p for p in err.value.problems if p.check == "memory-fit"]
    assert len(problems) == 1, err.value.report()
    text = problems[0].message
    for term in (
        "140.4 GiB x 0.9 (--gpu-memory-utilization) = 126.36 GiB",
        "1,029.0 GB of weights / (TP 8 x PP 1 = 8 devices) = 128.6 GB per device (119.79 GiB)",
        "headroom 10.0 GiB",
        "(512 + 64) x 61 layers x 2 bytes = 70,272 bytes",
        "--max-model-len 131,072 needs 8.58 GiB",
    ):
        assert term in text, f"{term!r} not in {text!r}"
    assert "2 node(s) of 8" in problems[0].fix
    assert "no host was contacted" in err.value.report()


def test_seed_004_fp8_128k_on_two_h200_nodes_fits():
    # TP 16 over Ray (seed 004 "Tensor Parallelism")
    planned = _plan(
        "h200-sglang",
        llmb_engine="vllm",
        llmb_engine_version="0.19.1",
        llmb_engine_args={"max-model-len": 131072},
    )
    fit = memory_fit(planned)
    assert fit.fits and fit.kv_tokens >= 131_072
    assert math.isclose(fit.weights_bytes, 1029e9 / 16)
    # DP 16 + EP with --gpu-memory-utilization 0.85 (seed 004 "Data Parallelism + Expert Parallelism")
    planned = _plan(
        "h200-sglang",
        llmb_engine="vllm",
        llmb_engine_version="0.19.1",
        llmb_tensor_parallel=1,
        llmb_data_parallel=16,
        llmb_expert_parallel=True,
        llmb_engine_args={"gpu-memory-utilization": 0.85, "max-model-len": 131072},
    )
    fit = memory_fit(planned)
    assert fit.fits and fit.fraction == 0.85 and fit.weight_shards == 16


def test_fp8_kv_cache_halves_the_bytes_per_token():
    fit = memory_fit(_plan("h200", llmb_engine_args={"kv-cache-dtype": "fp8"}))
    assert fit.kv_bytes_per_token == 35_136


BASE = {
    "model_name": "kimi-k2-thinking",
    "engine": "vllm",
    "device_model": "NVIDIA H200",
    "device_gib": 143771 / 1024,
    "tp": 8,
    "pp": 1,
    "dp": 1,
    "dcp": 1,
    "expert_parallel": False,
}


def _model():
    from llmbctl.catalog import Catalog

    return Catalog(DATA).model("kimi-k2-thinking").raw


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "abc", 0, -0.5, 1.5, True, None, [0.9]])
def test_bad_memory_fraction_is_a_problem_not_a_crash(value):
    fit, problems, _ = memory.estimate(model=_model(), engine_args={"--gpu-memory-utilization": value}, **BASE)
    assert fit is None and len(problems) == 1
    p = problems[0]
    assert p.check == "memory-fit" and "(0, 1]" in p.message and "gpu-memory-utilization" in p.fix


@pytest.mark.parametrize("value", [float("nan"), "x", -1, 0])
def test_bad_max_model_len_falls_back_to_a_weights_only_check(value):
    fit, problems, notes = memory.estimate(model=_model(), engine_args={"--max-model-len": value}, **BASE)
    assert fit is None and not problems and "only the weights were checked" in notes[0]


def test_no_kv_fields_still_checks_the_weights():
    model = {k: v for k, v in _model().items() if k != "kv_cache"}
    base = dict(BASE, tp=2)
    _, problems, notes = memory.estimate(model=model, engine_args={}, **base)
    assert problems and "GB of weights" in problems[0].message and "no kv_cache" in notes[0]


@pytest.mark.parametrize(
    "kv",
    [
        {"kind": "mla", "kv_lora_rank": 0, "qk_rope_head_dim": 0, "num_hidden_layers": 61},
        {"kind": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_hidden_layers": -1},
        {"kind": "mla", "kv_lora_rank": "x", "qk_rope_head_dim": 64, "num_hidden_layers": 61},
        {"kind": "mha", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_hidden_layers": 61},
        "mla",
    ],
)
def test_bad_kv_fields_fall_back_to_a_weights_only_check(kv):
    model = dict(_model(), kv_cache=kv)
    fit, problems, notes = memory.estimate(model=model, engine_args={}, **BASE)
    assert fit is None and not problems and "only the weights were checked" in notes[0]


def test_sglang_and_trtllm_budgets():
    model = _model()
    sg, problems, _ = memory.estimate(
        model=model, engine_args={"--mem-fraction-static": 0.8}, **dict(BASE, engine="sglang")
    )
    assert not problems and sg.headroom_gib == 0
    assert math.isclose(sg.kv_available_bytes, sg.device_gib * GIB * 0.8 - sg.weights_bytes)
    trt, problems, _ = memory.estimate(model=model, engine_args={}, **dict(BASE, engine="trtllm"))
    assert not problems and trt.max_len_flag == "--max_seq_len"
    expected = (trt.device_gib * GIB - trt.weights_bytes - memory.NON_KV_HEADROOM_GIB * GIB) * 0.9
    assert math.isclose(trt.kv_available_bytes, expected)


def test_launch_plan_prints_the_predicted_kv_memory_and_tokens():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "launch-plan"), "-i", "inventories/h200"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    fit = memory_fit(_plan("h200"))
    line = [x for x in proc.stdout.splitlines() if x.startswith("note: memory:")]
    assert line, proc.stdout[-2000:]
    assert f"predicted KV cache {fit.kv_available_bytes / GIB:,.2f} GiB per device" in line[0]
    assert f"{fit.kv_tokens:,} tokens per instance" in line[0]


def test_seed_000_as_written_is_refused_even_without_the_headroom():
    # 256k on 8x H100 without DCP: 79.6 x 0.95 - 69.25 GiB of weights = 6.4 GiB < 17.16 GiB a sequence
    with pytest.raises(PlanError) as err:
        _plan("h100", llmb_decode_context_parallel=1)
    (problem,) = [p for p in err.value.problems if p.check == "memory-fit"]
    assert "--max-model-len 262,144 needs 17.16 GiB" in problem.message


def test_fitting_only_without_the_headroom_is_a_warning_with_every_term():
    # the h100 sample (seed 000 + DCP 8): the exact terms fit, the calibrated headroom does not
    planned = _plan("h100")
    (note,) = [n for n in planned.notes if n.startswith("memory:")]
    assert note.startswith("memory: WARNING kimi-k2-thinking fits only if the engine's non-KV peak")
    assert "under 4.27 GiB per device" in note and "needs 2.14 GiB per rank (split over DCP 8)" in note


def test_the_pinned_releases_default_memory_fraction_is_used():
    """vLLM 0.23.0 logs "--gpu-memory-utilization=0.9200" when none is given (lent H100,
    docs/examples/serve-real-h100/engine.log): the prediction takes the flag set's default."""
    from types import SimpleNamespace

    from llmbctl.catalog import Catalog

    platform = Catalog(DATA).platform("h100-x1")
    ctx = SimpleNamespace(model_name="kimi-k2-tiny", model=Catalog(DATA).model("kimi-k2-tiny").raw, engine="vllm",
                          platform=platform, v={}, notes=[],
                          flagset=SimpleNamespace(defaults={"--gpu-memory-utilization": 0.9},
                                                  flags={"--gpu-memory-utilization": {"default": 0.92}}))
    topo = SimpleNamespace(tp=1, pp=1, dp=1, dcp=1, devices_per_node=1)
    assert memory.check_fit(ctx, topo, {"--max-model-len": 4096}) == []
    assert "x 0.92 (--gpu-memory-utilization)" in ctx.notes[0]
    ctx.notes.clear()
    memory.check_fit(ctx, topo, {"--max-model-len": 4096, "--gpu-memory-utilization": 0.5})
    assert "x 0.5 (--gpu-memory-utilization)" in ctx.notes[0]

    # no parser default: the flag set's hand-kept default
    ctx.notes.clear()
    ctx.flagset = SimpleNamespace(defaults={"--gpu-memory-utilization": 0.8}, flags={})
    memory.check_fit(ctx, topo, {"--max-model-len": 4096})
    assert "x 0.8 (--gpu-memory-utilization)" in ctx.notes[0]


def test_vllm_0_23_0_prediction_uses_its_0_92():
    """The generated 0.23.0 flag set's parser default reaches the prediction; 0.19.1 keeps 0.9."""
    assert memory_fit(_plan("h200", llmb_engine_version="0.23.0")).fraction == 0.92
    assert memory_fit(_plan("h200", llmb_engine_version="0.19.1")).fraction == 0.9
    # a value the inventory or preset sets still wins (the h100 sample's preset: 0.95)
    assert memory_fit(_plan("h100", llmb_engine_version="0.23.0")).fraction == 0.95
