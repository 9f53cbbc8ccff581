"""Data the planner reads: model profiles, presets, platform accessor, sample inventories."""

from __future__ import annotations

import re

import pytest
import yaml
from llmbctl.catalog import Catalog
from llmbctl.planner.inventory import KNOBS
from planner_helpers import INVENTORIES, REPO

DATA = Catalog(REPO / "data")
MODELS = DATA.model_names()


def test_expected_models_exist():
    assert {"kimi-k2-thinking", "kimi-k2-instruct", "kimi-k2-sim"} <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_model_profile_fields(name):
    doc = DATA.model(name).raw
    for key in (
        "repo_id",
        "total_size_bytes",
        "shard_count",
        "params_total",
        "weight_dtype",
        "bytes_per_param",
        "served_model_name",
        "engine_flags",
        "config_patches",
        "files",
    ):
        assert key in doc, f"{name} lacks {key}"
    rev = doc.get("revision")
    assert (rev is not None and re.fullmatch(r"[0-9a-f]{40}", rev)) or "PLACEHOLDER" in doc.get(
        "revision_note", ""
    )
    assert doc["files"]["allow_patterns"]
    for key, patches in doc["config_patches"].items():
        for patch in patches:
            assert set(patch) == {"path", "value", "expect"}, (key, patch)


def test_kimi_patches_are_the_recipes():
    doc = DATA.model("kimi-k2-thinking").raw
    assert doc["config_patches"]["vllm-ascend"] == [
        {"path": "quantization_config.config_groups.group_0.targets", "value": ["MoE"], "expect": ["Linear"]}
    ]
    assert doc["config_patches"]["trtllm"] == [
        {"path": "model_type", "value": "deepseek_v3", "expect": "kimi_k2"}
    ]
    assert doc["engine_flags"]["vllm"]["tool-call-parser"] == "kimi_k2"
    assert doc["engine_flags"]["vllm"]["reasoning-parser"] == "kimi_k2"


@pytest.mark.parametrize("name", ["long-context", "low-latency", "high-throughput"])
def test_presets_cover_every_engine(name):
    doc = DATA.preset(name).raw
    assert doc["source"].startswith("seed")
    assert set(doc["engines"]) == {"vllm", "vllm-ascend", "sglang", "trtllm"}


def test_planner_platforms_are_the_verify_profiles():
    """The planner's platform facts come from the same files verify checks nodes against."""
    assert DATA.platform_names() == sorted(p.stem for p in (REPO / "data" / "platforms").glob("*.yml"))
    for name in DATA.platform_names():
        p = DATA.platform(name)
        assert p.device_count >= 1 and p.device_memory_gb > 10 and p.vendor in ("nvidia", "amd", "ascend")
    assert DATA.platform("h800-hgx8").device_count == 8
    assert DATA.platform("a3-16npu").vendor == "ascend"
    assert DATA.platform("mi300x-8").device_memory_mib == 196592


def test_unknown_platform_is_a_problem_listing_the_profiles(planned):
    from llmbctl.planner import PlanError

    with pytest.raises(PlanError) as err:
        planned("h800", llmb_platform="h900-hgx8")
    (problem,) = [p for p in err.value.problems if p.check == "platform"]
    assert problem.message == "unknown platform 'h900-hgx8'" and "h800-hgx8" in problem.expected


def test_malformed_platform_is_a_problem_naming_file_and_field(tmp_path, inventory):
    import shutil

    from llmbctl.planner import PlanError, plan_inventory

    shutil.copytree(REPO / "data", tmp_path / "data")
    path = tmp_path / "data" / "platforms" / "h800-hgx8.yml"
    path.write_text(path.read_text().replace("  count: 8\n", "", 1))
    hv, groups = inventory("h800")
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(tmp_path / "data"))
    (problem,) = err.value.problems
    assert problem.check == "platform" and problem.found == str(path)
    assert "devices.count is missing" in problem.message and str(path) in problem.message


# every sample inventory of the launch planner (a new one is covered by being there); the local-*
# ones are verify-only (one lent machine, no launch plan)
SAMPLES = sorted(p.parent.name for p in INVENTORIES.glob("*/hosts.yml") if not p.parent.name.startswith("local-"))


def test_all_sample_inventories_exist():
    assert {"a3", "a3-2x16", "h100", "h200", "h200-1p1d", "h200-4p12d", "h200-sglang", "h200-trtllm", "h800",
            "h800-dp-ep", "ktransformers", "mi300x", "mi300x-2x8", "mi355x", "sim"} <= set(SAMPLES)
    assert all((INVENTORIES / name / "group_vars" / "all").is_dir() for name in SAMPLES)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_inventory_documents_every_knob(name):
    text = "\n".join(p.read_text() for p in sorted((INVENTORIES / name / "group_vars" / "all").glob("*.yml")))
    for knob in KNOBS:
        if knob.per_host:
            continue
        assert re.search(rf"^# {knob.name}: .+\n(#.*\n)*#   default: ", text, re.M), (
            f"{knob.name} undocumented"
        )
        assert re.search(rf"^(# )?{knob.name}:", text, re.M)
    hosts_text = (INVENTORIES / name / "hosts.yml").read_text()
    hosts = yaml.safe_load(hosts_text)
    accel = hosts["all"]["children"]["accel_nodes"]
    assert accel.get("hosts") or all(g.get("hosts") for g in accel["children"].values()), name  # disagg: child groups
    # the per-host cluster address is documented where hosts are listed (every sample plans with it)
    assert re.search(r"^# llmb_node_ip: .+\(default: ansible_host\)", hosts_text, re.M), f"{name}: llmb_node_ip undocumented"
