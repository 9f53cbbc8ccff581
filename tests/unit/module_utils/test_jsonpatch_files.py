"""llmb.jsonpatch on files: the tester's findings (backup path, duplicate keys, rewritten values, FIFO)
each as a named test, plus links, devices, owner, check mode and created keys."""

from __future__ import annotations

import json
import os
import threading

import pytest
from llmb import jsonpatch
from llmb.jsonpatch import JsonPatchError, patch_file, plan_text

# a config.json as a hand-edited or non-Python writer leaves it: 1.0e-6, \u00e9, 4-space indent,
# no final newline. Only the patched values may change.
HAND = (
    '{\n'
    '    "architectures": ["DeepseekV3ForCausalLM"],\n'
    '    "model_type": "kimi_k2",\n'
    '    "rms_norm_eps": 1.0e-6,\n'
    '    "rope_theta": 5E4,\n'
    '    "author": "Andr\\u00e9",\n'
    '    "path": "a\\/b",\n'
    '    "quantization_config": {\n'
    '        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4}}},\n'
    '        "quant_method": "compressed-tensors"\n'
    '    }\n'
    '}'
)
TRTLLM = {"path": "model_type", "value": "deepseek_v3", "expect": "kimi_k2"}
ASCEND = {"path": "quantization_config.config_groups.group_0.targets", "value": ["MoE"], "expect": ["Linear"]}


def config(tmp_path, text=HAND):
    p = tmp_path / "config.json"
    p.write_text(text, encoding="utf-8")
    return p


def listing(tmp_path):
    return sorted(os.listdir(tmp_path))


