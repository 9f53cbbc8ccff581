"""Memory fit: what the engine allocates on each device, predicted before any host is contacted.

The model follows vLLM's own start-up arithmetic (gpu_worker.determine_available_memory and
kv_cache_utils): of each device's memory, the engine may use ``memory x gpu-memory-utilization``;
the weights it loads and its non-KV peak (activations of the profiling run, sampler, NCCL and
cuBLAS workspaces, CUDA graphs) come off that, and the rest is the KV cache::

    available KV = memory x fraction - weights per device - non-KV headroom

Weights per device: TP x PP split every layer. Under vLLM's expert parallelism (DP > 1) and SGLang's
DP attention the routed experts are split over all ranks while the rest (attention, shared expert,
dense MLP, embeddings, lm_head; BF16 in the INT4 checkpoints) is held whole by every DP rank (TP / DP
attention group); the profile's ``moe`` and ``quantization`` facts (config.json) give the expert bytes,
the rest of total_size_bytes is the replicated part (``weights_per_device``).

For MLA models (Kimi-K2, DeepSeek-V3) every layer caches one latent per token, the same on every
TP rank (the latent is not split by TP), so per rank and per token::

    KV bytes per token = (kv_lora_rank + qk_rope_head_dim) x layers on the rank x bytes per element
                       = (512 + 64) x 61 x 2 = 70,272 bytes for Kimi-K2 in BF16

    KV tokens per instance = floor(available / (bytes per token x block)) x block x DCP

Hybrid models (Kimi-K3, Kimi-Linear: kv_cache.kind hybrid) cache the MLA latent only in their
full-attention layers; each Kimi Delta Attention layer holds a state of constant size per sequence
(``linear_state``). Under vLLM the cache is laid out as the release does it (``vllm_hybrid_layout``:
the attention block raised until its page holds a KDA state, layers grouped with padding layers, a
state block per KDA group and request, the release's own "GPU KV cache size" and start check),
calibrated on the published Kimi Linear log of vllm-project/vllm#28228; other engines subtract one
sequence's state before the tokens are counted. A vision tower (the profile's
``modality``) is part of total_size_bytes and placed on its own (``vision_share``).

Decode context parallel stores each token on one of DCP ranks, so the same memory holds DCP times
as many tokens (vLLM logs "Multiplying the GPU KV cache size by the dcp_world_size"). The engine
refuses to start when one sequence of max-model-len does not fit; so does the planner when that
holds without the headroom (weights, budget and KV are exact). When only the calibrated headroom
tips it over, the planner warns with every term instead (the non-KV peak is an estimate).

Non-KV headroom: NON_KV_HEADROOM_GIB, calibrated on seed 003 (Kimi-K2-Thinking, TP8, one
8x H200 node, vLLM defaults: gpu-memory-utilization 0.9, max-model-len 262144). The log says
"Available KV cache memory: 46.80 GiB": 140.4 GiB x 0.9 - 554 GiB / 8 - 46.80 = 10.31 GiB of non-KV
peak; the constant is 10 GiB (prediction 47.1 GiB, +0.7%). See docs/launch-plan.md "Memory fit".

SGLang's --mem-fraction-static covers weights and the KV pool only (activations and CUDA graphs
live in the remaining 1 - fraction), so no headroom is subtracted there. TensorRT-LLM gives the KV
cache --kv_cache_free_gpu_memory_fraction of what is free after the weights and the headroom.
Stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..catalog import version_key
from ..engines.registry import engine_caps
from .model import Problem

GIB = 1024**3

# Non-KV peak per device (activations, sampler, NCCL/cuBLAS workspaces, CUDA graphs), in GiB:
# calibrated on seed 003's TP8 log (10.31 GiB measured), see the module docstring.
NON_KV_HEADROOM_GIB = 10.0
# The same without CUDA graphs (vLLM's --enforce-eager), calibrated on kimi-k2-wide (Kimi-K2's widths, hidden
# 7168), vLLM 0.26.0, TP 4 on 4x H200, gpu-memory-utilization 0.92, max-model-len 4096: "Available KV cache
# memory: 117.74 GiB" after "Model loading took 8.26 GiB": 140.4 GiB x 0.92 - 8.26 - 117.74 = 3.17 GiB of
# non-KV peak; 3.67 GiB with --load-format fastsafetensors (117.24 GiB); the constant 3.5 GiB predicts
# 117.49 (docs/examples/serve-real-multinode/loadrate/). The 10 GiB predicted 110.99 GiB there, 6.8 short.
EAGER_HEADROOM_GIB = 3.5
EAGER_FLAG = "--enforce-eager"

KV_DTYPE_BYTES = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
}
# tokens per KV block (vLLM's FlashMLA block on NVIDIA; the others are rounded the same way)
KV_BLOCK_TOKENS = 64


@dataclass
class MemoryFit:
    """The predicted memory of one engine instance (every figure per device unless named)."""

    device_model: str
    device_gib: float
    fraction_flag: str
    fraction: float
    total_bytes: float
    weights_bytes: float
    weight_shards: int
    weight_split: str
    headroom_gib: float
    kv_available_bytes: float
    kv_bytes_per_token: int
    kv_formula: str
    layers_per_rank: int
    dcp: int
    max_model_len: int
    max_len_flag: str
    kv_tokens: int  # per instance (DCP already multiplied in)
    engine: str
    memory_model: str  # what the fraction covers (capabilities.EngineCaps.memory_model)
    # linear-attention (KDA) state one sequence holds on a rank, whatever its length (hybrid models)
    state_bytes: int = 0
    state_formula: str = ""
    # the vision tower's share of weights_bytes on a device, and how it is placed
    vision_bytes: float = 0.0
    vision_how: str = ""
    vision_total: float = 0.0  # the vision tower's bytes in total_size_bytes
    # vLLM's layout of a hybrid model's cache (blocks, groups, padding, its reported figures)
    hybrid: HybridLayout | None = None

    @property
    def budget_bytes(self) -> float:
        return self.device_gib * GIB * self.fraction

    @property
    def sequence_bytes(self) -> float:
        """KV bytes one max-model-len sequence takes on one rank (DCP splits it), with its
        linear-attention state on hybrid models; under vLLM's hybrid cache, what the engine checks
        before it starts (HybridLayout.needed_bytes)."""
        if self.hybrid is not None:
            return self.hybrid.needed_bytes
        return math.ceil(self.max_model_len / self.dcp) * self.kv_bytes_per_token + self.state_bytes

    @property
    def fits(self) -> bool:
        if self.hybrid is not None:
            return self.kv_available_bytes > 0 and self.hybrid.fits
        return self.kv_available_bytes > 0 and self.kv_tokens >= self.max_model_len

    def arithmetic(self) -> str:
        """Every term of the prediction, as one line of text."""
        w = self.weights_bytes
        shown = self.total_bytes - self.vision_total
        label = "text-model weights" if self.vision_total else "weights"
        weights = (
            f"{shown / 1e9:,.1f} GB of {label}: {self.weight_split}"
            if self.weight_split.startswith("replicated")
            else f"{shown / 1e9:,.1f} GB of {label} / ({self.weight_split} = {self.weight_shards} devices)"
        )
        if self.vision_total:
            weights += (f" + vision tower {self.vision_bytes / 1e9:,.2f} GB ({self.vision_how})" if self.vision_bytes
                        else f" + vision tower 0 ({self.vision_how})")
        weights += f" = {w / 1e9:,.1f} GB per device ({_gib(w)})"
        frac = f"{self.fraction:g} ({self.fraction_flag})"
        if self.memory_model == "free":
            avail = (
                f"({self.device_gib:.1f} GiB - {weights} - headroom {self.headroom_gib:.1f} GiB) x {frac}"
                f" = KV {_gib(self.kv_available_bytes)}"
            )
        else:
            what = "activation headroom (no CUDA graphs)" if self.headroom_gib == EAGER_HEADROOM_GIB else \
                "activation/CUDA-graph headroom"
            head = f" - {what} {self.headroom_gib:.1f} GiB" if self.headroom_gib else ""
            avail = (
                f"{self.device_gib:.1f} GiB x {frac} = {_gib(self.budget_bytes)} - {weights}{head}"
                f" = KV {_gib(self.kv_available_bytes)}"
            )
        dcp = f" x DCP {self.dcp}" if self.dcp > 1 else ""
        state = f" (after one sequence's linear-attention state {_gib(self.state_bytes)})" if self.state_bytes else ""
        if self.hybrid is not None:
            count = self.hybrid.text()
        elif self.kv_available_bytes > 0:
            left = _gib(self.kv_available_bytes - self.state_bytes) if self.state_bytes else _gib(self.kv_available_bytes)
            count = f"{left}{state} / {self.kv_bytes_per_token:,}{dcp} = {self.kv_tokens:,}"
        else:
            count = "no memory left: 0"
        tokens = (
            f"KV per token per rank {self.kv_formula} = {self.kv_bytes_per_token:,} bytes; "
            + (f"linear-attention state per sequence per rank {self.state_formula} = {self.state_bytes:,} bytes; "
               if self.state_bytes else "")
            + (f"{count}" if self.hybrid is not None else f"{count} tokens per instance")
        )
        seq = (
            f"one sequence of {self.max_len_flag} {self.max_model_len:,} needs "
            f"{_gib(self.sequence_bytes)} per rank"
            + (f" (split over DCP {self.dcp})" if self.dcp > 1 else "")
            + (" (vLLM's own check, above)" if self.hybrid is not None else
               f" with its state; {self.concurrent_full:,} such sequences fit at once" if self.state_bytes else "")
        )
        return f"per {self.device_model}: {avail}; {tokens}; {seq}"

    @property
    def concurrent_full(self) -> int:
        """Sequences of max-model-len that fit at once (hybrid models: each holds its own state)."""
        if self.hybrid is not None:
            return self.hybrid.full_sequences
        return max(int(self.kv_available_bytes // self.sequence_bytes), 0) if self.sequence_bytes else 0

    def note(self) -> str:
        tokens = (
            f"{self.kv_tokens:,} tokens per instance as vLLM logs it (GPU KV cache size), room for "
            f"{self.hybrid.attention_tokens:,} in the MLA layers"
            if self.hybrid is not None and self.hybrid.attention_tokens != self.kv_tokens
            else f"{self.kv_tokens:,} tokens per instance"
        )
        return (
            f"memory: predicted KV cache {_gib(self.kv_available_bytes)} per device, "
            f"{tokens} ({self.max_len_flag} {self.max_model_len:,}); "
            + self.arithmetic()
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kv_available_gib": round(self.kv_available_bytes / GIB, 2),
            "kv_tokens_per_instance": self.kv_tokens,
            "kv_bytes_per_token_per_rank": self.kv_bytes_per_token,
            "weights_per_device_gib": round(self.weights_bytes / GIB, 2),
            "budget_gib": round(self.budget_bytes / GIB, 2),
            "headroom_gib": self.headroom_gib,
            "max_model_len": self.max_model_len,
            "dcp": self.dcp,
        }


def _gib(n: float) -> str:
    if abs(n) < GIB / 10 and n != 0:
        return f"{n / 1024**2:,.1f} MiB"
    return f"{n / GIB:,.2f} GiB"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _caps(engine: str) -> Any:
    """The engine's capabilities record (engines/<engine>.py CAPS): the one place that says which
    flags cap memory and sequence length and what the memory fraction covers."""
    return engine_caps(engine)


# bytes on disk per parameter of a quantized tensor: the packed values plus one scale per group
# (compressed-tensors pack-quantized W4A16: int4 packed in int32 + a BF16 scale per group_size;
# block FP8: one FP32 scale per block of 128 x 128)
def _bytes_per_param(q: dict[str, Any]) -> float | None:
    bits = _number(q.get("bits"))
    if bits is None or bits <= 0:
        return None
    group = _number(q.get("group_size")) or 0
    scale = _number(q.get("scale_bytes")) or 0
    return bits / 8 + (scale / group if group > 0 else 0)


def expert_bytes(model: dict[str, Any]) -> tuple[float, str] | None:
    """(bytes of the routed experts on disk, formula), from the profile's ``moe`` facts (config.json)
    and ``quantization.experts`` (config.json's quantization_config); None when the profile lacks
    them. Everything else (attention, shared expert, dense MLP, embeddings, lm_head) is the rest of
    total_size_bytes: what every rank holds whole under expert parallelism."""
    moe, quant = model.get("moe"), model.get("quantization")
    if not isinstance(moe, dict) or not isinstance(quant, dict) or not isinstance(quant.get("experts"), dict):
        return None
    try:
        experts, layers = int(moe["n_routed_experts"]), int(moe["moe_layers"])
        hidden, inter = int(moe["hidden_size"]), int(moe["moe_intermediate_size"])
    except (KeyError, TypeError, ValueError):
        return None
    bpp = _bytes_per_param(quant["experts"])
    if bpp is None or min(experts, layers, hidden, inter) < 1:
        return None
    params = experts * layers * 3 * hidden * inter  # gate, up and down projection of each expert
    text = (
        f"experts {experts} x {layers} MoE layers x 3 x {hidden} x {inter} = {params / 1e9:,.1f}B params "
        f"x {bpp:g} bytes ({quant['experts'].get('dtype', '?')})"
    )
    return params * bpp, text


def weights_per_device(
    total_bytes: float, engine: str, tp: int, pp: int, dp: int, expert_parallel: bool,
    model: dict[str, Any] | None = None, dp_attention: bool = False,
) -> tuple[float, int, str]:
    """Weights each device holds: (bytes, devices the experts are split over, how).

    TP and PP split every layer. With vLLM's expert parallelism the routed experts are split over
    TP x DP x PP, while the rest (attention, shared expert, dense MLP, embeddings, lm_head; BF16 in
    the INT4 checkpoints) is held whole by every DP rank, split by TP x PP only. The split of the
    two parts comes from the profile (``expert_bytes``); a profile without it splits the total,
    which underestimates an EP rank by the replicated part.
    """
    shards = tp * pp
    how = f"TP {tp} x PP {pp}"
    if dp_attention and dp > 1 and tp % dp == 0:
        # SGLang's --enable-dp-attention: DP splits the TP ranks into DP attention groups of TP / DP;
        # attention and embeddings are split over TP / DP only, the MoE layers over all of TP
        split = expert_bytes(model or {})
        if split is not None and 0 < split[0] < total_bytes:
            experts, _ = split
            rest, attn_tp = total_bytes - experts, tp // dp
            how = (
                f"replicated {rest / 1e9:,.1f} GB / (TP {tp} / DP {dp} attention x PP {pp}) + experts "
                f"{experts / 1e9:,.1f} GB / (TP {tp} x PP {pp})"
            )
            return rest / (attn_tp * pp) + experts / shards, shards, how
    if _caps(engine).expert_parallel == "switch" and expert_parallel and dp > 1:
        split = expert_bytes(model or {})
        if split is not None and 0 < split[0] < total_bytes:
            experts, _ = split
            rest = total_bytes - experts
            how = (
                f"replicated {rest / 1e9:,.1f} GB / (TP {tp} x PP {pp}) + experts {experts / 1e9:,.1f} GB / "
                f"(TP {tp} x PP {pp} x DP {dp} expert parallel)"
            )
            return rest / shards + experts / (shards * dp), shards * dp, how
        shards *= dp
        how += f" x DP {dp} (expert parallel)"
    return total_bytes / shards, shards, how


def kv_per_token(model: dict[str, Any], kv_dtype: Any, pp: int) -> tuple[int, int, str] | str:
    """(bytes per token per rank, layers on the rank, formula), or a reason it cannot be computed."""
    kv = model.get("kv_cache")
    if not isinstance(kv, dict):
        return "no kv_cache section in the model profile"
    if kv.get("kind") not in ("mla", "hybrid"):
        return f"kv_cache.kind {kv.get('kind')!r} is not modelled (only mla and hybrid)"
    try:
        rank = int(kv["kv_lora_rank"])
        rope = int(kv["qk_rope_head_dim"])
        layers = int(kv["num_hidden_layers"])
        model_bytes = int(kv.get("dtype_bytes", 2))
    except (KeyError, TypeError, ValueError) as exc:
        return f"kv_cache lacks a number: {exc}"
    if rank < 0 or rope < 0 or rank + rope < 1 or layers < 1 or model_bytes < 1:
        return "kv_cache numbers must be positive"
    elem = model_bytes
    dtype_text = f"{elem} byte{'s' if elem != 1 else ''}"
    if kv_dtype is not None:
        key = str(kv_dtype).lower()
        if key not in KV_DTYPE_BYTES:
            return f"KV cache dtype {kv_dtype!r} is not modelled"
        elem = KV_DTYPE_BYTES[key] or model_bytes
        dtype_text = f"{elem} byte{'s' if elem != 1 else ''} ({kv_dtype})"
    if kv.get("kind") == "hybrid":
        split = hybrid_layers(kv, pp)
        if isinstance(split, str):
            return split
        per_rank_layers = split[0]
        layer_text = f"{per_rank_layers} MLA layers" + (
            f" (of {len(kv['full_attn_layers'])}, the most on one of PP {pp} ranks)" if pp > 1 else "")
        formula = f"({rank} + {rope}) x {layer_text} x {dtype_text}"
        return (rank + rope) * per_rank_layers * elem, per_rank_layers, formula
    per_rank_layers = math.ceil(layers / max(pp, 1))
    layer_text = f"{per_rank_layers} layers" + (f" ({layers} / PP {pp})" if pp > 1 else "")
    formula = f"({rank} + {rope}) x {layer_text} x {dtype_text}"
    return (rank + rope) * per_rank_layers * elem, per_rank_layers, formula


def pp_partition(layers: int, pp: int) -> list[int]:
    """Layers on each PP rank as vLLM splits them (distributed.utils.get_pp_indices): layers // PP each,
    the remainder one each to the ranks before the last, from the second-to-last backwards."""
    pp = max(pp, 1)
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def hybrid_layers(kv: dict[str, Any], pp: int) -> tuple[int, int] | str:
    """(MLA layers, linear-attention layers) of the most loaded PP rank of each kind, from the
    profile's full_attn_layers (1-based, config.json linear_attn_config); the rest are linear."""
    try:
        layers = int(kv["num_hidden_layers"])
        full = sorted({int(x) for x in kv["full_attn_layers"]})
    except (KeyError, TypeError, ValueError) as exc:
        return f"kv_cache (hybrid) lacks a number: {exc}"
    if layers < 1 or not full or full[0] < 1 or full[-1] > layers:
        return "kv_cache (hybrid): full_attn_layers must be layer numbers 1..num_hidden_layers"
    start, most_mla, most_lin = 0, 0, 0
    for count in pp_partition(layers, pp):
        mla = sum(1 for x in full if start < x <= start + count)
        most_mla, most_lin = max(most_mla, mla), max(most_lin, count - mla)
        start += count
    return most_mla, most_lin


def linear_state(model: dict[str, Any], tp: int, pp: int) -> tuple[int, str] | None:
    """(bytes of linear-attention state one sequence holds on a rank, formula), whatever its length;
    None for a model without linear-attention layers.

    Kimi Delta Attention (vLLM mamba_utils kda_state_shape / kda_state_dtype): per layer, conv states
    of q, k and v, each (heads x head_dim / TP) x (conv kernel - 1) in the model dtype, and the
    recurrent state (heads / TP) x head_dim x head_dim in FP32. Under vLLM the state is held per KDA
    group in pages padded to the attention block's page: ``vllm_hybrid_layout``."""
    kv = model.get("kv_cache")
    if not isinstance(kv, dict) or kv.get("kind") != "hybrid" or not isinstance(kv.get("linear"), dict):
        return None
    lin = kv["linear"]
    split = hybrid_layers(kv, pp)
    if isinstance(split, str):
        return None
    try:
        heads, dim = int(lin["num_heads"]), int(lin["head_dim"])
        kernel = int(lin.get("conv_kernel_size", 4))
        state_b, conv_b = int(lin.get("state_dtype_bytes", 4)), int(lin.get("conv_dtype_bytes", 2))
    except (KeyError, TypeError, ValueError):
        return None
    tp = max(tp, 1)
    local = heads // tp if heads % tp == 0 else math.ceil(heads / tp)
    recurrent = local * dim * dim * state_b
    conv = 3 * local * dim * (kernel - 1) * conv_b
    layers = split[1]
    formula = (
        f"{layers} {lin.get('kind', 'linear').upper()} layers x ({heads} heads / TP {tp} x {dim} x {dim} x "
        f"{state_b} bytes + 3 x {heads} x {dim} / TP {tp} x {kernel - 1} x {conv_b} bytes)"
    )
    return layers * (recurrent + conv), formula


# vLLM's hybrid KV cache manager (v1 kv_cache_utils / kv_cache_planning and the platform's hybrid
# block alignment), as the releases' own code does it; each rule names the wheels it was read from.
# Releases before the first listed follow the 0.11.1 rule.
#   report: "blocks" = "GPU KV cache size" is num_blocks // groups x block size (x DCP) (0.11.1, 0.19.1);
#           "concurrency" = int(max concurrency x max-model-len) (0.23.0, 0.26.0, 0.32.0, 0.33.0)
#   check:  "layers" = one request's bytes summed over the layers, padding left out (0.11.1);
#           "groups" = layers sharing a block x page x blocks one request takes (0.19.1 to 0.33.0)
#   group:  "min" = the group size is the smallest layer count of a kind (0.11.1); "ratio" = the
#           largest when it is under 1.5 x the smallest, else the smallest (0.19.1 to 0.33.0)
#   align:  the MLA block is a multiple of 64 tokens (0.11.1, 0.19.1: a constant; 0.23.0, 0.26.0: the
#           backend's smallest kernel block, FlashMLA's 64), of 128 from 0.32.0 (0.32.0, 0.33.0:
#           "make the manager block size a multiple of 128")
#   prefix: state blocks a request holds per KDA group with --enable-prefix-caching: 1 where the release
#           turns prefix caching off for KDA (0.11.1: "without support for prefix caching: disabling"),
#           2 in Mamba cache "align" mode (0.26.0, 0.33.0; 0.19.1, 0.23.0, 0.32.0 taken alike, not read);
#           without it (the default for hybrid models) 1
VLLM_HYBRID_RULES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("0.0", {"report": "blocks", "check": "layers", "group": "min", "align": 64, "prefix": 1}),
    ("0.19.1", {"report": "blocks", "check": "groups", "group": "ratio", "align": 64, "prefix": 2}),
    ("0.23.0", {"report": "concurrency", "check": "groups", "group": "ratio", "align": 64, "prefix": 2}),
    ("0.32.0", {"report": "concurrency", "check": "groups", "group": "ratio", "align": 128, "prefix": 2}),
)


