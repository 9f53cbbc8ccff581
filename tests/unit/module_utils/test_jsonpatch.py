"""llmb.jsonpatch: dotted-path edits of config.json with a guard, .orig kept once, atomic writes."""

from __future__ import annotations

import json
import os

import pytest
from hfserver.genmodel import config
from llmb import jsonpatch
from llmb.jsonpatch import JsonPatchError, get_at, parse_path, patch_file, plan

# Kimi-K2-Thinking's config.json in the test model's generator (the fields the recipes patch, and
# their neighbours), at the real model's depth
KIMI_CONFIG = config(layers=61, experts=384)
ASCEND = {"path": "quantization_config.config_groups.group_0.targets", "value": ["MoE"], "expect": ["Linear"]}
TRTLLM = {"path": "model_type", "value": "deepseek_v3", "expect": "kimi_k2"}


def write(tmp_path, doc=KIMI_CONFIG, text=None):
    p = tmp_path / "config.json"
    p.write_text(text if text is not None else json.dumps(doc, indent=2) + "\n")
    return p


@pytest.mark.parametrize(
    ("path", "segments"),
    [
        ("model_type", ["model_type"]),
        ("quantization_config.config_groups.group_0.targets",
         ["quantization_config", "config_groups", "group_0", "targets"]),
        ("quantization_config.ignore.0", ["quantization_config", "ignore", 0]),
        (r"a\.b.c", ["a.b", "c"]),
        (["a.b", "0"], ["a.b", 0]),
    ],
)
def test_parse_path(path, segments):
    assert parse_path(path) == segments


@pytest.mark.parametrize("bad", ["", "a..b", ".a", "a.", [], None, 3])
def test_parse_path_rejects(bad):
    with pytest.raises(JsonPatchError):
        parse_path(bad)


@pytest.mark.parametrize(
    ("patches", "expected_changes", "check_path", "check_value"),
    [
        ([ASCEND], [True], "quantization_config.config_groups.group_0.targets", ["MoE"]),
        ([TRTLLM], [True], "model_type", "deepseek_v3"),
        ([ASCEND, TRTLLM], [True, True], "model_type", "deepseek_v3"),
        # without a guard
        ([{"path": "num_hidden_layers", "value": 2}], [True], "num_hidden_layers", 2),
        # list element by index
        ([{"path": "quantization_config.ignore.0", "value": "lm_head_x", "expect": "lm_head"}], [True],
         "quantization_config.ignore.0", "lm_head_x"),
        # already at the target value: unchanged, whatever expect says
        ([{"path": "model_type", "value": "kimi_k2", "expect": "deepseek_v3"}], [False], "model_type", "kimi_k2"),
        # a new key only with create
        ([{"path": "quantization_config.new_key", "value": 1, "create": True}], [True],
         "quantization_config.new_key", 1),
    ],
)
def test_plan_table(patches, expected_changes, check_path, check_value):
    new, changes = plan(KIMI_CONFIG, patches)
    assert [c["changed"] for c in changes] == expected_changes
    assert get_at(new, check_path) == check_value
    assert KIMI_CONFIG["model_type"] == "kimi_k2"  # input not mutated
    assert KIMI_CONFIG["quantization_config"]["config_groups"]["group_0"]["targets"] == ["Linear"]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"path": "model_type", "value": "deepseek_v3", "expect": "llama"},
         'path model_type: expected "llama" before setting "deepseek_v3", found "kimi_k2"'),
        ({"path": "quantization_config.config_groups.group_1.targets", "value": ["MoE"]},
         "key 'group_1' not found under quantization_config.config_groups"),
        ({"path": "nope", "value": 1}, "key 'nope' not found under (top level)"),
        ({"path": "quantization_config.ignore.7", "value": "x"}, "index 7 out of range"),
        ({"path": "model_type.x", "value": 1}, "model_type is a str"),
        ({"path": "quantization_config.ignore.x", "value": 1}, "is a list; segment 'x' is not an index"),
        ({"path": "a", "value": 1, "typo": 2}, "unknown keys ['typo']"),
        ({"path": "a"}, "must be a mapping with 'path' and 'value'"),
        # a missing parent is not created even with create
        ({"path": "nothere.child", "value": 1, "create": True}, "key 'nothere' not found"),
    ],
)
def test_plan_errors(patch, message):
    with pytest.raises(JsonPatchError) as err:
        plan(KIMI_CONFIG, [patch])
    assert message in str(err.value)


def test_bool_and_int_are_different_values():
    new, changes = plan({"a": 1}, [{"path": "a", "value": True, "expect": 1}])
    assert changes[0]["changed"] and new["a"] is True
    with pytest.raises(JsonPatchError):
        plan({"a": True}, [{"path": "a", "value": 2, "expect": 1}])


