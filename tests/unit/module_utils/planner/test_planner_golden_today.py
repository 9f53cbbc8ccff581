"""Golden tests of the samples of today's models and engines (issue #24 point 6): each sample's plan holds
every flag of the published recipe it reproduces (compared through the pinned flag set, as
test_planner_golden.py does for the seeds), and the memory fit the issue asks for."""

from __future__ import annotations

from planner_helpers import (
    assert_recipe_flags,
    by_host,
    canonical_pairs,
    only_service,
    recipe_tokens,
    service,
)

# ---------------------------------------------------------------------------- Kimi-K2.6, SGLang 0.5.23
# sgl-cookbook docs/autoregressive/Moonshotai/Kimi-K2.6.md @ 3627bcb4029672af20501e03b3382c3f2ef91759,
# "3.2 Configuration Tips": H200 (8x, TP=8); "DP Attention: Enable with --dp <N> --enable-dp-attention
# ... set --dp equal to --tp"; "--reasoning-parser kimi_k2"; "--tool-call-parser kimi_k2"; "Use
# --context-length 128000 to conserve memory". DeepEP: SGLang 0.5.23's --moe-a2a-backend deepep
# (RECIPES-NOW: the former --enable-deepep-moe). The cookbook's generator assembles the command from
# these; the words are the tips'.
COOKBOOK_K26_SGLANG = (
    "python -m sglang.launch_server --model-path $MODEL_PATH --tp 8 --dp 8 --enable-dp-attention "
    "--trust-remote-code --reasoning-parser kimi_k2 --tool-call-parser kimi_k2 --context-length 128000 "
    "--moe-a2a-backend deepep"
)


def test_h200_k26_sglang_dp_attention_deepep(planned):
    plan, svc = _sglang_launch(planned("h200-k26-sglang"), "llmb-sglang", "sglang-0.5.23", COOKBOOK_K26_SGLANG,
                               {"$MODEL_PATH": "/data/models/Kimi-K2.6"})
    # the vision model gets an image in the smoke test; the memory fit holds the replicated part per
    # DP attention rank (23.5 GB: attention, shared experts, embeddings in BF16) beside the experts / 8
    assert svc["api"]["vision"] is True and svc["api"]["reasoning"] and svc["api"]["tool_calls"]
    note = next(n for n in plan.notes if n.startswith("memory:"))
    assert "replicated 23.5 GB / (TP 8 / DP 8 attention x PP 1) + experts 570.8 GB / (TP 8 x PP 1)" in note


def _sglang_launch(plan, service: str, venv: str, recipe: str, subst: dict[str, str]):
    """The plan's one service of that name, an SGLang server run from the venv's python, against the recipe."""
    svc = only_service(plan, service)
    assert svc["argv"][:3] == [f"/opt/llmb/venvs/{venv}/bin/python", "-m", "sglang.launch_server"]
    _assert_recipe(plan, svc, recipe, subst, start=3)
    return plan, svc


def _argv(svc: dict) -> list[str]:
    return svc["argv"] if svc["kind"] != "container" else [svc["container"]["entrypoint"], *svc["container"]["command"]]


def _argv_pairs(plan, svc: dict, start: int = 2):
    return canonical_pairs(plan.ctx.flagset, _argv(svc)[start:])


def _assert_recipe(plan, svc: dict, recipe: str, subst: dict[str, str], start: int = 2) -> None:
    recipe_argv = recipe_tokens(recipe, subst)[start:]
    want_pos, got_pos = assert_recipe_flags(plan.ctx.flagset, recipe_argv, _argv(svc)[start:])
    assert want_pos == got_pos[: len(want_pos)], (want_pos, got_pos)


# ---------------------------------------------------------------------------- Kimi-K2.6, vLLM
# vllm-project/recipes models/moonshotai/Kimi-K2.6.yaml @ 0cc5912132da861b14459312dca425079300fbd7: 8x H200
# verified (INT4 "fits 8xH200"), base_args --trust-remote-code, features tool_calling, reasoning and
# encoder_parallel; the guide's command (its MI300X section, the same flags):
RECIPE_K26_VLLM = (
    "vllm serve $MODEL --host 0.0.0.0 --port 8000 --trust-remote-code --tensor-parallel-size 8 "
    "--tool-call-parser kimi_k2 --enable-auto-tool-choice --reasoning-parser kimi_k2 --mm-encoder-tp-mode data"
)


