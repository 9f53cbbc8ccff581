"""llmb.weights.manifest: the file list from the hub's tree listing, filters, validation, index."""

from __future__ import annotations

import copy

import pytest
from llmb.weights import manifest as mf

COMMIT = "a" * 40
SHA = "b" * 64
ENTRIES = [
    {"type": "file", "path": ".gitattributes", "size": 10, "oid": "1" * 40},
    {"type": "file", "path": "README.md", "size": 20, "oid": "2" * 40},
    {"type": "file", "path": "config.json", "size": 30, "oid": "3" * 40},
    {"type": "file", "path": "model-00001-of-000002.safetensors", "size": 134,
     "oid": "4" * 40, "lfs": {"oid": SHA, "size": 5000, "pointerSize": 134}},
    {"type": "file", "path": "model-00002-of-000002.safetensors", "size": 134,
     "oid": "5" * 40, "lfs": {"oid": "c" * 64, "size": 6000, "pointerSize": 134}},
    {"type": "file", "path": "model.safetensors.index.json", "size": 40, "oid": "6" * 40},
    {"type": "directory", "path": "docs", "size": 0, "oid": "7" * 40},
    {"type": "file", "path": "docs/guide.md", "size": 50, "oid": "8" * 40},
    {"type": "file", "path": "tiktoken.model", "size": 134, "oid": "9" * 40,
     "lfs": {"oid": "d" * 64, "size": 700, "pointerSize": 134}},
]
ALLOW = ["*.safetensors", "*.json", "*.py", "*.jinja", "tiktoken.model"]


def test_build_lfs_and_git_files():
    m = mf.build("org/m", COMMIT, ENTRIES, ALLOW)
    by = mf.by_path(m)
    assert sorted(by) == ["config.json", "model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors",
                          "model.safetensors.index.json", "tiktoken.model"]
    # LFS: the real size and sha256 come from the lfs block, not the pointer
    assert by["model-00001-of-000002.safetensors"] == {"path": "model-00001-of-000002.safetensors", "size": 5000,
                                                       "sha256": SHA, "git_oid": "4" * 40}
    assert by["config.json"]["sha256"] is None and by["config.json"]["git_oid"] == "3" * 40
    assert m["total_size"] == 30 + 5000 + 6000 + 40 + 700
    assert mf.validate(m) is m


@pytest.mark.parametrize(
    ("path", "allow", "ignore", "expected"),
    [
        ("config.json", ALLOW, None, True),
        ("README.md", ALLOW, None, False),
        ("docs/guide.md", ["docs/"], None, True),  # "dir/" = everything below
        ("docs/guide.md", None, ["docs/"], False),
        ("model-00001-of-000002.safetensors", ["*.safetensors"], ["model-00001*"], False),
        ("anything", None, None, True),
        ("config.json", "*.json", None, True),  # a single pattern as a string
    ],
)
def test_selected(path, allow, ignore, expected):
    assert mf.selected(path, allow, ignore) is expected


def test_build_rejects_bad_commit_and_empty_selection():
    with pytest.raises(mf.ManifestError, match="not a 40-hex commit"):
        mf.build("org/m", "main", ENTRIES, ALLOW)
    with pytest.raises(mf.ManifestError, match="no file of org/m"):
        mf.build("org/m", COMMIT, ENTRIES, ["*.gguf"])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: m["files"][0].update(size=1), "digest does not match"),
        (lambda m: m["files"][0].update(path="../etc/passwd"), "not a relative path"),
        (lambda m: m["files"][0].update(path="/abs"), "not a relative path"),
        (lambda m: m["files"].append(dict(m["files"][0])), "twice"),
        (lambda m: m["files"][1].update(sha256="xyz"), "not 64 hex"),
        (lambda m: m["files"][0].update(sha256=None, git_oid=None), "neither sha256 nor git_oid"),
        (lambda m: m.pop("digest"), "lacks 'digest'"),
        (lambda m: m.update(files=[]), "no files"),
    ],
)
def test_validate_rejects(mutate, message):
    m = copy.deepcopy(mf.build("org/m", COMMIT, ENTRIES, ALLOW))
    mutate(m)
    with pytest.raises(mf.ManifestError, match=message):
        mf.validate(m)


def test_index_check():
    m = mf.build("org/m", COMMIT, ENTRIES, ALLOW)
    index = {"metadata": {"total_size": 1}, "weight_map": {"a": "model-00001-of-000002.safetensors",
                                                          "b": "model-00002-of-000002.safetensors"}}
    assert mf.missing_from_manifest(m, index) == []
    narrow = mf.build("org/m", COMMIT, ENTRIES, ["*.json", "model-00001*"])
    assert mf.missing_from_manifest(narrow, index) == ["model-00002-of-000002.safetensors"]
    with pytest.raises(mf.ManifestError, match="no weight_map"):
        mf.index_shards({"metadata": {}})


def test_generated_model_manifest(sim_manifest):
    """The generated test model: 4 LFS shards named like Kimi-K2-Thinking's, tokenizer, .py files."""
    names = [f["path"] for f in sim_manifest["files"]]
    assert [n for n in names if n.endswith(".safetensors")] == [
        f"model-{i:05d}-of-000004.safetensors" for i in range(1, 5)]
    for n in ("config.json", "model.safetensors.index.json", "tiktoken.model", "chat_template.jinja",
              "configuration_deepseek.py", "modeling_deepseek.py", "tokenization_kimi.py", "tokenizer_config.json"):
        assert n in names
    assert "README.md" not in names and ".gitattributes" not in names
    assert all(f["sha256"] for f in sim_manifest["files"] if f["path"].endswith((".safetensors", ".model")))
