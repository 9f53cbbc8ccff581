"""llmb.serve.weight_load_timings on the real vLLM 0.26.0 logs of the 4x H200 (kimi-k2-wide, TP 4; trimmed
captures in docs/examples/serve-real-multinode/loadrate/) and on the engine double's lines."""

from __future__ import annotations

from pathlib import Path

from llmb.serve import weight_load_timings

CAP = Path(__file__).resolve().parents[3] / "docs" / "examples" / "serve-real-multinode" / "loadrate"


def test_the_default_loaders_start_on_the_real_engine():
    got = weight_load_timings((CAP / "engine-default-1.log").read_text())
    assert got == {"loading_weights_s": 23.71, "model_loading_gib": 8.26, "model_loading_s": 23.887877,
                   "kv_cache_gib": 117.74}


def test_fastsafetensors_and_prefetch_on_the_real_engine():
    assert weight_load_timings((CAP / "engine-fastsafetensors-2.log").read_text())["loading_weights_s"] == 15.81
    got = weight_load_timings((CAP / "engine-prefetch-1.log").read_text())
    assert got["loading_weights_s"] == 20.17 and got["kv_cache_gib"] == 117.74


def test_a_log_with_a_restart_is_read_from_its_last_start():
    two = (CAP / "engine-default-1.log").read_text() + (CAP / "engine-fastsafetensors-1.log").read_text()
    got = weight_load_timings(two)
    assert got["loading_weights_s"] == 16.99 and got["model_loading_s"] == 17.265205 and got["kv_cache_gib"] == 117.24


def test_the_slowest_rank_counts_and_nothing_is_none():
    log = ("(Worker_TP0 pid=1) INFO [default_loader.py:430] Loading weights took 3.50 seconds\n"
           "(Worker_TP1 pid=2) INFO [default_loader.py:430] Loading weights took 4.25 seconds\n")
    assert weight_load_timings(log)["loading_weights_s"] == 4.25
    assert weight_load_timings("") == {"loading_weights_s": None, "model_loading_gib": None, "model_loading_s": None,
                                       "kv_cache_gib": None}