def test_h200_k26_vllm_recipe(planned):
    plan = planned("h200-k26")
    svc = only_service(plan, "llmb-vllm")
    assert svc["argv"][0] == f"/opt/llmb/venvs/vllm-{plan.ctx.version}/bin/vllm"
    _assert_recipe(plan, svc, RECIPE_K26_VLLM, {"$MODEL": "/data/models/Kimi-K2.6"})
    assert svc["api"]["vision"] is True
    note = next(n for n in plan.notes if n.startswith("memory:"))
    assert "vision tower 0.94 GB (whole on every rank: --mm-encoder-tp-mode data) = 75.2 GB per device" in note


# ---------------------------------------------------------------------------- Kimi-K3, vLLM, 2x8 H200
# vllm-project/recipes models/moonshotai/Kimi-K3.yaml @ 02c27aa9b80630ec61a61060f246bff6a460fd85: base_args,
# the hopper override (args and env), features tool_calling and reasoning; strategy multi_node_tp: vLLM's
# own launch, TP over both nodes (--nnodes --node-rank --master-addr, --headless on the second)
RECIPE_K3_HOPPER = (
    "vllm serve $MODEL --trust-remote-code --load-format fastsafetensors --gpu-memory-utilization 0.97 "
    "--max-num-seqs 8 --max-cudagraph-capture-size 8 --max-model-len 32768 --moe-backend marlin "
    "--disable-custom-all-reduce --enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3 "
    "--tensor-parallel-size 16 --nnodes 2 --node-rank {rank} --master-addr $HEAD"
)
K3_HOPPER_ENV = {"VLLM_ALLREDUCE_USE_FLASHINFER": "1", "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
                 "VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_USE_RUST_FRONTEND": "1"}


def test_h200_2x8_k3_vllm_native_multinode_recipe(planned):
    plan = planned("h200-2x8-k3")
    hosts = by_host(plan)
    subst = {"$MODEL": "/data/models/Kimi-K3", "$HEAD": "192.168.101.11"}
    for rank, name in enumerate(("gpu-h200-01", "gpu-h200-02")):
        svc = service(hosts[name], "llmb-vllm")
        _assert_recipe(plan, svc, RECIPE_K3_HOPPER.format(rank=rank), subst)
        assert {k: svc["env"].get(k) for k in K3_HOPPER_ENV} == K3_HOPPER_ENV
        assert ("--headless" in svc["argv"]) == (rank == 1)
    fit_note = next(n for n in plan.notes if n.startswith("memory:"))
    assert "1,599.1 GB of text-model weights / (TP 16 x PP 1 = 16 devices)" in fit_note
    assert "69 KDA layers x (96 heads / TP 16" in fit_note


