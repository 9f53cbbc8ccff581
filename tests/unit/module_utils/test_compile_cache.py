"""llmb.compile_cache: a service's compile cache before its start (cold, warm, peer), and the module that
creates the directories in one call (plugins/modules/llmb_compile_cache.py)."""

from __future__ import annotations

import os
import sys

import llmb
import llmb.compile_cache as cc
import pytest

sys.modules.setdefault("ansible.module_utils.llmb", llmb)
sys.modules.setdefault("ansible.module_utils.llmb.compile_cache", cc)

from module_runner import run_module  # noqa: E402


def test_missing_and_empty_directories_are_cold(tmp_path):
    assert cc.classify(str(tmp_path / "none")) == "cold"
    (tmp_path / "c" / "torch_compile_cache" / "empty").mkdir(parents=True)  # subdirectories, no file
    assert cc.classify(str(tmp_path / "c")) == "cold"
    (tmp_path / "f").write_text("x")  # a file where the directory should be
    assert cc.classify(str(tmp_path / "f")) == "cold"


def test_a_file_anywhere_below_is_warm(tmp_path):
    deep = tmp_path / "c" / "torch_compile_cache" / "abc" / "rank_0_0"
    deep.mkdir(parents=True)
    (deep / "inductor.bin").write_bytes(b"\0")
    assert cc.classify(str(tmp_path / "c")) == "warm"


def test_the_peer_marker_makes_it_peer_but_alone_is_cold(tmp_path):
    c = tmp_path / "c"
    c.mkdir()
    (c / cc.PEER_MARKER).write_text('{"peer": "node2"}')
    assert cc.classify(str(c)) == "cold"  # a marker without the copy's files is no cache
    (c / "triton").mkdir()
    (c / "triton" / "k.cubin").write_bytes(b"\1")
    assert cc.classify(str(c)) == "peer"


def test_prepare_says_the_state_before_creating(tmp_path):
    warm = tmp_path / "warm"
    warm.mkdir()
    (warm / "x").write_text("1")
    dirs = {"llmb-vllm": str(tmp_path / "new" / "llmb-vllm"), "llmb-other": str(warm)}
    dry = cc.prepare(dirs, check=True)
    assert dry == {"state": {"llmb-vllm": "cold", "llmb-other": "warm"}, "created": [dirs["llmb-vllm"]]}
    assert not os.path.exists(dirs["llmb-vllm"])
    assert cc.prepare(dirs, 0o750) == dry
    assert oct(os.stat(dirs["llmb-vllm"]).st_mode & 0o777) == "0o750"
    assert cc.prepare(dirs) == {"state": {"llmb-vllm": "cold", "llmb-other": "warm"}, "created": []}


@pytest.mark.parametrize("dirs", [["/x"], {"llmb-vllm": "relative/dir"}, {"llmb-vllm": "/var/../etc"},
                                  {"llmb-vllm": 3}, {"": "/x"}])
def test_bad_dirs_are_refused_naming_the_entry(dirs):
    with pytest.raises(ValueError, match=r"^dirs"):
        cc.check_dirs(dirs)


def test_module_creates_once_and_reports_states(tmp_path, monkeypatch, capsys):
    args = {"dirs": {"llmb-vllm": str(tmp_path / "llmb-vllm")}, "host": "node1"}
    first = run_module("llmb_compile_cache", args, monkeypatch, capsys)
    assert first["changed"] is True and first["state"] == {"llmb-vllm": "cold"}
    (tmp_path / "llmb-vllm" / "k").write_text("kernel")
    again = run_module("llmb_compile_cache", args, monkeypatch, capsys)
    assert again["changed"] is False and again["state"] == {"llmb-vllm": "warm"}
    bad = run_module("llmb_compile_cache", {"dirs": {"llmb-vllm": "x"}, "host": "node1"}, monkeypatch, capsys)
    assert bad["failed"] is True and bad["msg"].startswith("node1: dirs[llmb-vllm]")


def test_a_peer_filled_cache_is_adopted_once_its_group_started_whole(tmp_path, monkeypatch, capsys):
    """2x H200 (fourth device session): a node filled from a peer kept its marker, and each later start of
    its group was filed as a peer start. Adopted after a whole start, it is warm (and may be passed on); the
    provenance stays in the adopted marker. Cold and warm caches are left as they are."""
    peer = tmp_path / "peer"
    (peer / "vllm").mkdir(parents=True)
    (peer / "vllm" / "x.bin").write_bytes(b"x")
    (peer / cc.PEER_MARKER).write_text('{"peer": "node1"}')
    warm = tmp_path / "warm"
    warm.mkdir()
    (warm / "k").write_text("k")
    dirs = {"llmb-vllm": str(peer), "other": str(warm), "cold": str(tmp_path / "none")}
    seen = run_module("llmb_compile_cache", {"state": "adopted", "dirs": dirs, "host": "n2", "_ansible_check_mode": True},
                      monkeypatch, capsys)
    assert seen["adopted"] == [str(peer)] and seen["changed"] is True and cc.classify(str(peer)) == "peer"
    got = run_module("llmb_compile_cache", {"state": "adopted", "dirs": dirs, "host": "n2"}, monkeypatch, capsys)
    assert got["adopted"] == [str(peer)] and cc.classify(str(peer)) == "warm" and cc.classify(str(warm)) == "warm"
    assert (peer / cc.ADOPTED_MARKER).read_text() == '{"peer": "node1"}' and not (peer / cc.PEER_MARKER).exists()
    assert [f["path"] for f in cc.manifest(str(peer))["files"]] == ["vllm/x.bin"]  # the markers are not served
    again = run_module("llmb_compile_cache", {"state": "adopted", "dirs": dirs, "host": "n2"}, monkeypatch, capsys)
    assert again["changed"] is False and again["adopted"] == []
    # a cache holding nothing but an adopted marker is cold
    only = tmp_path / "only"
    only.mkdir()
    (only / cc.ADOPTED_MARKER).write_text("{}")
    assert cc.classify(str(only)) == "cold"
