#!/usr/bin/env python3
"""Generate a small model repository with Kimi-K2-Thinking's file layout (test data).

    python tests/hfserver/genmodel.py OUT_DIR [--shards 4] [--shard-bytes 1500000] [--seed 0]

What it writes (the layout of moonshotai/Kimi-K2-Thinking, scaled down to a few MB):
config.json (model_type kimi_k2, a compressed-tensors quantization_config whose
config_groups.group_0.targets is ["Linear"]), generation_config.json, configuration.json,
model.safetensors.index.json, model-0000i-of-00000N.safetensors (real safetensors files: int4
experts packed into int32 plus scales and shapes, float16 for the rest), tiktoken.model,
tokenizer_config.json, chat_template.jinja, configuration_deepseek.py, modeling_deepseek.py,
tokenization_kimi.py, plus README.md and .gitattributes that a download's allow_patterns skip.

``--kind tiny`` writes kimi-k2-tiny instead: Kimi-K2's architecture at hidden size 512 with random bf16
weights and a byte-level BPE tokenizer, which a real vLLM serves (tiny_generate below).

Deterministic: the same arguments give byte-identical files (and so the same commit id at the test
server); data/models/kimi-k2-sim.yml pins the default output's commit and size.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save

HIDDEN = 256
VOCAB = 1024
GROUP = 32

GITATTRIBUTES = """*.safetensors filter=lfs diff=lfs merge=lfs -text
*.model filter=lfs diff=lfs merge=lfs -text
*.bin filter=lfs diff=lfs merge=lfs -text
"""

CHAT_TEMPLATE = """{#- test stand-in for Kimi-K2-Thinking's chat template: roles, tool calls, thinking -#}
{%- for message in messages -%}
<|im_{{ message['role'] }}|>{{ message['role'] }}<|im_middle|>
{%- if message.get('reasoning_content') %}<think>{{ message['reasoning_content'] }}</think>{% endif -%}
{{ message['content'] if message['content'] is string else '' }}<|im_end|>
{%- endfor -%}
{%- if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|><think>{% endif -%}
"""

CONFIGURATION_PY = '''"""Test stand-in for Kimi-K2's configuration_deepseek.py (trust-remote-code file)."""


class DeepseekV3Config:
    model_type = "kimi_k2"

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)
'''

MODELING_PY = '''"""Test stand-in for Kimi-K2's modeling_deepseek.py (trust-remote-code file); holds no model."""

from .configuration_deepseek import DeepseekV3Config


class DeepseekV3ForCausalLM:
    config_class = DeepseekV3Config
'''

TOKENIZATION_PY = '''"""Test stand-in for Kimi-K2's tokenization_kimi.py (a tiktoken-based tokenizer)."""


class TikTokenTokenizer:
    vocab_files_names = {"vocab_file": "tiktoken.model"}
'''

README = """---
license: other
library_name: transformers
---
# kimi-k2-sim

A generated test model with the file layout of Kimi-K2-Thinking. Not a language model.
"""


def config(layers: int, experts: int) -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_deepseek.DeepseekV3Config",
            "AutoModel": "modeling_deepseek.DeepseekV3Model",
            "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
        },
        "bos_token_id": 163584,
        "eos_token_id": 163586,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "intermediate_size": HIDDEN * 2,
        "kv_lora_rank": 64,
        "max_position_embeddings": 262144,
        "model_type": "kimi_k2",
        "moe_intermediate_size": HIDDEN,
        "n_group": 1,
        "n_routed_experts": experts,
        "n_shared_experts": 1,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": layers,
        "num_key_value_heads": 4,
        "q_lora_rank": 128,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "quantization_config": {
            "config_groups": {
                "group_0": {
                    "input_activations": None,
                    "output_activations": None,
                    "targets": ["Linear"],
                    "weights": {
                        "actorder": None,
                        "block_structure": None,
                        "dynamic": False,
                        "group_size": GROUP,
                        "num_bits": 4,
                        "observer": "minmax",
                        "observer_kwargs": {},
                        "strategy": "group",
                        "symmetric": True,
                        "type": "int",
                    },
                }
            },
            "format": "pack-quantized",
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
            "kv_cache_scheme": None,
            "quant_method": "compressed-tensors",
            "quantization_status": "compressed",
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "factor": 64.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
        "rope_theta": 50000.0,
        "routed_scaling_factor": 2.827,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.56.2",
        "use_cache": True,
        "v_head_dim": 32,
        "vocab_size": VOCAB,
    }


def tensors_for_layer(rng: np.random.Generator, layer: int, experts: int) -> dict[str, np.ndarray]:
    """One decoder layer: float16 attention/norms, int4 experts packed 8 per int32 with scales."""
    p = f"model.layers.{layer}"
    t: dict[str, np.ndarray] = {
        f"{p}.input_layernorm.weight": np.ones(HIDDEN, dtype=np.float16),
        f"{p}.post_attention_layernorm.weight": np.ones(HIDDEN, dtype=np.float16),
        f"{p}.self_attn.q_a_proj.weight": rng.standard_normal((128, HIDDEN)).astype(np.float16),
        f"{p}.self_attn.kv_a_proj_with_mqa.weight": rng.standard_normal((80, HIDDEN)).astype(np.float16),
        f"{p}.self_attn.o_proj.weight": rng.standard_normal((HIDDEN, 128)).astype(np.float16),
    }
    inter = HIDDEN
    for e in range(experts):
        for proj, (rows, cols) in (("gate_proj", (inter, HIDDEN)), ("up_proj", (inter, HIDDEN)),
                                   ("down_proj", (HIDDEN, inter))):
            q = f"{p}.mlp.experts.{e}.{proj}"
            t[f"{q}.weight_packed"] = rng.integers(-(2**31), 2**31 - 1, size=(rows, cols // 8), dtype=np.int32)
            t[f"{q}.weight_scale"] = rng.random((rows, cols // GROUP), dtype=np.float32).astype(np.float16)
            t[f"{q}.weight_shape"] = np.array([rows, cols], dtype=np.int32)
    return t


def tiktoken_model(rng: np.random.Generator) -> bytes:
    lines = []
    for rank in range(VOCAB):
        token = bytes(rng.integers(0, 256, size=1 + rank % 6, dtype=np.uint8).tolist())
        lines.append(f"{base64.b64encode(token).decode()} {rank}")
    return ("\n".join(lines) + "\n").encode()


def generate(out: Path, shards: int = 4, shard_bytes: int = 1_500_000, seed: int = 0) -> dict:
    """Write the repository into ``out``; returns {files: {name: size}, total_size, shard_count}."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    # one expert of this shape is 3 x (256 x 32 int32 + 256 x 8 fp16) ~= 110 KB
    per_expert = 3 * (HIDDEN * HIDDEN // 8 * 4 + HIDDEN * HIDDEN // GROUP * 2)
    layers_per_shard = 1
    experts = max(2, shard_bytes // per_expert)
    layers = shards * layers_per_shard
    cfg = config(layers, experts)

    weight_map: dict[str, str] = {}
    total = 0
    width = max(6, len(str(shards)))
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:0{width}d}.safetensors"
        tensors: dict[str, np.ndarray] = {}
        if s == 0:
            tensors["model.embed_tokens.weight"] = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16)
        for layer in range(s * layers_per_shard, (s + 1) * layers_per_shard):
            tensors.update(tensors_for_layer(rng, layer, experts))
        if s == shards - 1:
            tensors["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float16)
            tensors["lm_head.weight"] = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16)
        blob = save(tensors, metadata={"format": "pt"})
        (out / name).write_bytes(blob)
        for key in tensors:
            weight_map[key] = name
        total += sum(int(v.nbytes) for v in tensors.values())

    texts = {
        ".gitattributes": GITATTRIBUTES,
        "README.md": README,
        "config.json": json.dumps(cfg, indent=2, sort_keys=False) + "\n",
        "generation_config.json": json.dumps({"max_length": 262144, "eos_token_id": 163586}, indent=2) + "\n",
        "configuration.json": json.dumps({"framework": "pytorch", "task": "text-generation"}, indent=2) + "\n",
        "model.safetensors.index.json": json.dumps(
            {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2
        ) + "\n",
        "tokenizer_config.json": json.dumps(
            {
                "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
                "bos_token": "[BOS]",
                "eos_token": "[EOS]",
                "model_max_length": 262144,
                "tokenizer_class": "TikTokenTokenizer",
            },
            indent=2,
        ) + "\n",
        "chat_template.jinja": CHAT_TEMPLATE,
        "configuration_deepseek.py": CONFIGURATION_PY,
        "modeling_deepseek.py": MODELING_PY,
        "tokenization_kimi.py": TOKENIZATION_PY,
    }
    for name, text in texts.items():
        (out / name).write_text(text)
    (out / "tiktoken.model").write_bytes(tiktoken_model(rng))
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    return {"files": files, "total_size": sum(files.values()), "shard_count": shards}



# ---------------------------------------------------------------------------------------------------
# kimi-k2-tiny: a checkpoint a real vLLM loads and serves (docs/real-hardware.md). Kimi-K2's
# architecture (DeepseekV3ForCausalLM: MLA with kv_lora_rank 512 / qk_rope_head_dim 64, MoE with
# sigmoid routing, noaux_tc top-k and a shared expert, the first layer dense) at hidden size 512,
# bf16 random weights, a byte-level BPE tokenizer (tokenizer.json) with Kimi-K2's special tokens.
# The random values come from random.Random(seed).randbytes, whose stream Python keeps stable, so
# the files (and the test hub's commit id) are the same on any machine and numpy version.

TINY_REPO = "llmb-test/kimi-k2-tiny"
TINY_HIDDEN = 512
TINY_LAYERS = 3
TINY_EXPERTS = 8
TINY_HEADS = 16
TINY_VOCAB = 1024
# Kimi-K2's special tokens (tokenizer_config.json of moonshotai/Kimi-K2-Instruct), with the
# tool-call section tokens the kimi_k2 tool parser looks up in the vocabulary.
TINY_SPECIAL = [
    "[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>", "[UNK]", "[PAD]",
]

TINY_CHAT_TEMPLATE = """{#- test stand-in for Kimi-K2-Instruct's chat template: roles, tools, tool calls -#}
{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{%- endif -%}
{%- for message in messages -%}
{%- if message['role'] == 'tool' -%}<|im_system|>tool<|im_middle|>## Return of {{ message.get('tool_call_id', '') }}
{{ message['content'] }}<|im_end|>
{%- else -%}
<|im_{{ 'user' if message['role'] == 'user' else ('assistant' if message['role'] == 'assistant' else 'system') }}|>{{ message['role'] }}<|im_middle|>
{%- if message['content'] is string %}{{ message['content'] }}{% endif -%}
{%- if message.get('tool_calls') -%}<|tool_calls_section_begin|>
{%- for tc in message['tool_calls'] -%}<|tool_call_begin|>{{ tc['id'] }}<|tool_call_argument_begin|>
{{- tc['function']['arguments'] if tc['function']['arguments'] is string else tc['function']['arguments'] | tojson -}}
<|tool_call_end|>{%- endfor -%}<|tool_calls_section_end|>
{%- endif -%}<|im_end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif -%}
"""


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def tiny_tokenizer() -> tuple[dict, dict[str, int], set[int]]:
    """(tokenizer.json, special token ids, ids whose lm_head row is biased off).

    Byte-level BPE: the 256 byte symbols, merges of letter pairs and space + letter until
    TINY_VOCAB - len(TINY_SPECIAL) entries, then the special tokens (so every id the model can
    produce decodes)."""
    b2u = _bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges: list[str] = []
    letters = "etaoinshrdlucmfwypvbgkqjxzETAOINSHRDLUCMFWYPVBGKQJXZ"
    space = b2u[ord(" ")]
    low, up = letters[:26], letters[26:]
    pairs = [(space, c) for c in letters] + [(a, b) for a in low + up for b in low]
    for a, b in pairs:
        if len(vocab) >= TINY_VOCAB - len(TINY_SPECIAL):
            break
        vocab[a + b] = len(vocab)
        merges.append(f"{a} {b}")
    if len(vocab) != TINY_VOCAB - len(TINY_SPECIAL):
        raise AssertionError(f"tokenizer has {len(vocab)} regular tokens, config.json says {TINY_VOCAB}")
    special = {tok: len(vocab) + i for i, tok in enumerate(TINY_SPECIAL)}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for t, i in special.items()
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    # never sampled: the special tokens (no early end, exact output lengths) and bare whitespace
    # (a forced JSON tool call cannot stall on it)
    banned = set(special.values()) | {vocab[b2u[c]] for c in (9, 10, 13, 32)}
    return doc, special, banned


def tiny_config() -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": TINY_VOCAB - len(TINY_SPECIAL),
        "eos_token_id": TINY_VOCAB - len(TINY_SPECIAL) + TINY_SPECIAL.index("<|im_end|>"),
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": TINY_HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": TINY_HIDDEN * 2,
        "kv_lora_rank": 512,
        "max_position_embeddings": 4096,
        "model_type": "kimi_k2",
        "moe_intermediate_size": 256,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": TINY_EXPERTS,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": TINY_HEADS,
        "num_experts_per_tok": 2,
        "num_hidden_layers": TINY_LAYERS,
        "num_key_value_heads": TINY_HEADS,
        "num_nextn_predict_layers": 0,
        "q_lora_rank": 256,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 50000.0,
        "routed_scaling_factor": 2.827,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        # Kimi-K2's own value; without it vLLM 0.23.0 does not expect e_score_correction_bias
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.56.2",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": TINY_VOCAB,
    }


class _Rand:
    """bf16 random tensors from a byte stream that Python keeps stable across versions."""

    def __init__(self, seed: int):
        import random

        self.r = random.Random(seed)

    def bf16(self, shape: tuple[int, ...], exp: int = 121) -> np.ndarray:
        """Random signs and mantissas, magnitudes 2**(exp-127) .. 2**(exp-124): bf16 bits as uint16."""
        n = int(np.prod(shape))
        u = np.frombuffer(self.r.randbytes(2 * n), dtype=np.uint16).reshape(shape)
        sign = u & np.uint16(0x8000)
        e = (np.uint16(exp) + ((u >> np.uint16(7)) & np.uint16(3))) << np.uint16(7)
        return (sign | e | (u & np.uint16(0x7F))).astype(np.uint16)


BF16_ONE = 0x3F80


def _ones(n: int) -> np.ndarray:
    return np.full(n, BF16_ONE, dtype=np.uint16)


def save_bf16(tensors: dict[str, np.ndarray], f32: set[str]) -> bytes:
    """A safetensors file: uint16 arrays written as BF16, names in f32 as float32 (header sorted)."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    off = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        raw = arr.astype("<f4").tobytes() if name in f32 else arr.astype("<u2").tobytes()
        header[name] = {"dtype": "F32" if name in f32 else "BF16", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def tiny_layer(rnd: _Rand, i: int, cfg: dict) -> dict[str, np.ndarray]:
    """One decoder layer. Output projections (o_proj, down_proj) are 2**11 times smaller than the
    rest (magnitudes 2**-17 .. 2**-14), so the residual stream keeps the embedding's bias dimension
    (see tiny_generate): at 2**-10 the layers' outputs (rms ~1.3) swamped it, and vLLM's forced
    tool call emitted newlines until max_tokens (seen on the H100)."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    p = f"model.layers.{i}"
    t = {
        f"{p}.input_layernorm.weight": _ones(h),
        f"{p}.post_attention_layernorm.weight": _ones(h),
        f"{p}.self_attn.q_a_proj.weight": rnd.bf16((cfg["q_lora_rank"], h)),
        f"{p}.self_attn.q_a_layernorm.weight": _ones(cfg["q_lora_rank"]),
        f"{p}.self_attn.q_b_proj.weight": rnd.bf16((heads * qk, cfg["q_lora_rank"])),
        f"{p}.self_attn.kv_a_proj_with_mqa.weight": rnd.bf16((cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h)),
        f"{p}.self_attn.kv_a_layernorm.weight": _ones(cfg["kv_lora_rank"]),
        f"{p}.self_attn.kv_b_proj.weight": rnd.bf16(
            (heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"])),
        f"{p}.self_attn.o_proj.weight": rnd.bf16((h, heads * cfg["v_head_dim"]), exp=110),
    }

    def mlp(prefix: str, inter: int) -> None:
        t[f"{prefix}.gate_proj.weight"] = rnd.bf16((inter, h))
        t[f"{prefix}.up_proj.weight"] = rnd.bf16((inter, h))
        t[f"{prefix}.down_proj.weight"] = rnd.bf16((h, inter), exp=110)

    if i < cfg["first_k_dense_replace"]:
        mlp(f"{p}.mlp", cfg["intermediate_size"])
    else:
        t[f"{p}.mlp.gate.weight"] = rnd.bf16((cfg["n_routed_experts"], h))
        t[f"{p}.mlp.gate.e_score_correction_bias"] = np.zeros(cfg["n_routed_experts"], dtype=np.float32)
        for e in range(cfg["n_routed_experts"]):
            mlp(f"{p}.mlp.experts.{e}", cfg["moe_intermediate_size"])
        mlp(f"{p}.mlp.shared_experts", cfg["moe_intermediate_size"] * cfg["n_shared_experts"])
    return t


def tiny_generate(out: Path, seed: int = 0, shards: int = 3) -> dict:
    """Write kimi-k2-tiny into ``out``; returns {files: {name: size}, total_size, shard_count}.

    Logits: the embedding's dimension 0 is a constant 1.0 that the small output projections leave
    standing, so after the final norm it acts as a bias, and lm_head's column 0 is -1 for the
    banned ids (special tokens, bare whitespace), 0 elsewhere: greedy and sampled outputs never end
    early or stall, so every request produces exactly max_tokens tokens."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config()
    tok, special, banned = tiny_tokenizer()
    rnd = _Rand(seed)
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    embed = rnd.bf16((v, h), exp=119)
    embed[:, 0] = BF16_ONE
    lm_head = rnd.bf16((v, h))
    lm_head[:, 0] = 0
    lm_head[sorted(banned), 0] = 0xBF80  # -1.0
    groups: list[dict[str, np.ndarray]] = [{"model.embed_tokens.weight": embed}]
    for i in range(cfg["num_hidden_layers"]):
        groups.append(tiny_layer(rnd, i, cfg))
    groups.append({"model.norm.weight": _ones(h), "lm_head.weight": lm_head})
    # spread the groups over the shards in order (embeddings with layer 0, head with the last layer)
    per = [groups[0] | groups[1]] + groups[2:-2] + [groups[-2] | groups[-1]]
    shards = min(shards, len(per))
    chunks: list[dict[str, np.ndarray]] = [{} for _ in range(shards)]
    for k, g in enumerate(per):
        chunks[k * shards // len(per)].update(g)
    weight_map: dict[str, str] = {}
    total = 0
    for s, tensors in enumerate(chunks):
        name = f"model-{s + 1:05d}-of-{shards:06d}.safetensors"
        f32 = {k for k in tensors if k.endswith("e_score_correction_bias")}
        (out / name).write_bytes(save_bf16(tensors, f32))
        for key, arr in tensors.items():
            weight_map[key] = name
            total += arr.size * (4 if key in f32 else 2)
    _write_texts(out, cfg, tok, special, total, weight_map,
                 "architecture of Kimi-K2 at hidden size 512, random bf16 weights: a real engine loads it.",
                 "kimi-k2-tiny")
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    return {"files": files, "total_size": sum(files.values()), "shard_count": shards}


def _write_texts(out: Path, cfg: dict, tok: dict, special: dict[str, int], total: int, weight_map: dict[str, str],
                 what: str, name: str) -> None:
    tok_cfg = {
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for t, i in special.items()},
        "bos_token": "[BOS]",
        "eos_token": "<|im_end|>",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": TINY_CHAT_TEMPLATE,
    }
    texts = {
        ".gitattributes": GITATTRIBUTES,
        "README.md": README.replace("kimi-k2-sim", name).replace(
            "file layout of Kimi-K2-Thinking. Not a language model.", what),
        "config.json": json.dumps(cfg, indent=2) + "\n",
        "generation_config.json": json.dumps({"bos_token_id": cfg["bos_token_id"],
                                              "eos_token_id": cfg["eos_token_id"]}, indent=2) + "\n",
        "model.safetensors.index.json": json.dumps(
            {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2
        ) + "\n",
        "tokenizer.json": json.dumps(tok, ensure_ascii=False) + "\n",
        "tokenizer_config.json": json.dumps(tok_cfg, indent=2) + "\n",
        "special_tokens_map.json": json.dumps({"bos_token": "[BOS]", "eos_token": "<|im_end|>",
                                               "pad_token": "[PAD]", "unk_token": "[UNK]"}, indent=2) + "\n",
    }
    for fname, text in texts.items():
        (out / fname).write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------- kimi-k2-wide
# Kimi-K2's true widths (moonshotai/Kimi-K2-Instruct config.json: hidden 7168, 64 heads, q_lora_rank 1536,
# MLA kv_lora_rank 512 / qk_rope_head_dim 64 / qk_nope 128 / v_head 128, intermediate 18432, 384 routed
# experts of 2048 + 1 shared, 8 per token, the first layer dense) with two layers (one dense, one MoE) and
# the tiny tokenizer's vocabulary: 35 GB of bf16, for measuring how fast an engine loads real-size tensors.
WIDE_CONFIG = {"hidden_size": 7168, "num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1536,
               "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384,
               "num_experts_per_tok": 8, "num_hidden_layers": 2, "max_position_embeddings": 4096}


def wide_config() -> dict:
    return {**tiny_config(), **WIDE_CONFIG}


def wide_tensors(cfg: dict) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, kind) of every tensor in file order; kind: ones | f32zero | rand | small."""
    h, heads, v = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    out: list[tuple[str, tuple[int, ...], str]] = [("model.embed_tokens.weight", (v, h), "rand")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", (h,), "ones"), (f"{p}.post_attention_layernorm.weight", (h,), "ones"),
                (f"{p}.self_attn.q_a_proj.weight", (cfg["q_lora_rank"], h), "rand"),
                (f"{p}.self_attn.q_a_layernorm.weight", (cfg["q_lora_rank"],), "ones"),
                (f"{p}.self_attn.q_b_proj.weight", (heads * qk, cfg["q_lora_rank"]), "rand"),
                (f"{p}.self_attn.kv_a_proj_with_mqa.weight", (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h), "rand"),
                (f"{p}.self_attn.kv_a_layernorm.weight", (cfg["kv_lora_rank"],), "ones"),
                (f"{p}.self_attn.kv_b_proj.weight",
                 (heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"]), "rand"),
                (f"{p}.self_attn.o_proj.weight", (h, heads * cfg["v_head_dim"]), "small")]

        def mlp(prefix: str, inter: int) -> list[tuple[str, tuple[int, ...], str]]:
            return [(f"{prefix}.gate_proj.weight", (inter, h), "rand"), (f"{prefix}.up_proj.weight", (inter, h), "rand"),
                    (f"{prefix}.down_proj.weight", (h, inter), "small")]

        if i < cfg["first_k_dense_replace"]:
            out += mlp(f"{p}.mlp", cfg["intermediate_size"])
        else:
            out += [(f"{p}.mlp.gate.weight", (cfg["n_routed_experts"], h), "rand"),
                    (f"{p}.mlp.gate.e_score_correction_bias", (cfg["n_routed_experts"],), "f32zero")]
            for e in range(cfg["n_routed_experts"]):
                out += mlp(f"{p}.mlp.experts.{e}", cfg["moe_intermediate_size"])
            out += mlp(f"{p}.mlp.shared_experts", cfg["moe_intermediate_size"] * cfg["n_shared_experts"])
    out += [("model.norm.weight", (h,), "ones"), ("lm_head.weight", (v, h), "rand")]
    return out


def wide_generate(out: Path, seed: int = 0, shard_gb: float = 5.0) -> dict:
    """Write kimi-k2-wide into ``out`` tensor by tensor (never a shard in memory): the data of each tensor
    is a window of one 64 MiB random bf16 pool (tiny's magnitudes), at an offset drawn per tensor."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = wide_config()
    tok, special, _banned = tiny_tokenizer()
    rnd = _Rand(seed)
    pool = rnd.bf16((32 * 1024 * 1024,)).tobytes()
    small = rnd.bf16((32 * 1024 * 1024,), exp=110).tobytes()
    specs = wide_tensors(cfg)
    limit = int(shard_gb * 1e9)
    chunks: list[list[tuple[str, tuple[int, ...], str]]] = [[]]
    size = 0
    for t in specs:
        n = int(np.prod(t[1])) * (4 if t[2] == "f32zero" else 2)
        if chunks[-1] and size + n > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(t)
        size += n
    weight_map: dict[str, str] = {}
    total = 0
    for s, tensors in enumerate(chunks):
        name = f"model-{s + 1:05d}-of-{len(chunks):06d}.safetensors"
        header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
        off = 0
        for tname, shape, kind in tensors:
            n = int(np.prod(shape)) * (4 if kind == "f32zero" else 2)
            header[tname] = {"dtype": "F32" if kind == "f32zero" else "BF16", "shape": list(shape),
                             "data_offsets": [off, off + n]}
            off += n
            weight_map[tname] = name
            total += n
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        with open(out / name, "wb") as f:
            f.write(len(hb).to_bytes(8, "little") + hb)
            for _tname, shape, kind in tensors:
                n = int(np.prod(shape)) * (4 if kind == "f32zero" else 2)
                if kind == "ones":
                    f.write(_ones(n // 2).astype("<u2").tobytes())
                    continue
                if kind == "f32zero":
                    f.write(bytes(n))
                    continue
                src = small if kind == "small" else pool
                start = 2 * rnd.r.randrange(len(src) // 2)
                while n > 0:
                    piece = src[start:start + n]
                    f.write(piece)
                    n -= len(piece)
                    start = 0
    _write_texts(out, cfg, tok, special, total, weight_map,
                 "widths of Kimi-K2 (hidden 7168, 64 heads, MLA, 384 + 1 experts), 2 layers, random bf16 weights.",
                 "kimi-k2-wide")
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    return {"files": files, "total_size": sum(files.values()), "shard_count": len(chunks),
            "params": total // 2}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--kind", choices=["layout", "tiny", "wide"], default="layout",
                    help="layout: kimi-k2-sim (file layout only); tiny: kimi-k2-tiny (a real engine serves it); "
                         "wide: kimi-k2-wide (Kimi-K2's widths, 2 layers, 35 GB)")
    ap.add_argument("--shards", type=int, default=None)
    ap.add_argument("--shard-bytes", type=int, default=1_500_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.kind == "wide":
        info = wide_generate(args.out, args.seed)
    elif args.kind == "tiny":
        info = tiny_generate(args.out, args.seed, args.shards or 3)
    else:
        info = generate(args.out, args.shards or 4, args.shard_bytes, args.seed)
    json.dump(info, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