# ---------------------------------------------------------------------------- Kimi-K3, vLLM ROCm, 8x MI355X
# the same recipe's amd override (args, env) and docker_image.amd
RECIPE_K3_AMD = (
    "vllm serve $MODEL --trust-remote-code --moe-backend auto --load-format auto --gpu-memory-utilization 0.95 "
    "--mm-encoder-tp-mode data --max-num-seqs 128 --reasoning-parser kimi_k3 --max-num-batched-tokens 4096 "
    "--enable-auto-tool-choice --tool-call-parser kimi_k3 --tensor-parallel-size 8"
)
K3_AMD_ENV = {"VLLM_ROCM_USE_AITER": "1", "SAFETENSORS_FAST_GPU": "1", "AITER_SITUV2_A8W4": "1",
              "AITER_BF16_FP8_MOE_BOUND": "0", "VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}


def test_mi355x_k3_rocm_recipe(planned):
    plan = planned("mi355x-k3")
    svc = only_service(plan, "llmb-vllm")
    assert svc["kind"] == "container" and svc["image"] == "vllm/vllm-openai-rocm:kimi-k3"
    _assert_recipe(plan, svc, RECIPE_K3_AMD, {"$MODEL": "/data/models/Kimi-K3"}, start=2)
    assert {k: svc["env"].get(k) for k in K3_AMD_ENV} == K3_AMD_ENV
    assert svc["api"]["vision"] is True and svc["api"]["tool_calls"]


# ---------------------------------------------------------------------------- Kimi-K2.6 W4A8, vllm-ascend, A3
# vllm-project/vllm-ascend docs, Kimi-K2.6 tutorial 5.1 (single node, one Atlas 800 A3): the serve command
# without --port / --served-model-name (the inventory's), --allowed-local-media-path / (lets clients read
# the node's files), --profiler-config (a profiling run) and the DFlash --speculative-config
TUTORIAL_K26_A3 = (
    "vllm serve $MODEL --quantization ascend --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 "
    "--trust-remote-code --tensor-parallel-size 4 --data-parallel-size 4 --no-enable-prefix-caching "
    "--enable-expert-parallel --max-num-seqs 4 --max-model-len 34816 --max-num-batched-tokens 16384 "
    "--gpu-memory-utilization 0.87 --seed 42 --async-scheduling "
    "--compilation-config '{\"cudagraph_mode\":\"FULL_DECODE_ONLY\"}' --mm-processor-cache-gb 0 "
    "--mm-encoder-tp-mode data --additional-config '{\"enable_balance_scheduling\": true}'"
)
K26_A3_ENV = {"HCCL_OP_EXPANSION_MODE": "AIV", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
              "OMP_PROC_BIND": "false", "OMP_NUM_THREADS": "1", "TASK_QUEUE_ENABLE": "1",
              "VLLM_ASCEND_ENABLE_MLAPO": "1", "HCCL_BUFFSIZE": "600", "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1",
              "VLLM_ASCEND_BALANCE_SCHEDULING": "0"}


def test_a3_k26_w4a8_tutorial(planned):
    plan = planned("a3-k26-w4a8")
    (host,) = plan.to_list()
    svc = next(s for s in host["services"] if s.get("api"))
    assert plan.ctx.model["repo_id"] == "Eco-Tech/Kimi-K2.6-W4A8"
    _assert_recipe(plan, svc, TUTORIAL_K26_A3, {"$MODEL": "/root/.cache/Kimi-K2.6-W4A8"}, start=2)
    assert {k: svc["env"].get(k) for k in K26_A3_ENV} == K26_A3_ENV
    assert "/root/.cache:/root/.cache" in svc["mounts"]


# ---------------------------------------------------------------------------- Kimi-K2-Thinking, KTransformers 0.7.2
# kvcache-ai/ktransformers doc/en/kt-kernel/Kimi-K2-Thinking-Native.md @ 15c624dcaeabddcf4cba83756737d9df22a6adf1:
# "Launch Command (2x RTX 4090 Example)" with the "Recommended Parameters" row for 8 GPUs and the "Advance
# Use Case" parsers; without --host / --port / --served-model-name (the inventory's) and
# --tensor-parallel-size 2 (the planner takes the node's 8 GPUs: --tp-size 8)
TUTORIAL_KT_K2_THINKING = (
    "python -m sglang.launch_server --model $MODEL --kt-weight-path $MODEL --kt-cpuinfer 96 --kt-threadpool-count 2 "
    "--kt-num-gpu-experts 80 --kt-method RAWINT4 --kt-gpu-prefill-token-threshold 400 "
    "--kt-max-deferred-experts-per-token 1 --trust-remote-code --mem-fraction-static 0.94 --enable-mixed-chunk "
    "--enable-p2p-check --disable-shared-experts-fusion --chunked-prefill-size 65536 --max-total-tokens 100000 "
    "--attention-backend flashinfer --tool-call-parser kimi_k2 --reasoning-parser kimi_k2"
)


def test_ktransformers_072_k2_thinking_tutorial(planned):
    plan, svc = _sglang_launch(planned("ktransformers-072"), "llmb-ktransformers", "ktransformers-0.7.2",
                               TUTORIAL_KT_K2_THINKING, {"$MODEL": "/data/models/Kimi-K2-Thinking"})
    got = dict(_argv_pairs(plan, svc, 3)[0])
    assert got["--tp-size"] == 8
    assert svc["api"]["reasoning"] and svc["api"]["tool_calls"] and "vision" not in svc["api"]
