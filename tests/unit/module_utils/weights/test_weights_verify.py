"""llmb.weights.verify: parallel hashing, the record beside the weights, pristine .orig copies."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from llmb.jsonpatch import patch_file
from llmb.weights import verify as vf

SHARD2 = "model-00002-of-000004.safetensors"


def test_hash_file_sha256_and_git_blob_id(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"hello\n")
    d = vf.hash_file(str(p), git=True)
    # `git hash-object` of "hello\n"
    assert d == {"size": 6, "sha256": hashlib.sha256(b"hello\n").hexdigest(),
                 "git_oid": "ce013625030ba8dba906f756967f9e9ca394464a"}
    big = tmp_path / "big"
    data = os.urandom(3 * 1024 * 1024 + 17)
    big.write_bytes(data)
    assert vf.hash_file(str(big), bufsize=1024 * 1024)["sha256"] == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert vf.hash_file(str(tmp_path / "empty"))["sha256"] == hashlib.sha256(b"").hexdigest()


def test_complete_copy_then_record_makes_second_pass_free(model_copy, sim_manifest):
    v = vf.verify_dir(str(model_copy), sim_manifest, None, workers=4)
    assert v["complete"] and not v["bad"] and not v["missing"]
    assert len(v["hashed"]) == len(sim_manifest["files"])
    assert v["hashed_bytes"] == sim_manifest["total_size"]
    vf.save_record(str(model_copy), v["record"])
    v2 = vf.verify_dir(str(model_copy), sim_manifest, vf.load_record(str(model_copy)), workers=4)
    assert v2["complete"] and v2["hashed"] == [] and v2["hashed_bytes"] == 0
    assert not vf.record_differs(v["record"], v2["record"])
    rec = json.loads((model_copy / vf.RECORD_NAME).read_text())
    entry = rec["files"][SHARD2]
    assert set(entry) == {"file", "size", "mtime_ns", "sha256", "verified_at"}
    assert set(rec["files"]["config.json"]) == {"file", "size", "mtime_ns", "sha256", "git_oid", "verified_at"}
    assert rec["status"] == "complete" and rec["manifest_digest"] == sim_manifest["digest"]


def test_changed_file_is_rehashed_alone_and_caught(model_copy, sim_manifest):
    v = vf.verify_dir(str(model_copy), sim_manifest, None)
    vf.save_record(str(model_copy), v["record"])
    shard = model_copy / SHARD2
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF  # same size, one flipped byte
    shard.write_bytes(bytes(data))
    v2 = vf.verify_dir(str(model_copy), sim_manifest, vf.load_record(str(model_copy)))
    assert v2["hashed"] == [SHARD2]
    assert [b["path"] for b in v2["bad"]] == [SHARD2] and v2["bad"][0]["reason"] == "hash"
    assert not v2["complete"] and SHARD2 not in v2["record"]["files"]
    assert v2["record"]["status"] == "incomplete"


def test_size_mismatch_and_missing_need_no_hashing(model_copy, sim_manifest):
    (model_copy / SHARD2).write_bytes(b"truncated")
    (model_copy / "tiktoken.model").unlink()
    v = vf.verify_dir(str(model_copy), sim_manifest, None)
    assert v["missing"] == ["tiktoken.model"]
    assert v["bad"] == [{"path": SHARD2, "reason": "size", "expected": 1625312, "found": 9, "file": SHARD2}]
    assert SHARD2 not in v["hashed"]


def test_record_of_another_commit_is_not_trusted(model_copy, sim_manifest):
    v = vf.verify_dir(str(model_copy), sim_manifest, None)
    other = dict(v["record"], commit="f" * 40)
    v2 = vf.verify_dir(str(model_copy), sim_manifest, other)
    assert len(v2["hashed"]) == len(sim_manifest["files"])


def test_same_size_and_mtime_is_trusted_unless_asked_for_full(model_copy, sim_manifest):
    """The record's contract: a file is re-hashed when its size or mtime changed. A same-size edit
    that restores the mtime is only caught by a full pass (model_verify full=true)."""
    v = vf.verify_dir(str(model_copy), sim_manifest, None)
    shard = model_copy / SHARD2
    st = shard.stat()
    data = bytearray(shard.read_bytes())
    data[5] ^= 1
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert vf.verify_dir(str(model_copy), sim_manifest, v["record"])["complete"]
    assert not vf.verify_dir(str(model_copy), sim_manifest, v["record"], trust_record=False)["complete"]


def test_patched_config_is_verified_through_orig_and_stays_trusted(model_copy, sim_manifest):
    v = vf.verify_dir(str(model_copy), sim_manifest, None)
    patch_file(str(model_copy / "config.json"), [{"path": "model_type", "value": "deepseek_v3", "expect": "kimi_k2"}])
    v2 = vf.verify_dir(str(model_copy), sim_manifest, v["record"])
    # .orig keeps the original's size and mtime: trusted from the record, nothing re-hashed
    assert v2["complete"] and v2["hashed"] == []
    assert not vf.record_differs(v["record"], v2["record"])
    # a fresh verification (no record) hashes the .orig and passes too
    v3 = vf.verify_dir(str(model_copy), sim_manifest, None)
    assert v3["complete"] and v3["record"]["files"]["config.json"]["file"] == "config.json.orig"
    # a damaged .orig is caught
    (model_copy / "config.json.orig").write_text("{}")
    v4 = vf.verify_dir(str(model_copy), sim_manifest, v["record"])
    assert [b["path"] for b in v4["bad"]] == ["config.json"] and v4["bad"][0]["file"] == "config.json.orig"


def test_only_keeps_other_entries(model_copy, sim_manifest):
    v = vf.verify_dir(str(model_copy), sim_manifest, None)
    v2 = vf.verify_dir(str(model_copy), sim_manifest, v["record"], only=[SHARD2], trust_record=False)
    assert v2["hashed"] == [SHARD2] and v2["complete"]
    assert v2["record"]["files"].keys() == v["record"]["files"].keys()


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_workers_do_not_change_the_result(model_copy, sim_manifest, workers):
    v = vf.verify_dir(str(model_copy), sim_manifest, None, workers=workers)
    assert v["complete"]
    assert {k: e["sha256"] for k, e in v["record"]["files"].items()} == {
        f["path"]: hashlib.sha256((model_copy / f["path"]).read_bytes()).hexdigest() for f in sim_manifest["files"]}


def test_unreadable_record_is_ignored(model_copy, sim_manifest):
    (model_copy / vf.RECORD_NAME).write_text("{not json")
    assert vf.load_record(str(model_copy)) is None
    (model_copy / vf.RECORD_NAME).write_text(json.dumps({"format": 99, "files": {}}))
    assert vf.load_record(str(model_copy)) is None


def test_record_add(model_copy, sim_manifest):
    v = vf.verify_dir(str(model_copy), sim_manifest, None)
    partial = dict(v["record"], files={k: e for k, e in v["record"]["files"].items() if k != SHARD2})
    digest = {"sha256": hashlib.sha256((model_copy / SHARD2).read_bytes()).hexdigest()}
    rec = vf.record_add(partial, sim_manifest, str(model_copy), {SHARD2: digest})
    assert rec["status"] == "complete" and rec["files"][SHARD2]["sha256"] == digest["sha256"]
    with pytest.raises(ValueError, match="does not match"):
        vf.record_add(partial, sim_manifest, str(model_copy), {SHARD2: {"sha256": "0" * 64}})
