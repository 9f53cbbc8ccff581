"""The tiny Kimi-K2-shaped checkpoint a real vLLM serves (tests/hfserver/genmodel.py --kind tiny)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from hfserver.genmodel import TINY_SPECIAL, tiny_generate
from hfserver.server import Repo

ROOT = Path(__file__).resolve().parents[3]
PROFILE = yaml.safe_load((ROOT / "data" / "models" / "kimi-k2-tiny.yml").read_text())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "kimi-k2-tiny"
    tiny_generate(out)
    return out


def _tensors(path: Path) -> dict[str, tuple[str, list[int], np.ndarray]]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        blob = raw[8 + n + a:8 + n + b]
        arr = np.frombuffer(blob, dtype=np.float32 if h["dtype"] == "F32" else np.uint16)
        assert arr.size == int(np.prod(h["shape"])), name
        out[name] = (h["dtype"], h["shape"], arr.reshape(h["shape"]))
    return out


def _bf16(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32)


def test_the_profile_pins_what_the_generator_writes(tiny):
    repo = Repo(PROFILE["repo_id"], tiny)
    assert repo.sha == PROFILE["revision"]  # the test hub's commit id: the weights stage pins it
    allowed = sum(e["size"] for rel, e in repo.files.items() if rel.endswith((".safetensors", ".json", ".jinja")))
    assert allowed == PROFILE["total_size_bytes"]
    assert len(list(tiny.glob("model-*.safetensors"))) == PROFILE["shard_count"]


def test_kimi_k2_architecture_and_the_keys_vllm_needs(tiny):
    cfg = json.loads((tiny / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "kimi_k2"
    assert cfg["topk_method"] == "noaux_tc"  # without it vLLM 0.23.0: KeyError ...e_score_correction_bias
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]) == (512, 64)
    kv = PROFILE["kv_cache"]
    assert (kv["kv_lora_rank"], kv["qk_rope_head_dim"], kv["num_hidden_layers"]) == (
        cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["num_hidden_layers"])
    index = json.loads((tiny / "model.safetensors.index.json").read_text())
    tensors: dict = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(_tensors(tiny / shard))
    assert set(tensors) == set(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(t[2].nbytes for t in tensors.values())
    # first layer dense, the others MoE with 8 routed experts, a shared expert and the router bias
    assert "model.layers.0.mlp.gate_proj.weight" in tensors
    last = cfg["num_hidden_layers"] - 1
    assert tensors[f"model.layers.{last}.mlp.gate.e_score_correction_bias"][0] == "F32"
    assert f"model.layers.{last}.mlp.experts.7.down_proj.weight" in tensors
    assert f"model.layers.{last}.mlp.shared_experts.up_proj.weight" in tensors
    heads, qk = cfg["num_attention_heads"], cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    assert tensors["model.layers.1.self_attn.q_b_proj.weight"][1] == [heads * qk, cfg["q_lora_rank"]]
    assert tensors["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"][1] == [576, cfg["hidden_size"]]
    assert all(t[0] == "BF16" for n, t in tensors.items() if not n.endswith("e_score_correction_bias"))


def test_tokenizer_carries_kimis_tool_call_tokens_and_covers_the_vocab(tiny):
    tok = json.loads((tiny / "tokenizer.json").read_text())
    cfg = json.loads((tiny / "config.json").read_text())
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    for name in ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                 "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|im_end|>"):
        assert name in ids
    assert len(tok["model"]["vocab"]) + len(ids) == cfg["vocab_size"]  # every id the model emits decodes
    assert cfg["eos_token_id"] == ids["<|im_end|>"]
    assert "tool_calls" in json.loads((tiny / "tokenizer_config.json").read_text())["chat_template"]


def test_special_tokens_and_whitespace_are_never_sampled(tiny):
    """The embedding's dimension 0 is a constant the small output projections leave standing; lm_head
    puts -1 there for the special tokens and bare whitespace: exact output lengths, and a forced JSON
    tool call that cannot stall on newlines (it did on the H100 before)."""
    last = _tensors(sorted(tiny.glob("model-*.safetensors"))[-1])
    first = _tensors(sorted(tiny.glob("model-*.safetensors"))[0])
    embed = _bf16(first["model.embed_tokens.weight"][2])
    head = _bf16(last["lm_head.weight"][2])
    assert np.all(embed[:, 0] == 1.0) and np.abs(embed[:, 1:]).max() < 2.0 ** -4
    banned = {i for i in range(head.shape[0]) if head[i, 0] == -1.0}
    assert banned == set(range(1024 - len(TINY_SPECIAL), 1024)) | {9, 10, 13, 32}
    o_proj = _bf16(last["model.layers.2.self_attn.o_proj.weight"][2])
    assert np.abs(o_proj).max() < 2.0 ** -13
