"""The sample inventories list every knob of every stage (scripts/inventory-knobs writes them from
roles/*/meta/argument_specs.yml): the samples fail this test when an argument_spec gains a knob."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _load():
    loader = importlib.machinery.SourceFileLoader("inventory_knobs", str(ROOT / "scripts" / "inventory-knobs"))
    spec = importlib.util.spec_from_loader("inventory_knobs", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


IK = _load()
SAMPLES = IK.samples()


def _stage_options() -> list[str]:
    out = []
    for spec_file in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(spec_file.read_text())["argument_specs"] or {}).values():
            out += [o for o in (entry.get("options") or {}) if not o.startswith("llmb_")]
    return sorted(set(out))


def test_every_sample_inventory_is_covered():
    names = {p.name for p in SAMPLES}
    assert {"h100", "h200", "h800", "h800-dp-ep", "a3", "mi300x", "h200-sglang", "h200-trtllm", "sim"} <= names


@pytest.mark.parametrize("inv", SAMPLES, ids=lambda p: p.name)
def test_sample_lists_every_stage_knob_with_default(inv):
    text = (inv / "group_vars" / "all" / "stages.yml").read_text()
    opts = _stage_options()
    assert len(opts) >= 80
    for opt in opts:
        assert re.search(rf"^# {opt}: .+\n(#.*\n)*?#   default: ", text, re.M), f"{inv.name}: {opt} undocumented"
    assert yaml.safe_load(text) is None  # comments only: the samples' plans do not change
    assert max(len(line) for line in text.splitlines()) <= 110  # ansible-lint's yaml rule reads them


def test_samples_are_what_the_argument_specs_give():
    assert IK.drift() == [], "run scripts/inventory-knobs"


def test_a_new_knob_in_an_argument_spec_is_drift(tmp_path):
    roles = tmp_path / "roles"
    shutil.copytree(ROOT / "roles", roles)
    inv = tmp_path / "inventories"
    shutil.copytree(ROOT / "inventories" / "h800", inv / "h800")
    assert IK.drift(inv, roles) == []
    spec = roles / "bench" / "meta" / "argument_specs.yml"
    doc = yaml.safe_load(spec.read_text())
    doc["argument_specs"]["main"]["options"]["bench_new_knob"] = {"type": "int", "default": 3, "description": "New."}
    spec.write_text(yaml.safe_dump(doc))
    problems = IK.drift(inv, roles)
    assert len(problems) == 1 and "bench_new_knob" in problems[0] and "h800" in problems[0]


def test_choices_and_derived_defaults_are_shown():
    text = IK.render()
    assert "# weights_strategy: " in text and "#   type: str; valid: shared | each | relay" in text
    assert "#   default: derived: {{ llmb_platform }}" in text
    assert "#   secret: keep it in ansible-vault" in text  # weights_hf_token (no_log)


def test_samples_list_every_engine_and_every_shipped_release():
    """llmb.yml's `valid:` lines come from where the values are kept (scripts/inventory-knobs)."""

    from llmbctl.catalog import Catalog
    from llmbctl.planner.inventory import engine_names

    cat = Catalog(ROOT / "data")
    for inv in SAMPLES:
        text = (inv / "group_vars" / "all" / "llmb.yml").read_text()
        if "# llmb_engine: " not in text:
            continue  # the local-* samples run the verify stage only
        joined = re.sub(r"\n#     ", " ", text)
        engine_line = re.search(r"^# llmb_engine: .*\n#   valid: (.*)$", joined, re.M).group(1)
        assert engine_line.split(" | ") == list(engine_names()), inv.name
        assert "ktransformers" in engine_line
        versions = re.search(r"^#   valid: (vllm: .*)$", joined, re.M).group(1)
        for engine in engine_names():
            assert f"{engine}: {' '.join(cat.flagset_versions(engine))}" in versions, (inv.name, engine)
        assert max(len(line) for line in text.splitlines() if line.startswith("#   valid")) <= 110


def test_a_new_engine_is_drift_in_the_samples_llmb_yml(tmp_path):
    from dataclasses import replace
    from types import SimpleNamespace

    from llmbctl.planner import engines

    inv = tmp_path / "inventories"
    shutil.copytree(ROOT / "inventories" / "h800", inv / "h800")
    assert IK.drift(inv) == []
    vllm = engines.ENGINES["vllm"]
    fake = SimpleNamespace(CAPS=replace(vllm.CAPS, name="newengine"), topology=vllm.topology,
                           engine_args=vllm.engine_args, services=vllm.services)
    engines.register(fake)
    try:
        problems = IK.drift(inv)
        assert len(problems) == 1 and "h800/group_vars/all/llmb.yml" in problems[0]
        fixed = IK.refresh_llmb((inv / "h800" / "group_vars" / "all" / "llmb.yml").read_text(), IK.llmb_valid())
        assert "#   valid: vllm | vllm-ascend | sglang | trtllm | ktransformers | newengine" in fixed
        assert yaml.safe_load(fixed) == yaml.safe_load((ROOT / "inventories/h800/group_vars/all/llmb.yml").read_text())
    finally:
        engines.unregister("newengine")
