"""Calibration of the hybrid (KDA + MLA) memory fit against the one published vLLM log of a Kimi
hybrid model (issue #24 point 2).

Source: https://github.com/vllm-project/vllm/issues/28228 ("[Bug]: Kimi Linear KV cache size estimation
and usage not making sense", 2025-11-06). Facts taken from it:
  command: vllm serve cyankiwi/Kimi-Linear-48B-A3B-Instruct-AWQ-4bit --gpu-memory-utilization 0.95
           --max_model_len 120000 --tensor_parallel 2 --enable_prefix_caching --max_num_batched_tokens 64000
           --max-num-seqs 8 (2x RTX 3090, torch 2.9.0+cu128: the torch vLLM 0.11.1 pins)
  log:     "Available KV cache memory: 2.30 GiB"
           "Add 1 padding layers, may waste at most 5.00% KV cache memory"
           "GPU KV cache size: 75,840 tokens"
           "Maximum concurrency for 120,000 tokens per request: 2.48x"
The AWQ checkpoint quantizes the weights only: the MLA latent and the KDA states keep the profile's
16-bit and FP32 sizes. The issue's build (a 0.11.1 pre-release, by its date and torch) follows the
rules read from the vllm 0.11.1 wheel (memory.VLLM_HYBRID_RULES); 0.11.1 turns prefix caching off for a
model without Mamba prefix-caching support, so --enable_prefix_caching changes nothing here.

The log prints the available memory rounded to 0.01 GiB, so the prediction is checked over every value
that rounds to 2.30 GiB: the reported 75,840 tokens and the 1 padding layer hold over all of it; the
2.48x pins the true figure to 318 blocks (2.2950 to 2.2999 GiB), where 2.30 GiB itself gives 319 blocks
and 2.49x: one block, the log's own rounding.
"""

from __future__ import annotations

import math

from llmbctl.catalog import Catalog
from llmbctl.planner import memory
from planner_helpers import REPO

GIB = 1024**3
KL = Catalog(REPO / "data").model("kimi-linear-48b-a3b-instruct").raw
ISSUE = dict(tp=2, pp=1, dcp=1, max_model_len=120_000, kv_elem_bytes=2)


def _layout(available: float, release: str = "0.11.1") -> memory.HybridLayout:
    out = memory.vllm_hybrid_layout(KL, available=available, release=release, **ISSUE)
    assert isinstance(out, memory.HybridLayout), out
    return out


def test_the_published_log_is_reproduced_over_its_rounding():
    seen = {}
    step = GIB // 10_000
    for avail in range(math.ceil(2.295 * GIB), math.floor(2.305 * GIB), step):
        lay = _layout(avail)
        assert lay.reported_tokens == 75_840, (avail / GIB, lay.num_blocks)
        assert lay.padding_layers == 1
        assert f"{100 * lay.padding_layers / lay.kda_layers:.2f}%" == "5.00%"
        seen.setdefault(f"{lay.concurrency:.2f}x", set()).add(lay.num_blocks)
    # the logged 2.48x is 318 blocks; 319 (2.49x) is what 2.30 GiB itself gives
    assert seen == {"2.48x": {318}, "2.49x": {319}}
    assert f"{_layout(2.297 * GIB).concurrency:.2f}x" == "2.48x"
    assert _layout(2.30 * GIB).num_blocks == 319


def test_every_term_of_the_layout_by_hand():
    lay = _layout(2.297 * GIB)
    # one KDA layer's state per sequence at TP 2: 16 heads x 128 x 128 x 4 (FP32) + 3 x 16 x 128 x 3 x 2
    assert lay.state_page == 16 * 128 * 128 * 4 + 3 * 16 * 128 * 3 * 2 == 1_085_440
    # MLA: (512 + 64) x 2 bytes a token; the block is raised to 64 x ceil(1,085,440 / (64 x 1,152)) = 960
    assert (lay.attn_bytes_1_token, lay.align, lay.block_tokens) == (1_152, 64, 960)
    assert lay.page_bytes == 960 * 1_152 == 1_105_920
    assert f"{lay.state_padding_pct:.2f}" == "1.89"
    # 7 MLA and 20 KDA layers, groups of 7: 1 MLA + 3 KDA groups (21 slots: 1 padding layer)
    assert (lay.mla_layers, lay.kda_layers, lay.group_size, lay.mla_groups, lay.kda_groups) == (7, 20, 7, 1, 3)
    # 7 layers share a block: 7 x 1,105,920 = 7,741,440 bytes; 2.297 GiB / 7,741,440 = 318 blocks
    assert lay.block_bytes == 7_741_440 and lay.num_blocks == 318
    # reported (0.11.1): 318 // 4 groups x 960 = 75,840; concurrency 318 / (125 + 3) = 2.48
    assert lay.blocks_per_request == math.ceil(120_000 / 960) + 3 == 128
    assert lay.reported_tokens == 318 // 4 * 960
    # what the MLA layers really hold: every block but the null block and the 3 state blocks
    assert lay.attention_tokens == (318 - 1 - 3) * 960 == 301_440
    assert lay.full_sequences == 2
    # the start check of 0.11.1: each layer's own need, padding left out: (7 x 125 + 20 x 1) pages
    assert lay.needed_bytes == (7 * 125 + 20) * 1_105_920
    assert lay.fits


