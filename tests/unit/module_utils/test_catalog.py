"""llmbctl.catalog: the one loader of data/ (records, vendor vocabulary, errors, patches) and its consumers."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from llmbctl import verify
from llmbctl.catalog import (
    VENDORS,
    Catalog,
    CatalogError,
    EngineRelease,
    ModelRecord,
    PlatformRecord,
    PresetRecord,
    select_config_patches,
)
from llmbctl.engines.registry import FlagSet
from llmbctl.planner.engines import ENGINES
from llmbctl.planner.validation import model_patches
from llmbctl.secrets import is_secret_name, masked_argv, secret_keys

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "data"
CAT = Catalog(DATA)


def _filters(name: str) -> dict:
    spec = importlib.util.spec_from_file_location(f"{name}_filter", REPO / "plugins" / "filter" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()


WEIGHTS = _filters("llmb_weights")
CATALOG = _filters("llmb_catalog")


@pytest.fixture
def data(tmp_path) -> Path:
    """A private copy of data/ to break."""
    shutil.copytree(DATA, tmp_path / "data")
    return tmp_path / "data"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


# --------------------------------------------------------------------------- every file loads


def test_every_file_in_data_loads():
    kinds = {"platforms": CAT.platforms(), "models": CAT.models(), "engines": CAT.engine_releases(),
             "presets": [CAT.preset(n) for n in CAT.preset_names()]}
    for kind, records in kinds.items():
        assert [r.name for r in records] == sorted(p.stem for p in (DATA / kind).glob("*.yml")), kind
    assert all(isinstance(r, PlatformRecord) and r.vendor in VENDORS for r in kinds["platforms"])
    assert all(isinstance(r, ModelRecord) and r.repo_id for r in kinds["models"])
    assert all(isinstance(r, PresetRecord) and r.engines for r in kinds["presets"])
    assert all(isinstance(r, EngineRelease) for r in kinds["engines"])
    for rel in kinds["engines"]:
        fs = CAT.flagset(rel.engine, rel.version)
        assert isinstance(fs, FlagSet) and fs.name == rel.name and fs.flags
        assert set(fs.images) <= set(VENDORS), rel.name


def test_platform_record_fields():
    p = CAT.platform("h800-hgx8")
    assert (p.vendor, p.device_count, p.device_memory_mib, p.device_model) == ("nvidia", 8, 81559, "NVIDIA H800")
    assert p.device_memory_gb == pytest.approx(81559 / 1024)
    assert p.driver_min_version and p.fabric_manager_required is True and p.rdma_nics == 8
    a3 = CAT.platform("a3-16npu")
    assert (a3.vendor, a3.device_count, a3.device_model) == ("ascend", 16, "Ascend910")
    assert a3.profile()["interconnect"]["matrix"]["same_card"] == ["SIO"]
    a3.profile()["devices"]["count"] = 1  # a copy: the cached record stays as loaded
    assert CAT.platform("a3-16npu").raw["devices"]["count"] == 16


def test_model_record_fields():
    m = CAT.model("kimi-k2-thinking")
    assert m.repo_id == "moonshotai/Kimi-K2-Thinking" and m.shard_count == 62
    assert m.config_facts["model_type"] == "kimi_k2"
    assert m.engine_section("vllm")["tool-call-parser"] == "kimi_k2"
    assert [p.to_dict() for p in m.patches_for("trtllm", "h200-hgx8")] == [
        {"path": "model_type", "value": "deepseek_v3", "expect": "kimi_k2", "key": "trtllm"}
    ]


# --------------------------------------------------------------------------- errors name file and field


def test_platform_without_count_names_file_and_field(data):
    path = data / "platforms" / "h800-hgx8.yml"
    _edit(path, "  count: 8\n", "")
    with pytest.raises(CatalogError) as err:
        Catalog(data).platform("h800-hgx8")
    assert err.value.path == str(path) and err.value.field == "devices.count"
    assert str(err.value) == f"platform profile 'h800-hgx8' ({path}) is invalid: devices.count is missing"


@pytest.mark.parametrize("bad", ["huawei", "Ascend", "intel"])
def test_platform_with_another_vendor_word_is_refused(data, bad):
    path = data / "platforms" / "a3-16npu.yml"
    _edit(path, "vendor: ascend", f"vendor: {bad}")
    with pytest.raises(CatalogError, match=rf"\(.*a3-16npu.yml\) is invalid: vendor must be one of "
                                           rf"nvidia, amd, ascend, found '{bad}'") as err:
        Catalog(data).platform("a3-16npu")
    assert err.value.field == "vendor"


def test_platform_ill_typed_and_misnamed(data):
    path = data / "platforms" / "h100-x1.yml"
    _edit(path, "  memory_mib: 81559", '  memory_mib: "80GB"')
    with pytest.raises(CatalogError, match="devices.memory_mib must be int, found '80GB'"):
        Catalog(data).platform("h100-x1")
    _edit(path, '  memory_mib: "80GB"', "  memory_mib: 81559")
    _edit(path, "name: h100-x1", "name: h100-x2")
    with pytest.raises(CatalogError, match="name must be 'h100-x1' \\(the file name\\), found 'h100-x2'"):
        Catalog(data).platform("h100-x1")


def test_overrides_are_merged_and_checked_again():
    p = CAT.platform("h800-hgx8", {"rdma": {"nics": 4}})
    assert p.rdma_nics == 4 and p.raw["rdma"]["rate_gbps"] == 400
    assert CAT.platform("h800-hgx8").rdma_nics == 8
    with pytest.raises(CatalogError, match="vendor must be one of"):
        CAT.platform("h800-hgx8", {"vendor": "huawei"})


@pytest.mark.parametrize("name", ["h900", "../platforms/h800-hgx8", "H800-HGX8", "", None, "a/b"])
def test_unknown_or_hostile_names(name):
    with pytest.raises(CatalogError, match="unknown platform profile .*; known: a2-910b-8, a3-16npu"):
        CAT.platform(name)


def test_model_with_a_bad_patch_names_file_and_field(data):
    path = data / "models" / "kimi-k2-sim.yml"
    _edit(path, "config_patches:\n", "config_patches:\n  sglang: [{path: model_type}]\n")
    with pytest.raises(CatalogError) as err:
        Catalog(data).model("kimi-k2-sim")
    assert str(path) in str(err.value) and "config_patches.sglang: each patch needs path and value" in str(err.value)
    assert err.value.field == "config_patches.sglang"


def test_model_without_repo_and_preset_without_engines(data):
    _edit(data / "models" / "kimi-k2-sim.yml", "repo_id: llmb-test/kimi-k2-sim", "repo: x")
    with pytest.raises(CatalogError, match="kimi-k2-sim.yml\\) is invalid: repo_id is missing"):
        Catalog(data).model("kimi-k2-sim")
    _edit(data / "presets" / "low-latency.yml", "engines:", "engine:")
    with pytest.raises(CatalogError, match="low-latency.yml\\) is invalid: engines is missing"):
        Catalog(data).preset("low-latency")


def test_engine_images_use_the_vendor_vocabulary(data):
    path = data / "engines" / "hand" / "vllm-ascend.yml"  # images are hand-kept (the overlay)
    _edit(path, '"ascend": "quay.io', '"huawei": "quay.io')
    with pytest.raises(CatalogError, match="images.huawei: vendor must be one of nvidia, amd, ascend"):
        Catalog(data).flagset("vllm-ascend", "0.20.2rc1")


def test_bad_yaml_and_json_name_the_file(data):
    (data / "presets" / "broken.yml").write_text("engines: [\n")
    with pytest.raises(CatalogError, match="broken.yml: not valid YAML"):
        Catalog(data).preset("broken")
    (data / "engines" / "x-1.yml").write_text("# c\n{,}\n")
    with pytest.raises(CatalogError, match="x-1.yml: not valid JSON"):
        Catalog(data).engine_release("x-1")


def test_cached_until_the_file_changes(data):
    cat = Catalog(data)
    first = cat.platform("h100-x1")
    assert cat.platform("h100-x1") is first
    path = data / "platforms" / "h100-x1.yml"
    _edit(path, "  count: 1\n", "  count: 2\n")
    _edit(path, "device_nodes: [0]", "device_nodes: [0, 0]")
    os.utime(path, (first_mtime := path.stat().st_mtime + 5, first_mtime))
    assert cat.platform("h100-x1").device_count == 2


def test_directory_overrides(tmp_path):
    (tmp_path / "p").mkdir()
    shutil.copy(DATA / "platforms" / "h100-x1.yml", tmp_path / "p")
    assert Catalog(platforms_dir=tmp_path / "p").platform_names() == ["h100-x1"]
    assert verify.profile_names(str(tmp_path / "p")) == ["h100-x1"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "tiny.yml").write_text(json.dumps({"repo_id": "o/tiny", "config_patches": {}}))
    assert Catalog(models_dir=tmp_path / "m").model("tiny").repo_id == "o/tiny"


# --------------------------------------------------------------------------- consumers agree


def _engines() -> list[str]:
    return sorted({r.engine for r in CAT.engine_releases()} - {"ray"})


def test_weights_and_planner_choose_the_same_patches():
    """Every model x engine x platform: the weights filter and the planner's model_patches agree."""
    seen = 0
    for m in CAT.models():
        profile = CATALOG["llmb_catalog_model"](m.name)
        for engine in _engines():
            for p in CAT.platforms():
                ctx = SimpleNamespace(model_record=m, model=m.raw, engine=engine, platform=p)
                planner = model_patches(ctx)
                weights = WEIGHTS["llmb_weights_patches"](profile, engine, p.name)
                assert planner == weights, (m.name, engine, p.name)
                seen += len(planner)
    assert seen > 0  # the data has patches: the comparison is not between empty lists only