def vllm_hybrid_rules(release: str | None) -> dict[str, Any]:
    """The hybrid-cache rules of a vLLM release (VLLM_HYBRID_RULES); unknown: the newest."""
    if not release:
        return dict(VLLM_HYBRID_RULES[-1][1])
    key, chosen = version_key(release), VLLM_HYBRID_RULES[0][1]
    for first, rules in VLLM_HYBRID_RULES:
        if key >= version_key(first):
            chosen = rules
    return dict(chosen)


@dataclass
class HybridLayout:
    """vLLM's KV cache of a hybrid (MLA + KDA) model on one rank, as the engine lays it out."""

    release: str
    rules: dict[str, Any]
    mla_layers: int  # whole model
    kda_layers: int
    group_size: int
    mla_groups: int
    kda_groups: int
    padding_layers: int  # KDA (or MLA) layer slots added so every group has group_size layers
    align: int
    attn_bytes_1_token: int  # one MLA layer's bytes for one token (kv_lora_rank + rope) x bytes
    state_page: int  # one KDA layer's state of one sequence on a rank, unpadded
    block_tokens: int  # the attention block, raised so its page holds a state
    page_bytes: int  # every layer's page (the state padded up to it)
    tensors: int  # layers sharing each block on the most loaded rank (one per group)
    available: float
    num_blocks: int
    attn_blocks_per_request: int
    state_blocks_per_group: int
    max_model_len: int
    dcp: int

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.tensors

    @property
    def blocks_per_request(self) -> int:
        return self.attn_blocks_per_request * self.mla_groups + self.state_blocks_per_group * self.kda_groups

    @property
    def concurrency(self) -> float:
        """vLLM's "Maximum concurrency for <max-model-len> tokens per request"."""
        return self.num_blocks / self.blocks_per_request if self.blocks_per_request else 0.0

    @property
    def reported_tokens(self) -> int:
        """vLLM's "GPU KV cache size: N tokens" (a figure of its own: see report_formula)."""
        if self.rules["report"] == "blocks":
            groups = self.mla_groups + self.kda_groups
            return self.num_blocks // groups * self.block_tokens * self.dcp
        return int(self.concurrency * self.max_model_len)

    @property
    def attention_tokens(self) -> int:
        """Tokens the MLA layers hold for one sequence: every block of the pool but the null block
        (block_pool) and the KDA groups' state blocks, x the block (x DCP)."""
        free = self.num_blocks - 1 - self.state_blocks_per_group * self.kda_groups
        return max(free, 0) // self.mla_groups * self.block_tokens * self.dcp if self.mla_groups else 0

    @property
    def full_sequences(self) -> int:
        """Sequences of max-model-len the pool really holds at once (null block left out)."""
        return max(self.num_blocks - 1, 0) // self.blocks_per_request if self.blocks_per_request else 0

    @property
    def needed_bytes(self) -> int:
        """What vLLM checks one max-model-len request against before it starts."""
        if self.rules["check"] == "layers":
            return (self.mla_layers_rank * self.attn_blocks_per_request
                    + self.kda_layers_rank * self.state_blocks_per_group) * self.page_bytes
        return self.block_bytes * self.blocks_per_request

    mla_layers_rank: int = 0
    kda_layers_rank: int = 0

    @property
    def fits(self) -> bool:
        """vLLM starts: one request of max-model-len fits the available memory (its check) and the
        pool holds its blocks."""
        return self.num_blocks > 0 and self.needed_bytes <= self.available

    @property
    def state_padding_pct(self) -> float:
        return 100 * (self.page_bytes - self.state_page) / self.state_page if self.state_page else 0.0

    def report_formula(self) -> str:
        if self.rules["report"] == "blocks":
            dcp = f" x DCP {self.dcp}" if self.dcp > 1 else ""
            return (f"{self.num_blocks:,} blocks // {self.mla_groups + self.kda_groups} groups x {self.block_tokens}"
                    f"{dcp} = {self.reported_tokens:,}")
        return f"{self.concurrency:.4f} x {self.max_model_len:,} = {self.reported_tokens:,}"

    def text(self) -> str:
        """Every term of the layout, as one clause."""
        pad = (f" + {self.padding_layers} padding layer{'s' if self.padding_layers != 1 else ''}"
               if self.padding_layers else "")
        check = (f"{self.mla_layers_rank} MLA layers x {self.attn_blocks_per_request:,} + {self.kda_layers_rank} KDA "
                 f"layers x {self.state_blocks_per_group} pages" if self.rules["check"] == "layers"
                 else f"{self.tensors} x {self.page_bytes:,} x {self.blocks_per_request:,} blocks")
        return (
            f"vLLM {self.release} hybrid cache: attention block {self.block_tokens} tokens (a multiple of "
            f"{self.align} whose page {self.block_tokens} x {self.attn_bytes_1_token:,} = {self.page_bytes:,} bytes "
            f"holds one KDA layer's state {self.state_page:,} bytes, padded {self.state_padding_pct:.2f}%); "
            f"groups of {self.group_size} layers: {self.mla_groups} MLA + {self.kda_groups} KDA "
            f"({self.mla_layers} MLA + {self.kda_layers} KDA layers{pad}); {self.tensors} layers share each block "
            f"on a rank: {self.block_bytes:,} bytes a block; KV {_gib(self.available)} / {self.block_bytes:,} = "
            f"{self.num_blocks:,} blocks; one request of {self.max_model_len:,} tokens takes "
            f"{self.attn_blocks_per_request:,} MLA + {self.kda_groups} x {self.state_blocks_per_group} KDA = "
            f"{self.blocks_per_request:,} blocks ({check} = {_gib(self.needed_bytes)} needed); "
            f"vLLM logs GPU KV cache size {self.report_formula()} tokens and maximum concurrency "
            f"{self.num_blocks:,} / {self.blocks_per_request:,} = {self.concurrency:.2f}x; the MLA layers have room "
            f"for {self.attention_tokens:,} tokens beside one sequence's state ((blocks - 1 null - {self.kda_groups} x "
            f"{self.state_blocks_per_group} state) x {self.block_tokens}"
            + (f" x DCP {self.dcp}" if self.dcp > 1 else "")
            + f"), {self.full_sequences:,} full sequences at once"
        )