def run_with_timeout(fn, seconds=5.0):
    """fn() in a daemon thread; fails the test (instead of hanging it) when fn blocks."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the test below
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("result")


# --- the tester's findings ------------------------------------------------------------------


def test_tester_orig_dangling_link_refuses_the_patch(tmp_path):
    p = config(tmp_path)
    os.symlink(tmp_path / "gone", tmp_path / "config.json.orig")
    with pytest.raises(JsonPatchError) as err:
        patch_file(str(p), [TRTLLM])
    msg = str(err.value)
    assert f"{p}.orig (the saved original of {p}) is a symbolic link to {tmp_path / 'gone'}, which does not exist" in msg
    assert "Move it away" in msg
    assert p.read_text() == HAND
    assert os.path.islink(tmp_path / "config.json.orig")
    assert listing(tmp_path) == ["config.json", "config.json.orig"]


def test_tester_orig_directory_refuses_the_patch(tmp_path):
    p = config(tmp_path)
    (tmp_path / "config.json.orig").mkdir()
    with pytest.raises(JsonPatchError, match=r"config.json.orig \(the saved original of .*\) is a directory"):
        patch_file(str(p), [TRTLLM])
    assert p.read_text() == HAND
    # check mode says the same: it would fail
    with pytest.raises(JsonPatchError, match="is a directory"):
        patch_file(str(p), [TRTLLM], check=True)


def test_tester_orig_that_is_another_file_refuses_the_patch(tmp_path):
    p = config(tmp_path)
    (tmp_path / "config.json.orig").write_text('{"model_type": "llama", "hidden_size": 4096}\n')
    with pytest.raises(JsonPatchError) as err:
        patch_file(str(p), [TRTLLM])
    assert "is not an earlier copy of" in str(err.value)
    assert 'top-level keys the file lacks: "hidden_size"' in str(err.value)
    assert p.read_text() == HAND


@pytest.mark.parametrize(
    ("orig", "why"),
    [
        ("{}", "it is an empty object"),
        ("[1]", "it is a list where the file is a dict"),
        ("{not json", "is not valid JSON at line 1 column 2"),
        ('{"model_type": 1, "model_type": 2}', 'duplicate key "model_type"'),
    ],
)
def test_orig_that_cannot_be_a_backup_refuses_the_patch(tmp_path, orig, why):
    p = config(tmp_path)
    (tmp_path / "config.json.orig").write_text(orig)
    with pytest.raises(JsonPatchError, match=why.replace("(", r"\(").replace("[", r"\[")):
        patch_file(str(p), [TRTLLM])
    assert p.read_text() == HAND


def test_tester_duplicate_keys_refused_with_line_and_column(tmp_path):
    text = '{\n  "model_type": "kimi_k2",\n  "a": {"x": 1,\n        "x": 2}\n}\n'
    p = config(tmp_path, text)
    with pytest.raises(JsonPatchError) as err:
        patch_file(str(p), [TRTLLM])
    assert str(err.value).startswith(
        f'{p} at line 4 column 9: duplicate key "x" in a (first at line 3 column 9)')
    assert p.read_text() == text
    assert listing(tmp_path) == ["config.json"]


def test_duplicate_key_at_top_level_and_in_a_list(tmp_path):
    with pytest.raises(JsonPatchError, match='line 1 column 10: duplicate key "a" at the top level'):
        plan_text('{"a": 1, "a": 1}', [{"path": "a", "value": 2}], "c.json")
    with pytest.raises(JsonPatchError, match='duplicate key "k" in l.1 '):
        plan_text('{"l": [{}, {"k": 1, "k": 1}]}', [{"path": "l.0", "value": 2}], "c.json")


def test_tester_unrelated_values_keep_their_spelling(tmp_path):
    p = config(tmp_path)
    r = patch_file(str(p), [TRTLLM])
    assert r["changed"]
    assert p.read_text() == HAND.replace('"kimi_k2"', '"deepseek_v3"')
    after = p.read_text()
    for kept in ('"rms_norm_eps": 1.0e-6,', '"rope_theta": 5E4,', '"Andr\\u00e9"', '"a\\/b"'):
        assert kept in after
    assert not after.endswith("\n")  # no final newline before, none after


def test_tester_fifo_named_config_json_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(JsonPatchError, match=r"config.json \(the file to patch\) is a named pipe \(FIFO\)"):
        run_with_timeout(lambda: patch_file(str(fifo), [TRTLLM]))
    with pytest.raises(JsonPatchError, match="is a named pipe"):
        run_with_timeout(lambda: patch_file(str(fifo), [TRTLLM], check=True))


def test_fifo_as_backup_is_refused_without_hanging(tmp_path):
    p = config(tmp_path)
    os.mkfifo(tmp_path / "config.json.orig")
    with pytest.raises(JsonPatchError, match=r"saved original of .* is a named pipe"):
        run_with_timeout(lambda: patch_file(str(p), [TRTLLM]))
    assert p.read_text() == HAND


def test_fifo_swapped_in_after_lstat_does_not_block(tmp_path, monkeypatch):
    """The open itself is O_NONBLOCK: a FIFO put in place between lstat and open cannot hang."""
    p = config(tmp_path)
    real_lstat = os.lstat
    st = real_lstat(p)

    def lstat_then_swap(path, *a, **kw):
        if str(path) == str(p) and os.path.isfile(p):
            os.unlink(p)
            os.mkfifo(p)
            return st
        return real_lstat(path, *a, **kw)

    monkeypatch.setattr(jsonpatch.os, "lstat", lstat_then_swap)
    with pytest.raises(JsonPatchError, match="replaced while it was being read"):
        run_with_timeout(lambda: patch_file(str(p), [TRTLLM]))


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_device_is_refused(device):
    with pytest.raises(JsonPatchError, match="is a character device, not a regular file"):
        run_with_timeout(lambda: patch_file(device, [TRTLLM]))


def test_directory_is_refused(tmp_path):
    d = tmp_path / "config.json"
    d.mkdir()
    with pytest.raises(JsonPatchError, match="is a directory, not a regular file"):
        patch_file(str(d), [TRTLLM])


def test_config_json_symlink_is_refused_not_followed(tmp_path):
    target = tmp_path / "blob"
    target.write_text(HAND)
    link = tmp_path / "config.json"
    os.symlink(target, link)
    with pytest.raises(JsonPatchError) as err:
        patch_file(str(link), [TRTLLM])
    assert f"is a symbolic link to {target}; json_patch does not follow links" in str(err.value)
    assert "cp --remove-destination" in str(err.value)
    assert target.read_text() == HAND and os.path.islink(link)
    assert listing(tmp_path) == ["blob", "config.json"]


def test_oversized_file_is_refused(tmp_path, monkeypatch):
    p = config(tmp_path)
    monkeypatch.setattr(jsonpatch, "MAX_BYTES", 100)
    with pytest.raises(JsonPatchError, match="over the 100 limit"):
        patch_file(str(p), [TRTLLM])


# --- backups that are real -----------------------------------------------------------------


def test_true_backup_reruns_are_idempotent(tmp_path):
    p = config(tmp_path)
    first = patch_file(str(p), [TRTLLM, ASCEND])
    assert first["changed"] and first["orig_saved"]
    assert (tmp_path / "config.json.orig").read_text() == HAND
    patched = p.read_bytes()
    again = patch_file(str(p), [TRTLLM, ASCEND])
    assert not again["changed"] and not again["orig_saved"]
    assert p.read_bytes() == patched
    check = patch_file(str(p), [TRTLLM, ASCEND], check=True)
    assert not check["changed"] and not check["orig_saved"]


def test_backup_left_by_the_reserializing_version_is_accepted(tmp_path):
    """Nodes patched before this version hold a config.json that json.dumps rewrote; the pristine
    .orig is still recognised as its earlier copy and re-runs stay no-ops."""
    p = config(tmp_path)
    (tmp_path / "config.json.orig").write_text(HAND)
    doc = json.loads(HAND)
    doc["model_type"] = "deepseek_v3"
    p.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    r = patch_file(str(p), [TRTLLM])
    assert not r["changed"]
    r = patch_file(str(p), [ASCEND])
    assert r["changed"] and not r["orig_saved"]
    assert (tmp_path / "config.json.orig").read_text() == HAND


def test_backup_equal_to_the_file_after_a_crash_is_accepted(tmp_path):
    p = config(tmp_path)
    (tmp_path / "config.json.orig").write_text(HAND)  # saved, then the rename never happened
    r = patch_file(str(p), [TRTLLM])
    assert r["changed"] and not r["orig_saved"]
    assert (tmp_path / "config.json.orig").read_text() == HAND


def test_created_key_is_accepted_by_the_backup_check(tmp_path):
    p = config(tmp_path)
    patch_file(str(p), [{"path": "new_key", "value": 1, "create": True}])
    r = patch_file(str(p), [TRTLLM])
    assert r["changed"] and not r["orig_saved"]


def test_keep_orig_false_ignores_the_backup_path(tmp_path):
    p = config(tmp_path)
    (tmp_path / "config.json.orig").mkdir()
    r = patch_file(str(p), [TRTLLM], keep_orig=False)
    assert r["changed"] and r["orig"] is None and not r["orig_saved"]


# --- check mode, diff, owner, created keys --------------------------------------------------


def test_check_mode_diff_is_exactly_the_changed_value(tmp_path):
    p = config(tmp_path)
    r = patch_file(str(p), [ASCEND], check=True)
    assert r["changed"] and r["orig_saved"]
    assert r["before"] == HAND
    assert r["after"] == HAND.replace('"targets": ["Linear"]', '"targets": ["MoE"]')
    assert p.read_text() == HAND and listing(tmp_path) == ["config.json"]
    real = patch_file(str(p), [ASCEND])
    assert real["after"] == r["after"] == p.read_text()


def test_container_value_in_an_indented_block_follows_the_indentation(tmp_path):
    text = '{\n  "q": {\n    "targets": [\n      "Linear"\n    ],\n    "n": 1\n  }\n}\n'
    p = config(tmp_path, text)
    patch_file(str(p), [{"path": "q.targets", "value": ["MoE", {"a": 1}]}])
    assert p.read_text() == (
        '{\n  "q": {\n    "targets": [\n      "MoE",\n      {\n        "a": 1\n      }\n    ],\n'
        '    "n": 1\n  }\n}\n'
    )


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        ('{\n    "a": 1,\n    "b": {\n        "c": 2\n    }\n}\n', "b.d",
         '{\n    "a": 1,\n    "b": {\n        "c": 2,\n        "d": [\n            1\n        ]\n    }\n}\n'),
        ('{\n\t"a": 1\n}', "z", '{\n\t"a": 1,\n\t"z": [\n\t\t1\n\t]\n}'),
        ('{"a": 1, "b": 2}', "z", '{"a": 1, "b": 2, "z": [1]}'),
        ('{"a":1}', "z", '{"a":1,"z":[1]}'),
        ('{\n  "a": {}\n}\n', "a.z", '{\n  "a": {\n    "z": [\n      1\n    ]\n  }\n}\n'),
        ('{"a": {}, "b": 1}', "a.z", '{"a": {"z": [1]}, "b": 1}'),
        ("{}", "z", '{"z": [1]}'),
    ],
)
def test_created_key_takes_the_indentation_of_its_siblings(text, path, expected):
    new, changes = plan_text(text, [{"path": path, "value": [1], "create": True}])
    assert new == expected
    assert changes[0]["changed"] and changes[0]["before"] is None


def test_created_key_in_a_list_parent_is_refused():
    with pytest.raises(JsonPatchError, match="path l.5: index 5 out of range under l"):
        plan_text('{"l": [1]}', [{"path": "l.5", "value": 1, "create": True}])


def test_non_ascii_file_gets_non_ascii_values_and_ascii_file_gets_escapes():
    assert plan_text('{"a": "é"}', [{"path": "a", "value": "ü"}])[0] == '{"a": "ü"}'
    assert plan_text('{"a": "x"}', [{"path": "a", "value": "ü"}])[0] == '{"a": "\\u00fc"}'


def test_patches_apply_in_order_and_see_each_other():
    text = '{"a": {"b": 1}}'
    new, changes = plan_text(text, [{"path": "a.b", "value": {"c": 1}}, {"path": "a.b.c", "value": 2,
                                                                     "expect": 1}])
    assert json.loads(new) == {"a": {"b": {"c": 2}}}
    assert [c["changed"] for c in changes] == [True, True]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_owner_and_mode_are_kept(tmp_path):
    p = config(tmp_path)
    os.chown(p, 4321, 4322)
    os.chmod(p, 0o640)
    patch_file(str(p), [TRTLLM])
    for f in (p, tmp_path / "config.json.orig"):
        st = os.stat(f)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4321, 4322, 0o640), f


def test_owner_that_cannot_be_kept_fails_before_the_rename(tmp_path, monkeypatch):
    p = config(tmp_path)
    real_stat = os.stat

    def other_owner(path, *a, **kw):
        st = real_stat(path, *a, **kw)
        if os.path.basename(str(path)).startswith(".config.json."):  # the temp file
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 99999, 99999, *tuple(st)[6:]))
        return st

    def refuse(*a, **kw):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(jsonpatch.os, "stat", other_owner)
    monkeypatch.setattr(jsonpatch.os, "chown", refuse)
    with pytest.raises(JsonPatchError, match="cannot write .*Operation not permitted"):
        patch_file(str(p), [TRTLLM], keep_orig=False)
    assert p.read_text() == HAND and listing(tmp_path) == ["config.json"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", "line 1 column 1: expected a value, found the end of the file"),
        ('{\n  "a": 1,\n}', "line 3 column 1: expected a key in double quotes (a trailing comma?)"),
        ('{"a": 01}', "line 1 column 8: expected ',' or '}'"),
        ('{"a": "x\ny"}', "line 1 column 9: bad string: Invalid control character"),
        ('{"a": 1} x', "line 1 column 10: extra data after the top-level value"),
        ("\ufeff{}", "line 1 column 1: starts with a UTF-8 byte order mark"),
        ('{"a": tru}', "line 1 column 7: expected a value"),
        ("[" * 300 + "]" * 300, "nested deeper than 200 levels"),
    ],
)
def test_invalid_json_names_file_line_and_column(tmp_path, text, where):
    p = config(tmp_path, text)
    with pytest.raises(JsonPatchError) as err:
        patch_file(str(p), [TRTLLM])
    assert str(err.value).startswith(f"{p} is not valid JSON at ")
    assert where in str(err.value)
    assert p.read_text() == text and listing(tmp_path) == ["config.json"]


@pytest.mark.parametrize(
    ("path", "segments"),
    [("a.00", ["a", "00"]), ("a.\u00b2", ["a", "\u00b2"]), (["x", "007", 3, -1], ["x", "007", 3, -1]),
     ("a." + "9" * 30, ["a", "9" * 30])],
)
def test_only_canonical_digits_are_list_indexes(path, segments):
    assert jsonpatch.parse_path(path) == segments


def test_keys_that_look_like_numbers_are_found():
    text = '{"00": 1, "\u00b2": 2, "7": 3}'
    new, _ = plan_text(text, [{"path": ["00"], "value": 9}, {"path": "\u00b2", "value": 8},
                              {"path": "7", "value": 7}])
    assert new == '{"00": 9, "\u00b2": 8, "7": 7}'


@pytest.mark.parametrize("suffix", ["", "/x", "\0", ".."])
def test_unusable_orig_suffix_is_refused(tmp_path, suffix):
    p = config(tmp_path)
    with pytest.raises(JsonPatchError, match="orig_suffix must be a non-empty file name suffix"):
        patch_file(str(p), [TRTLLM], orig_suffix=suffix)
    assert p.read_text() == HAND and listing(tmp_path) == ["config.json"]


@pytest.mark.parametrize("engine", ["vllm-ascend", "trtllm"])
def test_profile_patches_on_the_sim_models_config_change_only_their_lines(tmp_path, engine):
    """The model profile's own config_patches on the config.json the test hub serves (genmodel)."""
    from pathlib import Path

    import yaml
    from hfserver import genmodel

    root = Path(__file__).resolve().parents[3]
    patches = yaml.safe_load((root / "data/models/kimi-k2-thinking.yml").read_text())["config_patches"][engine]
    text = json.dumps(genmodel.config(4, 8), indent=2, sort_keys=False) + "\n"
    p = config(tmp_path, text)
    r = patch_file(str(p), patches)
    assert r["changed"] and [c["path"] for c in r["changes"]] == [q["path"] for q in patches]
    before, after = text.splitlines(), p.read_text().splitlines()
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    if engine == "trtllm":
        assert len(before) == len(after)
        assert changed == [('  "model_type": "kimi_k2",', '  "model_type": "deepseek_v3",')]
    else:
        assert len(before) == len(after)
        assert [a for _, a in changed] == ['          "MoE"']
    assert (tmp_path / "config.json.orig").read_text() == text
    assert not patch_file(str(p), patches)["changed"]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"path": 3, "value": 1}, "patch #2: path must be a non-empty string, got 3"),
        ({"path": "a..b", "value": 1}, "patch #2: path 'a..b' has an empty segment"),
        ({"path": "a", "value": {1, 2}}, "patch #2 (a): value is not JSON"),
        ({"path": "a", "value": object()}, "patch #2 (a): value is not JSON"),
    ],
)
def test_bad_patch_names_its_number_and_writes_nothing(tmp_path, patch, message):
    p = config(tmp_path)
    with pytest.raises(JsonPatchError) as err:
        patch_file(str(p), [TRTLLM, patch])
    assert message in str(err.value)
    assert p.read_text() == HAND and listing(tmp_path) == ["config.json"]