def test_platform_key_patches_follow_engine_key_patches():
    table = {"vllm": [{"path": "a", "value": 1}], "a3-16npu": [{"path": "b", "value": 2, "expect": 0}]}
    m = ModelRecord("x", "o/x", None, None, None, None, {}, table, {}, {}, "x.yml", {"config_patches": table})
    ctx = SimpleNamespace(model_record=m, engine="vllm", platform=CAT.platform("a3-16npu"))
    want = [{"path": "a", "value": 1, "expect": None, "key": "vllm"},
            {"path": "b", "value": 2, "expect": 0, "key": "a3-16npu"}]
    assert model_patches(ctx) == want
    assert WEIGHTS["llmb_weights_patches"]({"config_patches": table}, "vllm", "a3-16npu") == want
    assert select_config_patches(table, "sglang", "h800-hgx8") == []


def test_a_real_plan_carries_the_weights_patches(planned_h200_trtllm):
    plan, dep = planned_h200_trtllm
    want = WEIGHTS["llmb_weights_patches"](CATALOG["llmb_catalog_model"](dep["llmb_model"]), dep["llmb_engine"],
                                          dep["llmb_platform"])
    assert want and all(h["model"]["config_patches"] == want for h in plan)


@pytest.fixture
def planned_h200_trtllm():
    import sys

    sys.path.insert(0, str(REPO / "tests" / "unit" / "module_utils" / "planner"))
    from llmbctl.planner import plan
    from planner_helpers import load_inventory

    hv, groups = load_inventory("h200-trtllm")
    return plan(hv, groups, str(DATA)), next(iter(hv.values()))


