"""A simulated node whose NVIDIA driver is older than the chosen engine release needs is refused by
verify (engine.driver) before any download: driver 570 and a CUDA 13 vLLM release."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from llmbctl import verify as V
from llmbctl.catalog import Catalog
from llmbctl.enginecat import render
from llmbctl.hw.facts import build_facts

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


def _filter():
    import importlib.util

    spec = importlib.util.spec_from_file_location("llmb_enginecat_filter", REPO / "plugins" / "filter" /
                                                  "llmb_enginecat.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.llmb_engine_driver_finding


def test_preflight_refuses_driver_570_for_vllm_0_23_0_by_name(node, tmp_path):
    """Stage 0 (playbooks/preflight.yml) asks the node's nvidia-smi for its driver and refuses the
    chosen release through the same finding as verify, before the engine and weights stages."""
    node.use("h100-x1")
    node.fault("driver_version", "version=570.148.08")
    out = node.out("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    data = _catalog(tmp_path).root
    finding = _filter()(out, "vllm", "0.23.0", "nvidia", str(data))
    assert finding["ok"] is False and finding["found"] == "570.148.08"
    assert "vllm 0.23.0" in finding["expected"] and "580.65.06" in finding["expected"]
    assert "llmb_engine_version" in finding["hint"]
    assert _filter()(out, "vllm", "0.19.1", "nvidia", str(data))["ok"] is True  # CUDA 12: 570 runs it
    assert _filter()(out, "vllm", "0.23.0", "amd", str(data)) == {}  # not an NVIDIA node: not this check
    garbage = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    assert _filter()(garbage, "vllm", "0.23.0", "nvidia", str(data))["found"] == "not reported"


def test_driver_checks_run_before_anything_is_downloaded():
    """site.yml: preflight (stage 0) and verify (stage 1) come before the engine and weights stages;
    preflight's engine.driver assert runs in the play that first contacts the nodes."""
    stages = [ln.split(":", 1)[1].strip() for ln in (REPO / "site.yml").read_text().splitlines()
              if "import_playbook:" in ln]
    order = [Path(s).stem for s in stages]
    assert order.index("preflight") < order.index("verify") < order.index("engine") < order.index("weights")
    text = (REPO / "playbooks" / "preflight.yml").read_text()
    assert "llmb_preflight:" in text and "vendor: \"{{ llmb_deployment.platform.vendor" in text
    module = (REPO / "plugins" / "modules" / "llmb_preflight.py").read_text()
    assert '"--query-gpu=driver_version", "--format=csv,noheader"' in module


def test_preflight_driver_problem_is_verifys_finding_named_for_preflight(node, tmp_path):
    """llmbctl.nodeos.driver_problems (preflight's judgement, llmb_preflight action): the same finding as
    the filter above, one line naming host, check, expected and found; nothing where it does not apply."""
    from llmbctl.nodeos import driver_problems

    node.use("h100-x1")
    node.fault("driver_version", "version=570.148.08")
    out = node.out("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    data = str(_catalog(tmp_path).root)
    (line,) = driver_problems("gpu-1", out, "vllm", "0.23.0", "nvidia", data)
    assert line.startswith("gpu-1: preflight engine.driver: expected NVIDIA driver >= 580.65.06 for vllm 0.23.0")
    assert "found 570.148.08" in line
    assert driver_problems("gpu-1", out, "vllm", "0.19.1", "nvidia", data) == []  # CUDA 12: 570 runs it
    assert driver_problems("gpu-1", out, "vllm", "0.23.0", "amd", data) == []
    (none,) = driver_problems("gpu-1", "", "vllm", "0.23.0", "nvidia", data)  # no nvidia-smi output
    assert "found not reported" in none
