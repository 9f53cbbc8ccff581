"""Engines are modules with a capabilities record: the registry, and adding an engine as one module.

toy_engine.py is a whole engine (capabilities, topology, engine args, services); registering it
and adding its flag set to a data directory is all it takes to plan an inventory with it.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import toy_engine
from llmbctl.engines.capabilities import MODES, EngineCaps
from llmbctl.planner import PlanError, engines, plan_inventory
from planner_helpers import REPO, load_inventory

PLANNER = REPO / "lib" / "llmbctl" / "planner"

TOY_FLAGSET = {
    "engine": "toyserve",
    "version": "1.0",
    "command": ["toyserve", "serve"],
    "style": "argparse",
    "flags": {"--port": {"type": "int"}, "--tp": {"type": "int"}, "--mem-fraction": {"type": "float"}},
    "planner_owned": ["--port", "--tp"],
}


def test_registry_is_built_from_the_engine_modules():
    assert list(engines.ENGINES) == ["vllm", "vllm-ascend", "sglang", "trtllm", "ktransformers"]
    for name, module in engines.ENGINES.items():
        caps = module.CAPS
        assert isinstance(caps, EngineCaps) and caps.name == name
        assert set(caps.modes) <= set(MODES) and caps.vendors and caps.installs
    # the engine suggested on a platform is the first registered one that runs there
    assert engines.engine_for_vendor("ascend") == "vllm-ascend"
    assert engines.engine_for_vendor("amd") == engines.engine_for_vendor("nvidia") == "vllm"


def test_capabilities_refuse_an_unknown_mode():
    with pytest.raises(ValueError, match="unknown topology modes"):
        dataclasses.replace(toy_engine.CAPS, modes=("torus",))


def _engine_names_in(path: Path, skip: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    skipped = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef) and f.name in skip
        for n in ast.walk(f)
    }
    return [
        f"{path.name}:{n.lineno}: {n.value!r}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value in engines.ENGINES and id(n) not in skipped
    ]


def test_shared_planner_code_names_no_engine():
    """core, the checks and the shared helpers decide from capabilities, never from an engine's name."""
    # per_device_weight_bytes, check_fit and model_patches belong to the memory-fit rework
    skip = {"per_device_weight_bytes", "check_fit", "model_patches"}
    files = ["core.py", "validation.py", "topology.py", "containers.py", "engines/common.py"]
    found = [hit for f in files for hit in _engine_names_in(PLANNER / f, skip)]
    assert not found, found


@pytest.fixture
def toyserve(tmp_path, monkeypatch):
    """toy_engine registered and its flag set in a copy of data/: llmb_engine accepts it (its
    values are the registry's)."""
    data = tmp_path / "data"
    shutil.copytree(REPO / "data", data)
    (data / "engines" / "toyserve-1.0.yml").write_text("# toyserve flag set\n" + json.dumps(TOY_FLAGSET))
    monkeypatch.setitem(engines.ENGINES, "toyserve", toy_engine)
    return data


def _toy_inventory(name: str = "h100", **overrides):
    if name == "h100":  # 8x H100 cannot hold Kimi-K2-Thinking with a 256k sequence of KV without DCP
        overrides.setdefault("llmb_platform", "h200-hgx8")
    hv, groups = load_inventory(name)
    for host in hv.values():
        host.update(
            {
                "llmb_engine": "toyserve",
                "llmb_engine_version": "1.0",
                "llmb_preset": "none",
                "llmb_decode_context_parallel": 1,
                **overrides,
            }
        )
    return hv, groups


def test_a_new_engine_is_one_module(toyserve):
    planned = plan_inventory(*_toy_inventory(), str(toyserve))
    (host,) = planned.to_list()
    (svc,) = host["services"]
    model = "/home/ubuntu/models/Kimi-K2-Thinking"
    assert svc["argv"] == [
        "/opt/llmb/venvs/toyserve-1.0/bin/toyserve",
        "serve",
        model,
        "--port",
        "8000",
        "--tp",
        "8",
    ]
    assert svc["kind"] == "systemd" and svc["health"]["url"] == "http://10.0.0.11:8000/health"
    assert planned.topology.mode == "single" and planned.topology.caps is toy_engine.CAPS
    assert "single: 1 node(s), TP 8 x PP 1 x DP 1, 8 of 8 devices per node" in planned.notes


def test_a_new_engine_is_checked_from_its_capabilities(toyserve, monkeypatch):
    # installs: host only
    with pytest.raises(PlanError) as err:
        plan_inventory(*_toy_inventory(llmb_install="container"), str(toyserve))
    (problem,) = [p for p in err.value.problems if p.check == "install" and "deployed as" in p.message]
    assert "toyserve is deployed as a host install only" in problem.message
    assert problem.expected == "host" and problem.fix == "set llmb_install: host"
    # vendors: nvidia only; the engine suggested instead comes from the registry
    with pytest.raises(PlanError) as err:
        plan_inventory(*_toy_inventory("mi300x", llmb_install="host"), str(toyserve))
    (problem,) = [p for p in err.value.problems if p.check == "engine-platform"]
    assert "toyserve does not run on mi300x" in problem.message and "llmb_engine: vllm" in problem.fix
    # memory fraction: the capabilities' default when the flag is not given
    monkeypatch.setattr(toy_engine, "CAPS", dataclasses.replace(toy_engine.CAPS, memory_fraction_default=0.5))
    with pytest.raises(PlanError) as err:
        plan_inventory(*_toy_inventory(), str(toyserve))
    (problem,) = [p for p in err.value.problems if p.check == "memory-fit"]
    assert "x 0.5 (--mem-fraction)" in problem.message
    # decode context parallel and the EP switch do not apply to it
    monkeypatch.setattr(
        toy_engine, "CAPS", dataclasses.replace(toy_engine.CAPS, memory_fraction_default=0.95)
    )
    with pytest.raises(PlanError) as err:
        plan_inventory(
            *_toy_inventory(llmb_decode_context_parallel=8, llmb_expert_parallel=True), str(toyserve)
        )
    messages = [p.message for p in err.value.problems]
    assert "decode context parallel is planned for vLLM only, not toyserve" in messages
    assert "llmb_expert_parallel is the vLLM switch; toyserve takes an EP size" in messages