def _interleave(layers: list[int], size: int) -> list[list[int]]:
    """vLLM's split of one kind's layers into groups of at most size: layers[i::groups]."""
    n = math.ceil(len(layers) / size) if layers else 0
    return [layers[i::n] for i in range(n)]


def vllm_hybrid_layout(
    model: dict[str, Any], *, tp: int, pp: int, dcp: int, available: float, max_model_len: int,
    kv_elem_bytes: int, release: str | None, prefix_caching: bool = False,
) -> HybridLayout | str:
    """vLLM's KV cache of a hybrid model on the most loaded rank, or why it cannot be computed.

    The attention block is raised to the smallest multiple of the alignment whose page holds one KDA
    layer's state, and every state page is padded to it (platforms.interface / models.config,
    HybridAttentionMambaModelConfig). MLA and KDA layers are grouped, KDA padded up to whole groups
    (kv_cache_utils._get_kv_cache_groups_uniform_page_size, "Add N padding layers"); each group's i-th
    layer shares the i-th tensor, so a block costs a page per layer of the largest group on the rank
    and one request takes ceil(len / DCP / block) MLA blocks plus one state block per KDA group (two
    in "align" mode with prefix caching, 0.26.0's MambaSpec). num_blocks = available // block bytes."""
    kv = model.get("kv_cache")
    if not isinstance(kv, dict) or kv.get("kind") != "hybrid" or not isinstance(kv.get("linear"), dict):
        return "not a hybrid model"
    try:
        layers = int(kv["num_hidden_layers"])
        full = sorted({int(x) for x in kv["full_attn_layers"]})
        rank, rope = int(kv["kv_lora_rank"]), int(kv["qk_rope_head_dim"])
        lin = kv["linear"]
        heads, dim = int(lin["num_heads"]), int(lin["head_dim"])
        kernel = int(lin.get("conv_kernel_size", 4))
        state_b, conv_b = int(lin.get("state_dtype_bytes", 4)), int(lin.get("conv_dtype_bytes", 2))
    except (KeyError, TypeError, ValueError) as exc:
        return f"kv_cache (hybrid) lacks a number: {exc}"
    tp, pp, dcp = max(tp, 1), max(pp, 1), max(dcp, 1)
    if layers < 1 or not full or full[0] < 1 or full[-1] > layers or heads % tp or kv_elem_bytes < 1:
        return "kv_cache (hybrid): layer numbers or heads do not fit the TP split"
    rules = vllm_hybrid_rules(release)
    mla = full
    kda = [n for n in range(1, layers + 1) if n not in set(full)]
    local = heads // tp
    state_page = local * dim * dim * state_b + 3 * local * dim * (kernel - 1) * conv_b
    attn_1 = (rank + rope) * kv_elem_bytes
    align = int(rules["align"])
    block = align * math.ceil(state_page / (align * attn_1))
    page = block * attn_1
    if not kda:
        return "kv_cache (hybrid): no linear-attention layers"
    small, large = min(len(mla), len(kda)), max(len(mla), len(kda))
    size = large if rules["group"] == "ratio" and large < small * 1.5 else small
    padding = sum(size - len(x) % size for x in (mla, kda) if len(x) % size)
    groups = _interleave(mla, size) + _interleave(kda, size)
    n_mla = len(_interleave(mla, size))
    tensors, most_mla, most_kda, start = 0, 0, 0, 0
    for count in pp_partition(layers, pp):
        stage = range(start + 1, start + count + 1)
        tensors = max(tensors, *(sum(1 for x in g if x in stage) for g in groups))
        most_mla = max(most_mla, sum(1 for x in mla if x in stage))
        most_kda = max(most_kda, sum(1 for x in kda if x in stage))
        start += count
    num_blocks = int(max(available, 0) // (page * tensors))
    return HybridLayout(
        release=str(release or VLLM_HYBRID_RULES[-1][0] + "+"), rules=rules, mla_layers=len(mla),
        kda_layers=len(kda), group_size=size, mla_groups=n_mla, kda_groups=len(groups) - n_mla,
        padding_layers=padding, align=align, attn_bytes_1_token=attn_1, state_page=state_page,
        block_tokens=block, page_bytes=page, tensors=tensors, available=available, num_blocks=num_blocks,
        attn_blocks_per_request=math.ceil(math.ceil(max_model_len / dcp) / block),
        state_blocks_per_group=int(rules["prefix"]) if prefix_caching else 1,
        max_model_len=max_model_len, dcp=dcp, mla_layers_rank=most_mla, kda_layers_rank=most_kda,
    )


def vision_share(model: dict[str, Any], engine_args: dict[str, Any], tp: int) -> tuple[float, float, str]:
    """(the vision tower's bytes in the checkpoint, its bytes on each device, how): the profile's
    ``modality``. Not loaded with the text-only switch (vLLM --language-model-only); a whole copy on
    every rank with --mm-encoder-tp-mode data (the encoder runs data parallel); split by TP otherwise."""
    mod = model.get("modality")
    if not isinstance(mod, dict) or not mod.get("vision"):
        return 0.0, 0.0, ""
    total = _number(mod.get("vision_tower_bytes")) or 0.0
    if total <= 0:
        return 0.0, 0.0, ""
    text_only = mod.get("text_only_flag")
    if text_only and engine_args.get(text_only):
        return total, 0.0, f"not loaded: {text_only}"
    mode_flag = mod.get("encoder_tp_mode_flag")
    if mode_flag and str(engine_args.get(mode_flag, "")).lower() == "data":
        return total, total, f"whole on every rank: {mode_flag} data"
    return total, total / max(tp, 1), f"split by TP {max(tp, 1)}"


def estimate(
    *,
    model_name: str,
    model: dict[str, Any],
    engine: str,
    engine_args: dict[str, Any],
    device_model: str,
    device_gib: float,
    tp: int,
    pp: int,
    dp: int,
    dcp: int,
    expert_parallel: bool,
    devices_per_node: int = 8,
    engine_version: str | None = None,
) -> tuple[MemoryFit | None, list[Problem], list[str]]:
    """Predict the engine's memory; (fit or None, problems, notes). Never raises on bad values.

    A hybrid model under vLLM is laid out as the release does it (``vllm_hybrid_layout``:
    engine_version picks its rules); other engines subtract one sequence's state and count MLA tokens."""
    total = _number(model.get("total_size_bytes"))
    if not total or total <= 0:
        return None, [], [f"model {model_name}: no total_size_bytes in the profile; memory fit not checked"]
    caps = _caps(engine)
    flag, default = caps.memory_fraction_flag, caps.memory_fraction_default
    raw = engine_args.get(flag, default) if flag else default
    frac = _number(raw)
    if frac is None or not 0 < frac <= 1:
        return (
            None,
            [
                Problem(
                    "memory-fit",
                    f"{flag} must be a finite number in (0, 1]: the share of each device's memory "
                    f"{engine} may use",
                    found=f"{flag} {raw!r}",
                    expected="0 < fraction <= 1, e.g. 0.9",
                    fix=f"set {flag.lstrip('-')} in llmb_engine_args to a fraction such as 0.9",
                )
            ],
            [],
        )
    dp_attention = bool(engine_args.get("--enable-dp-attention"))
    vision_total, vision_dev, vision_how = vision_share(model, engine_args, tp)
    w, shards, how = weights_per_device(total - vision_total, engine, tp, pp, dp, expert_parallel, model,
                                        dp_attention)
    w += vision_dev
    dev_bytes = device_gib * GIB
    if caps.memory_model == "static":
        headroom = 0.0
        avail = dev_bytes * frac - w
    elif caps.memory_model == "free":
        headroom = NON_KV_HEADROOM_GIB
        avail = (dev_bytes - w - headroom * GIB) * frac
    else:
        headroom = EAGER_HEADROOM_GIB if engine_args.get(EAGER_FLAG) is True else NON_KV_HEADROOM_GIB
        avail = dev_bytes * frac - w - headroom * GIB
    len_flag = caps.max_len_flag or "--max-model-len"
    raw_len = engine_args.get(len_flag, model.get("max_position_embeddings"))
    max_len = _number(raw_len)
    kv_flag = caps.kv_dtype_flag
    per_token = kv_per_token(model, engine_args.get(kv_flag) if kv_flag else None, pp)
    if isinstance(per_token, str) or max_len is None or max_len < 1:
        why = per_token if isinstance(per_token, str) else f"{len_flag} unknown ({raw_len!r})"
        notes = [f"model {model_name}: {why}; only the weights were checked against memory"]
        if avail <= 0:
            problem = Problem(
                "memory-fit",
                f"{model_name} does not fit: {total / 1e9:,.1f} GB of weights / ({how} = {shards} devices) = "
                f"{w / 1e9:,.1f} GB per device ({_gib(w)}) leave no memory: {device_gib:.1f} GiB x {frac:g} "
                f"({flag})"
                + (f" - headroom {headroom:.1f} GiB" if headroom else ""),
                found=f"{_gib(w)} of weights per device",
                expected=f"less than {_gib(dev_bytes * frac - headroom * GIB)}",
                fix=_fix(total, dev_bytes * frac - headroom * GIB, devices_per_node),
            )
            return None, [problem], notes
        return None, [], notes
    bpt, layers_rank, formula = per_token
    state = linear_state(model, tp, pp)
    state_bytes, state_formula = state if state else (0, "")
    blocks = math.floor(max(avail - state_bytes, 0) / (bpt * KV_BLOCK_TOKENS))
    dcp_eff = max(dcp, 1) if caps.decode_context_parallel else 1

    def layout(room: float) -> HybridLayout | None:
        if not state or engine != "vllm":
            return None
        out = vllm_hybrid_layout(
            model, tp=tp, pp=pp, dcp=dcp_eff, available=room, max_model_len=int(max_len),
            kv_elem_bytes=bpt // ((int(model["kv_cache"]["kv_lora_rank"]) + int(model["kv_cache"][
                "qk_rope_head_dim"])) * layers_rank),
            release=engine_version, prefix_caching=bool(engine_args.get("--enable-prefix-caching")))
        return out if isinstance(out, HybridLayout) else None

    hybrid = layout(avail)
    fit = MemoryFit(
        device_model=device_model,
        device_gib=device_gib,
        fraction_flag=flag,
        fraction=frac,
        total_bytes=total,
        weights_bytes=w,
        weight_shards=shards,
        weight_split=how,
        headroom_gib=headroom,
        kv_available_bytes=avail,
        kv_bytes_per_token=bpt,
        kv_formula=formula,
        layers_per_rank=layers_rank,
        dcp=dcp_eff,
        max_model_len=int(max_len),
        max_len_flag=len_flag,
        kv_tokens=hybrid.reported_tokens if hybrid else blocks * KV_BLOCK_TOKENS * dcp_eff,
        engine=engine,
        memory_model=caps.memory_model,
        state_bytes=state_bytes,
        state_formula=state_formula,
        vision_bytes=vision_dev,
        vision_how=vision_how,
        vision_total=vision_total,
        hybrid=hybrid,
    )
    if fit.fits:
        return fit, [], [fit.note()]
    # Without the headroom the terms are the engine's own deterministic arithmetic (budget, weights,
    # one sequence of KV): failing that, the engine refuses at start for certain. Failing only with
    # the calibrated headroom is a prediction (the non-KV peak depends on batch limits and release):
    # said as a warning with every term, not refused.
    sure = avail + headroom * GIB * (frac if caps.memory_model == "free" else 1)
    sure_tokens = math.floor(max(sure - state_bytes, 0) / (bpt * KV_BLOCK_TOKENS)) * KV_BLOCK_TOKENS * dcp_eff
    sure_hybrid = layout(sure) if hybrid else None
    if sure > 0 and (sure_hybrid.fits if sure_hybrid else sure_tokens >= fit.max_model_len):
        return (
            fit,
            [],
            [
                f"memory: WARNING {model_name} fits only if the engine's non-KV peak (activations, CUDA "
                f"graphs) stays under {_gib(sure - fit.sequence_bytes)} per device, below the "
                f"{headroom:.0f} GiB calibrated on seed 003; the engine may refuse at start: lower "
                f"{len_flag}, use DCP or an FP8 KV cache, or add devices. {fit.arithmetic()}"
            ],
        )
    if avail <= 0:
        what = f"the weights and headroom leave no KV cache ({_gib(avail)})"
    elif hybrid is not None:
        what = (
            f"vLLM needs {_gib(hybrid.needed_bytes)} for one request of {len_flag} {fit.max_model_len:,} "
            f"({hybrid.blocks_per_request:,} blocks), more than the {_gib(avail)} of KV cache"
        )
    else:
        what = (
            f"{fit.kv_tokens:,} KV tokens per instance are fewer than one sequence of "
            f"{len_flag} {fit.max_model_len:,}"
        )
    usable = dev_bytes * frac - headroom * GIB - fit.sequence_bytes
    return (
        fit,
        [
            Problem(
                "memory-fit",
                f"{model_name} does not fit: {what}. {fit.arithmetic()}",
                found=f"KV cache {_gib(avail)} per device, {fit.kv_tokens:,} tokens per instance",
                expected=f"at least {_gib(fit.sequence_bytes)} of KV per device "
                f"({fit.max_model_len:,} tokens)",
                fix=_fix(total, usable, devices_per_node, len_flag),
            )
        ],
        [],
    )