def test_patch_file_keeps_orig_once_and_is_idempotent(tmp_path):
    p = write(tmp_path)
    original = p.read_bytes()
    r1 = patch_file(str(p), [ASCEND])
    assert r1["changed"] and r1["orig_saved"]
    assert (tmp_path / "config.json.orig").read_bytes() == original
    assert json.loads(p.read_text())["quantization_config"]["config_groups"]["group_0"]["targets"] == ["MoE"]
    after_first = p.read_bytes()
    r2 = patch_file(str(p), [ASCEND])
    assert not r2["changed"] and not r2["orig_saved"]
    assert p.read_bytes() == after_first
    # a later, different patch never overwrites the saved original
    r3 = patch_file(str(p), [TRTLLM])
    assert r3["changed"] and not r3["orig_saved"]
    assert (tmp_path / "config.json.orig").read_bytes() == original


def test_patch_file_diff_touches_only_patched_lines(tmp_path):
    p = write(tmp_path)
    r = patch_file(str(p), [TRTLLM])
    before, after = r["before"].splitlines(), r["after"].splitlines()
    assert len(before) == len(after)
    diff = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert diff == [('  "model_type": "kimi_k2",', '  "model_type": "deepseek_v3",')]
    assert p.read_text().endswith("}\n")


def test_check_mode_writes_nothing(tmp_path):
    p = write(tmp_path)
    original = p.read_bytes()
    r = patch_file(str(p), [ASCEND, TRTLLM], check=True)
    assert r["changed"] and r["orig_saved"]  # would save it
    assert p.read_bytes() == original
    assert not (tmp_path / "config.json.orig").exists()
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


@pytest.mark.parametrize("text", ['{"model_type": "kimi_k2",', "", "\xff\xfe not utf8", "[1, 2"])
def test_unparsable_file_fails_and_is_untouched(tmp_path, text):
    p = tmp_path / "config.json"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(JsonPatchError, match="not valid JSON"):
        patch_file(str(p), [TRTLLM])
    assert p.read_bytes() == text.encode("latin-1")
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_missing_path_fails_and_file_untouched(tmp_path):
    p = write(tmp_path)
    original = p.read_bytes()
    # the first patch would apply; the second fails: nothing at all is written
    with pytest.raises(JsonPatchError, match="group_9"):
        patch_file(str(p), [TRTLLM, {"path": "quantization_config.config_groups.group_9.targets", "value": []}])
    assert p.read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_missing_file(tmp_path):
    with pytest.raises(JsonPatchError, match="does not exist"):
        patch_file(str(tmp_path / "config.json"), [TRTLLM])


def test_mode_preserved_and_no_temp_left(tmp_path):
    p = write(tmp_path)
    os.chmod(p, 0o640)
    patch_file(str(p), [TRTLLM])
    assert os.stat(p).st_mode & 0o777 == 0o640
    assert os.stat(tmp_path / "config.json.orig").st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["config.json", "config.json.orig"]


def test_crash_during_write_leaves_old_file(tmp_path, monkeypatch):
    p = write(tmp_path)
    original = p.read_bytes()

    def boom(src, dst):
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(jsonpatch.os, "replace", boom)
    with pytest.raises(JsonPatchError, match="cannot write .*simulated crash"):
        patch_file(str(p), [TRTLLM])
    assert p.read_bytes() == original
    # the original was saved (by link) before the failed rename; no temp file remains
    assert sorted(os.listdir(tmp_path)) == ["config.json", "config.json.orig"]


@pytest.mark.parametrize(
    ("text", "style"),
    [
        ('{\n  "a": 1\n}\n', jsonpatch.Style("  ", ": ", ", ", True)),
        ('{\n    "a": 1\n}', jsonpatch.Style("    ", ": ", ", ", True)),
        ('{\n\t"a": [\n\t\t1\n\t]\n}', jsonpatch.Style("\t", ": ", ", ", True)),
        ('{"a": 1, "b": 2}', jsonpatch.Style(None, ": ", ", ", True)),
        ('{"a":1,"b":2}\n', jsonpatch.Style(None, ":", ",", True)),
        ('{"a" : [1 , 2], "é": 1}', jsonpatch.Style(None, " : ", ", ", False)),
    ],
)
def test_detect_style(text, style):
    assert jsonpatch.detect_style(text, jsonpatch.scan(text)) == style


def test_orig_keeps_mtime_of_the_original(tmp_path):
    p = write(tmp_path)
    os.utime(p, ns=(1_700_000_000_000_000_000, 1_700_000_000_123_456_789))
    patch_file(str(p), [TRTLLM])
    assert os.stat(tmp_path / "config.json.orig").st_mtime_ns == 1_700_000_000_123_456_789