def test_newer_releases_report_concurrency_times_length():
    """vLLM 0.23.0 onward logs int(concurrency x max-model-len): on the issue's inputs 298,125 tokens,
    not 75,840; the blocks and the concurrency are the same."""
    old, new = _layout(2.297 * GIB), _layout(2.297 * GIB, "0.26.0")
    assert (new.num_blocks, new.blocks_per_request) == (old.num_blocks, old.blocks_per_request)
    assert new.reported_tokens == int(318 / 128 * 120_000) == 298_125
    assert new.needed_bytes == 7 * 1_105_920 * 128  # 0.19.1 onward: the groups' blocks, padding included
    # 0.32.0 onward aligns an MLA block to 128 tokens: 1,024 here
    assert _layout(2.297 * GIB, "0.33.0").block_tokens == 1_024


def test_rules_by_release():
    assert memory.vllm_hybrid_rules("0.11.1")["report"] == "blocks"
    assert memory.vllm_hybrid_rules("0.19.1")["check"] == "groups"
    assert memory.vllm_hybrid_rules("0.23.0")["report"] == "concurrency"
    assert memory.vllm_hybrid_rules("0.32.0")["align"] == 128
    assert memory.vllm_hybrid_rules(None) == memory.vllm_hybrid_rules("0.33.0")
    assert memory.vllm_hybrid_rules("0.11.1rc6.dev12")["report"] == "blocks"


def test_the_planner_prints_both_figures():
    """estimate() on the issue's shape (vLLM 0.11.1, TP 2, 120,000 tokens), the weights chosen so that
    2.297 GiB are left: the note names the logged figure and the MLA layers' room."""
    device, frac = 24.0, 0.95
    weights = device * GIB * frac - memory.NON_KV_HEADROOM_GIB * GIB - 2.297 * GIB
    model = {**KL, "total_size_bytes": weights * 2, "moe": None}
    fit, problems, notes = memory.estimate(
        model_name="kimi-linear", model=model, engine="vllm",
        engine_args={"--gpu-memory-utilization": frac, "--max-model-len": 120_000},
        device_model="RTX 3090", device_gib=device, tp=2, pp=1, dp=1, dcp=1, expert_parallel=False,
        engine_version="0.11.1")
    assert not problems and fit is not None and fit.fits
    assert fit.kv_tokens == 75_840 and fit.hybrid.attention_tokens == 301_440
    assert "75,840 tokens per instance as vLLM logs it (GPU KV cache size), room for 301,440" in notes[0]
    for term in ("318 blocks // 4 groups x 960 = 75,840", "318 / 128 = 2.48x", "1 padding layer",
                 "attention block 960 tokens"):
        assert term in notes[0], term


def test_a_length_vllm_refuses_is_refused():
    """The issue's memory with a 1M context: 7 x 1,093 + 20 pages = 8.4 GiB > 2.30 GiB."""
    lay = _layout(2.297 * GIB)
    long = memory.vllm_hybrid_layout(KL, available=2.297 * GIB, release="0.11.1",
                                     **{**ISSUE, "max_model_len": 1_048_576})
    assert not long.fits and long.needed_bytes == (7 * 1_093 + 20) * lay.page_bytes


def test_layout_refuses_what_it_cannot_compute():
    """A TP that does not divide the KDA heads, a model without KDA layers, a profile lacking a number:
    a reason, never a traceback (estimate() then keeps the simple form)."""
    kw = dict(available=GIB, max_model_len=1_000, kv_elem_bytes=2, release="0.26.0", pp=1, dcp=1)
    assert isinstance(memory.vllm_hybrid_layout(KL, tp=3, **kw), str)
    assert memory.vllm_hybrid_layout({"kv_cache": {"kind": "mla"}}, tp=1, **kw) == "not a hybrid model"
    broken = {**KL, "kv_cache": {**KL["kv_cache"], "linear": {"kind": "kda", "num_heads": "x"}}}
    assert "lacks a number" in memory.vllm_hybrid_layout(broken, tp=1, **kw)
    # no memory: no blocks, and vLLM would not start
    assert not memory.vllm_hybrid_layout(KL, tp=2, **{**kw, "available": -GIB}).fits