def _fix(total: float, usable_per_device: float, per_node: int, len_flag: str | None = None) -> str:
    if usable_per_device > 0:
        need = math.ceil(total / usable_per_device)
        nodes = math.ceil(need / max(per_node, 1))
        text = (
            f"spread the weights over at least {need} devices ({nodes} node(s) of {per_node}): add nodes and "
            "raise llmb_tensor_parallel or llmb_pipeline_parallel"
        )
    else:
        text = "use devices with more memory (another llmb_platform)"
    if len_flag:
        text += f", or lower {len_flag.lstrip('-')} in llmb_engine_args / use an FP8 KV cache"
    return text + (", or raise the memory fraction (--gpu-memory-utilization / --mem-fraction-static in "
                   "llmb_engine_args), or choose a smaller checkpoint (llmb_model)")


def estimate_plan(
    ctx: Any, topo: Any, engine_args: dict[str, Any]
) -> tuple[MemoryFit | None, list[Problem], list[str]]:
    """``estimate`` for a resolved context and topology (what the planner checks).

    A memory fraction the plan leaves out takes the pinned release's own default: its parser's
    (the generated flag set), else the flag set's hand-kept ``defaults``. vLLM 0.23.0 defaults
    --gpu-memory-utilization to 0.92, not 0.9 (its log on the lent H100, docs/real-hardware.md)."""
    if _caps(ctx.engine).memory_model == "offload":
        return None, [], [f"memory: {ctx.engine} keeps the experts in host memory; the device fit of the whole "
                          "checkpoint does not apply"]
    fs = getattr(ctx, "flagset", None)
    flag = _caps(ctx.engine).memory_fraction_flag
    parser_default = ((getattr(fs, "flags", None) or {}).get(flag) or {}).get("default")
    release_default = parser_default if isinstance(parser_default, (int, float)) and not isinstance(
        parser_default, bool) else (getattr(fs, "defaults", None) or {}).get(flag)
    defaults = {flag: release_default} if flag and release_default is not None else {}
    return estimate(
        model_name=ctx.model_name,
        model=ctx.model,
        engine=ctx.engine,
        engine_args={**defaults, **engine_args},
        engine_version=getattr(ctx, "version", None),
        device_model=ctx.platform.device_model,
        device_gib=ctx.platform.device_memory_gb,
        tp=topo.tp,
        pp=topo.pp,
        dp=topo.dp,
        dcp=topo.dcp,
        expert_parallel=bool(ctx.v.get("llmb_expert_parallel")),
        devices_per_node=topo.devices_per_node,
    )


def check_fit(ctx: Any, topo: Any, engine_args: dict[str, Any]) -> list[Problem]:
    """The planner's memory-fit check: problems, and the prediction as a note on ctx.notes."""
    _, problems, notes = estimate_plan(ctx, topo, engine_args)
    ctx.notes.extend(notes)
    return problems
