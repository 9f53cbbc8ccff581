"""Flag sets: spellings, short forms, renames, negations, and values, per pinned release."""

from __future__ import annotations

import json

import pytest
from llmbctl.catalog import Catalog, load_commented_json
from llmbctl.engines.registry import load_flagset
from llmbctl.planner.flags import EngineArgs
from planner_helpers import REPO

DATA = Catalog(REPO / "data")


@pytest.fixture(scope="module")
def vllm():
    return load_flagset(DATA, "vllm", "0.19.1")


@pytest.mark.parametrize(
    "token, expected",
    [
        ("--tensor-parallel-size", ("--tensor-parallel-size", False)),
        ("-tp", ("--tensor-parallel-size", False)),
        ("-dcp", ("--decode-context-parallel-size", False)),
        ("-dpr", ("--data-parallel-start-rank", False)),
        ("--max_model_len", ("--max-model-len", False)),
        ("--no-enable-prefix-caching", ("--enable-prefix-caching", True)),
        ("--no-enable-log-requests", ("--enable-log-requests", True)),
        ("--no-headless", None),  # store_true: no negative form
        ("--disable-log-requests", None),  # removed in 0.12+
        ("--made-up", None),
    ],
)
def test_vllm_spellings(vllm, token, expected):
    assert vllm.resolve(token) == expected


def test_rename_translates_the_recipe_flag(vllm):
    ea = EngineArgs(vllm)
    ea.apply_argv(["--disable-log-requests", "-q", "fp8", "--max-num-seqs=4"], "recipe", {})
    assert ea.problems == []
    assert ea.values == {"--enable-log-requests": False, "--quantization": "fp8", "--max-num-seqs": "4"}
    assert ea.argv() == ["--no-enable-log-requests", "--quantization", "fp8", "--max-num-seqs", "4"]
    assert "--disable-log-requests" in ea.notes[0] and "translated" in ea.notes[0]


def test_short_form_of_a_planner_owned_flag_is_refused(vllm):
    ea = EngineArgs(vllm)
    ea.apply_argv(
        ["-dcp", "8"],
        "llmb_engine_extra_args",
        {"--decode-context-parallel-size": "llmb_decode_context_parallel"},
    )
    (problem,) = ea.problems
    assert problem.check == "engine-flag-owned" and "llmb_decode_context_parallel" in problem.fix


def test_mapping_form_and_booleans(vllm):
    ea = EngineArgs(vllm)
    ea.apply_mapping(
        {
            "enable-prefix-caching": False,
            "trust-remote-code": True,
            "allowed-origins": ["a", "b"],
            "compilation-config": {"level": 3},
        },
        "inv",
        {},
    )
    assert ea.argv() == [
        "--no-enable-prefix-caching",
        "--trust-remote-code",
        "--allowed-origins",  # a JSON list in the real 0.19.1 parser (type json.loads), not nargs +
        '["a","b"]',
        "--compilation-config",
        '{"level":3}',
    ]


def test_switch_with_a_value_is_refused(vllm):
    ea = EngineArgs(vllm)
    ea.apply_mapping({"trust-remote-code": "yes"}, "inv", {})
    assert [p.check for p in ea.problems] == ["engine-flag-value"]


def test_choice_is_checked(vllm):
    ea = EngineArgs(vllm)
    ea.apply_mapping({"dtype": "fp4"}, "inv", {})
    assert ea.problems and "one of" in ea.problems[0].message


def test_unchecked_flags_pass_through(vllm):
    ea = EngineArgs(vllm, unchecked=["--rope-theta"])
    ea.apply_argv(["--rope-theta", "10000"], "inv", {})
    assert ea.problems == [] and ea.argv() == ["--rope-theta", "10000"]


def test_trtllm_is_click_style_without_negations():
    fs = load_flagset(DATA, "trtllm", "1.1.0")
    assert fs.resolve("--tp_size") == ("--tp_size", False)
    assert fs.resolve("--tp-size") is None  # click options keep their underscores
    assert fs.resolve("--no-trust_remote_code") is None
    assert fs.positional["required"] is True


def test_vllm_ascend_extends_vllm():
    fs = load_flagset(DATA, "vllm-ascend", "0.20.2rc1")
    assert fs.resolve("-pcp") == ("--prefill-context-parallel-size", False)
    assert fs.resolve("--enable-expert-parallel") == ("--enable-expert-parallel", False)
    assert fs.config_checks and fs.images["ascend"].startswith("quay.io/ascend/vllm-ascend:")


@pytest.mark.parametrize("path", sorted((REPO / "data" / "engines").glob("*.yml")), ids=lambda p: p.name)
def test_flag_set_files_are_json_below_their_comments(path):
    text = path.read_text()
    assert text.startswith("#"), "the file must say which release it describes and where the flags came from"
    assert "Where from" in text
    doc = load_commented_json(path)
    json.dumps(doc)
    for flag, spec in doc.get("flags", {}).items():
        assert flag.startswith("--"), flag
        assert spec["type"] in {"flag", "bool", "int", "float", "str", "json", "choice", "list", "optional"}
        if spec["type"] == "choice":
            assert spec["choices"]


def _h800_on(version: str, env: dict) -> dict:
    """The h800 sample's plan on ``version`` with llmb_engine_env extended by ``env``."""
    from llmbctl.planner import plan_inventory
    from planner_helpers import load_inventory

    hv, groups = load_inventory("h800")
    for v in hv.values():
        v["llmb_engine_version"] = version
        v["llmb_engine_env"] = {**(v.get("llmb_engine_env") or {}), **env}
    return plan_inventory(hv, groups, str(REPO / "data"), source="test").to_list()


def test_vllm_all2all_env_becomes_the_flag_on_the_release_without_the_variable():
    """VLLM_ALL2ALL_BACKEND is gone from vLLM 0.33.0's envs.py: there the plan passes its value as
    --all2all-backend and leaves the variable out; an older release keeps the variable as given."""
    for host in _h800_on("0.33.0", {"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}):
        for svc in host["services"]:
            assert "VLLM_ALL2ALL_BACKEND" not in (svc.get("env") or {}), svc["name"]
        serve = [s for s in host["services"] if "serve" in (s.get("argv") or [])]
        for svc in serve:
            i = svc["argv"].index("--all2all-backend")
            assert svc["argv"][i + 1] == "deepep_low_latency"
    older = _h800_on("0.32.0", {"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"})
    envs = [s.get("env") or {} for h in older for s in h["services"] if "serve" in (s.get("argv") or [])]
    assert envs and all(e.get("VLLM_ALL2ALL_BACKEND") == "deepep_low_latency" for e in envs)
    assert not [s for h in older for s in h["services"] if "--all2all-backend" in (s.get("argv") or [])]


def test_vllm_all2all_env_value_is_checked_as_the_flag_is():
    from llmbctl.planner import PlanError

    with pytest.raises(PlanError) as err:
        _h800_on("0.33.0", {"VLLM_ALL2ALL_BACKEND": "no_such_backend"})
    assert any("--all2all-backend" in p.message and "llmb_engine_env" in (p.found or "")
               for p in err.value.problems), err.value.problems
