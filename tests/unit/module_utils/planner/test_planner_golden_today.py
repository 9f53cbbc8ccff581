"""Golden tests of the samples of today's models and engines (issue #24 point 6): each sample's plan holds
every flag of the published recipe it reproduces (compared through the pinned flag set, as
test_planner_golden.py does for the seeds), and the memory fit the issue asks for."""

from __future__ import annotations

from planner_helpers import canonical_pairs, flagset_of, recipe_tokens, service


def by_host(plan) -> dict[str, dict]:
    return {h["host"]: h for h in plan.to_list()}


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


def test_h200_k26_sglang_dp_attention_deepep(planned, data):
    plan = planned("h200-k26-sglang")
    (host,) = plan.to_list()
    svc = service(host, "llmb-sglang")
    fs = flagset_of(data, "sglang", "0.5.23")
    assert svc["argv"][:3] == ["/opt/llmb/venvs/sglang-0.5.23/bin/python", "-m", "sglang.launch_server"]
    recipe = recipe_tokens(COOKBOOK_K26_SGLANG, {"$MODEL_PATH": "/data/models/Kimi-K2.6"})
    want, _ = canonical_pairs(fs, recipe[3:])
    got, _ = canonical_pairs(fs, svc["argv"][3:])
    assert not [p for p in want if p not in got], (want, got)
    # the vision model gets an image in the smoke test; the memory fit holds the replicated part per
    # DP attention rank (23.5 GB: attention, shared experts, embeddings in BF16) beside the experts / 8
    assert svc["api"]["vision"] is True and svc["api"]["reasoning"] and svc["api"]["tool_calls"]
    note = next(n for n in plan.notes if n.startswith("memory:"))
    assert "replicated 23.5 GB / (TP 8 / DP 8 attention x PP 1) + experts 570.8 GB / (TP 8 x PP 1)" in note
