"""Each engine service keeps what it compiles in a directory of its own (llmb_compile_cache_dir/<service>):
the release's cache variables (hand overlay cache_env, read from the vLLM 0.26.0 wheel), below the
inventory's llmb_engine_env; a container mounts the directory; the serve role creates it."""

from __future__ import annotations

from pathlib import Path

import yaml
from llmbctl.catalog import overlay_errors

REPO = Path(__file__).resolve().parents[4]
VARS = ("DG_JIT_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "VLLM_CACHE_ROOT")


def _services(plan) -> list[tuple[str, dict]]:
    return [(h["host"], s) for h in plan.to_list() for s in h["services"]]


def test_every_vllm_service_of_every_node_gets_its_cache_directory(planned):
    plan = planned("h200-2x8-k3")  # vLLM's own multi-node launch, two nodes
    got = _services(plan)
    assert len(got) == 2
    for _host, svc in got:
        d = "/var/cache/llmb/compile/llmb-vllm"
        assert svc["cache_dir"] == d
        assert {k: svc["env"][k] for k in VARS} == {
            "DG_JIT_CACHE_DIR": f"{d}/deep_gemm", "FLASHINFER_WORKSPACE_BASE": f"{d}/flashinfer",
            "TORCHINDUCTOR_CACHE_DIR": f"{d}/inductor", "TRITON_CACHE_DIR": f"{d}/triton", "VLLM_CACHE_ROOT": f"{d}/vllm"}
        assert svc["env"]["VLLM_ALLREDUCE_USE_FLASHINFER"] == "1"  # the recipe's env stays


def test_ray_workers_keep_theirs_beside_the_api(planned):
    """vLLM's Ray actors inherit the raylet's environment: the Ray unit has its own directory."""
    dirs = {(h, s["name"]): s["cache_dir"] for h, s in _services(planned("h800"))}
    assert dirs == {("gpu-h800-01", "llmb-ray"): "/var/cache/llmb/compile/llmb-ray",
                    ("gpu-h800-01", "llmb-vllm"): "/var/cache/llmb/compile/llmb-vllm",
                    ("gpu-h800-02", "llmb-ray"): "/var/cache/llmb/compile/llmb-ray"}


def test_the_knob_moves_it_and_the_inventorys_env_wins(planned):
    plan = planned("h200-2x8-k3", llmb_compile_cache_dir="/data/jit/",
                   llmb_engine_env={"TRITON_CACHE_DIR": "/scratch/triton", "VLLM_CACHE_ROOT": None})
    for _host, svc in _services(plan):
        assert svc["cache_dir"] == "/data/jit/llmb-vllm"
        assert svc["env"]["TORCHINDUCTOR_CACHE_DIR"] == "/data/jit/llmb-vllm/inductor"
        assert svc["env"]["TRITON_CACHE_DIR"] == "/scratch/triton"
        assert "VLLM_CACHE_ROOT" not in svc["env"]  # a null removes it: vLLM's own default


def test_a_container_mounts_its_directory_and_exec_uses_the_containers(planned):
    got = {s["name"]: s for _h, s in _services(planned("mi300x-2x8"))}
    box, api = got["kimi-K2"], got["kimi-K2-serve"]
    d = "/var/cache/llmb/compile/kimi-K2"
    assert f"{d}:{d}" in box["mounts"] and box["env"]["VLLM_CACHE_ROOT"] == f"{d}/vllm"
    assert api["kind"] == "exec" and api["cache_dir"] == d and api["env"]["VLLM_CACHE_ROOT"] == f"{d}/vllm"
    assert "VLLM_CACHE_ROOT" in api["argv"]  # docker exec -e NAME (the value from the unit's environment)


def test_an_engine_without_the_table_gets_none(planned):
    for _host, svc in _services(planned("h200-sglang")):
        assert "cache_dir" not in svc and not set(VARS) & set(svc["env"])


def test_the_overlay_table_is_checked():
    assert any("cache_env" in e for e in overlay_errors({"engine": "x", "cache_env": {"VLLM_CACHE_ROOT": "../up"}}))
    assert any("cache_env" in e for e in overlay_errors({"engine": "x", "cache_env": {"bad name": "vllm"}}))
    assert not overlay_errors({"engine": "x", "cache_env": {"VLLM_CACHE_ROOT": "vllm"}})


def test_the_serve_role_creates_the_directories():
    tasks = yaml.safe_load((REPO / "roles/serve/tasks/compile_cache.yml").read_text())
    task = next(t for t in tasks if "llmb_compile_cache" in t)
    # one call per host: every service's plan cache_dir, by service name (the module creates each)
    assert "cache_dir" in task["llmb_compile_cache"]["dirs"]
    assert "name" in task["llmb_compile_cache"]["dirs"]
