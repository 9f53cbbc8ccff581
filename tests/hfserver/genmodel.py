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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-bytes", type=int, default=1_500_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    info = generate(args.out, args.shards, args.shard_bytes, args.seed)
    json.dump(info, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