@pytest.mark.parametrize("name", CAT.platform_names())
def test_one_vendor_everywhere(name):
    """verify, the planner, the roles' filter and the accelerator simulator see one vendor word."""
    rec = CAT.platform(name)
    assert verify.load_profile(name)["vendor"] == rec.vendor
    assert CATALOG["llmb_catalog_platform"](name)["vendor"] == rec.vendor
    assert rec.vendor in verify.TOOLS and rec.vendor in verify.REQUIRED_KINDS
    assert any(rec.vendor in m.CAPS.vendors for m in ENGINES.values())
    sim = REPO / "tests" / "sim" / "accelsim" / "profiles" / f"{name}.json"
    if sim.exists():
        assert json.loads(sim.read_text())["vendor"] == rec.vendor


def test_no_other_loader_or_vocabulary_in_code():
    """No file lookup of data/ in roles, no second vendor word, no second secret pattern."""
    offenders = []
    for root in ("roles", "playbooks", "plugins", "lib"):
        for path in (REPO / root).rglob("*"):
            if path.suffix not in (".yml", ".py") or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            rel = path.relative_to(REPO)
            if re.search(r"lookup\([^)]*data/(platforms|models|engines|presets)", text):
                offenders.append(f"{rel}: file lookup of data/")
            if re.search(r"""["']huawei["']""", text):
                offenders.append(f"{rel}: vendor 'huawei'")
            if "token|secret|password" in text and rel != Path("lib/llmbctl/secrets.py"):
                offenders.append(f"{rel}: secret-name pattern")
    assert offenders == []


# --------------------------------------------------------------------------- secrets


def test_secret_names():
    assert [n for n in ("HF_TOKEN", "api_key", "DB_PASSWORD", "MY_SECRET", "VLLM_HOST_IP", "PATH")
            if is_secret_name(n)] == ["HF_TOKEN", "api_key", "DB_PASSWORD", "MY_SECRET"]
    assert secret_keys({"HF_TOKEN": "x", "NCCL_SOCKET_IFNAME": "eth0"}) == ["HF_TOKEN"]
    assert secret_keys(None) == []
    assert masked_argv(["-e", "HF_TOKEN=abc", "--env=X=1", "NCCL_DEBUG=INFO", "img"]) == [
        "-e", "HF_TOKEN=********", "--env=X=1", "NCCL_DEBUG=INFO", "img"]
    assert _filters("llmb_secrets")["llmb_secret_keys"]({"HF_TOKEN": "x"}) == ["HF_TOKEN"]
