"""kimi-k2-wide (tests/hfserver/genmodel.py --kind wide): Kimi-K2's widths with two layers, written tensor by
tensor; the real-width weight-load measurement on the lent 4-GPU machine serves it (docs/real-hardware.md)."""

from __future__ import annotations

import json
import struct

import numpy as np
from hfserver import genmodel


def test_the_wide_config_has_kimi_k2s_widths_and_one_dense_and_one_moe_layer():
    cfg = genmodel.wide_config()
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]) == (7168, 64, 512, 64)
    assert (cfg["n_routed_experts"], cfg["n_shared_experts"], cfg["first_k_dense_replace"]) == (384, 1, 1)
    assert cfg["num_hidden_layers"] == 2 and cfg["model_type"] == "kimi_k2"
    specs = genmodel.wide_tensors(cfg)
    total = sum(int(np.prod(s)) * (4 if k == "f32zero" else 2) for _, s, k in specs)
    assert 34e9 < total < 36e9  # tens of GB, as the issue asks
    names = {n for n, _, _ in specs}
    assert "model.layers.1.mlp.experts.383.down_proj.weight" in names and "model.layers.0.mlp.gate_proj.weight" in names
    assert "model.layers.1.mlp.shared_experts.up_proj.weight" in names


def test_the_files_are_safetensors_with_an_index(tmp_path, monkeypatch):
    # the same writer at small widths (the real one writes 35 GB)
    monkeypatch.setattr(genmodel, "WIDE_CONFIG", {**genmodel.WIDE_CONFIG, "hidden_size": 64, "intermediate_size": 96,
                                                  "moe_intermediate_size": 32, "n_routed_experts": 8,
                                                  "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 48})
    info = genmodel.wide_generate(tmp_path, shard_gb=0.0003)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert info["shard_count"] > 1 and len(set(index["weight_map"].values())) == info["shard_count"]
    seen = 0
    for shard in sorted(set(index["weight_map"].values())):
        raw = (tmp_path / shard).read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        header.pop("__metadata__")
        end = max(t["data_offsets"][1] for t in header.values())
        assert len(raw) == 8 + n + end  # every tensor's bytes written, nothing more
        seen += len(header)
    assert seen == len(index["weight_map"]) and index["metadata"]["total_size"] == info["params"] * 2
    assert json.loads((tmp_path / "config.json").read_text())["n_routed_experts"] == 8
