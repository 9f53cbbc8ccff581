"""A simulated node whose NVIDIA driver is older than the chosen engine release needs is refused by
verify (engine.driver) before any download: driver 570 and a CUDA 13 vLLM release."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from llmb import verify as V
from llmb.catalog import Catalog
from llmb.enginecat import render
from llmb.hw.facts import build_facts

REPO = Path(__file__).resolve().parents[3]


def _facts(node) -> dict:
    probes = [
        {"name": "smi-qx", "kind": "nvidia-smi-q-xml", "cmd": "nvidia-smi -q -x", "rc": 0,
         "stdout": node.out("nvidia-smi", "-q", "-x"), "stderr": ""},
    ]
    return build_facts(probes, "nvidia")


def _catalog(tmp_path: Path) -> Catalog:
    """data/ with vLLM 0.23.0 as shipped, or (before it ships) a copy whose requirements say CUDA 13."""
    cat = Catalog(REPO / "data")
    if cat.flagset_doc("vllm-0.23.0") is not None:
        return cat
    shutil.copytree(REPO / "data", tmp_path / "data")
    doc = json.loads(json.dumps(cat.flagset_doc("vllm-0.19.1")))
    doc["version"] = "0.23.0"
    doc["requirements"] = {"cuda_major": 13, "cuda_libs": ["libcudart.so.13"], "nvidia_driver_min": "580.65.06"}
    (tmp_path / "data" / "engines" / "vllm-0.23.0.yml").write_text(render(doc))
    return Catalog(tmp_path / "data")


def test_driver_570_node_refused_for_vllm_0_23_0(node, tmp_path):
    node.use("h100-x1")
    node.fault("driver_version", "version=570.148.08")
    facts = _facts(node)
    assert facts["driver_version"] == "570.148.08"
    cat = _catalog(tmp_path)
    engine = cat.release_requirements("vllm", "0.23.0")
    assert engine["requirements"]["cuda_major"] == 13
    profile = V.load_profile("h100-x1")
    checks = {c["id"]: c for c in V.verify(facts, profile, engine=engine)}
    c = checks["engine.driver"]
    assert c["ok"] is False
    assert c["found"] == "570.148.08" and "vllm 0.23.0" in c["expected"] and "580.65.06" in c["expected"]
    assert "llmb_engine_version" in c["hint"]
    # the same node runs the CUDA 12 release it pins today
    ok = {c["id"]: c for c in V.verify(facts, profile, engine=cat.release_requirements("vllm", "0.19.1"))}
    assert ok["engine.driver"]["ok"] is True


def test_driver_580_node_runs_vllm_0_23_0(node, tmp_path):
    node.use("h100-x1")  # driver 580.159.04
    checks = {c["id"]: c for c in V.verify(_facts(node), V.load_profile("h100-x1"),
                                            engine=_catalog(tmp_path).release_requirements("vllm", "0.23.0"))}
    assert checks["engine.driver"]["ok"] is True


def test_verify_action_passes_the_inventory_release():
    """plugins/action/llmb_verify.py hands verify the chosen release (llmb_engine / _version)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("llmb_verify_action", REPO / "plugins" / "action" / "llmb_verify.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = mod._engine_release({"llmb_engine": "vllm", "llmb_engine_version": "0.23.0"})
    assert got["release"] == "vllm 0.23.0" and got["requirements"]["cuda_major"] == 13
    newest = Catalog(REPO / "data").newest_version("vllm")
    assert mod._engine_release({"llmb_engine": "vllm"})["release"] == f"vllm {newest}"
    assert mod._engine_release({"llmb_engine": "vllm", "llmb_engine_version": "9.9"}) is None
    assert mod._engine_release({}) is None
