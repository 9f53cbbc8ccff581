"""llmb.compile_cache's peer copy: the sender's manifest, the receiver's verified fetch into a staging
directory, and the marker written last (the real weights peer.fetch over a local HTTP server)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import sys
import threading

import llmb
import llmb.compile_cache as cc
import llmb.weights
import pytest
from llmb.weights import peer, relay

for _name, _mod in (("", llmb), (".compile_cache", cc), (".weights", llmb.weights), (".weights.peer", peer),
                    (".weights.relay", relay)):
    sys.modules.setdefault("ansible.module_utils.llmb" + _name, _mod)

from module_runner import run_module  # noqa: E402


@pytest.fixture
def warm(tmp_path):
    root = tmp_path / "n1" / "llmb-vllm"
    deep = root / "torch_compile_cache" / "abc" / "rank_0_0"
    deep.mkdir(parents=True)
    (deep / "inductor.bin").write_bytes(os.urandom(3000))
    (root / "triton").mkdir()
    (root / "triton" / "k.cubin").write_bytes(b"cubin")
    for d in (root, root / "torch_compile_cache", root / "torch_compile_cache" / "abc", deep, root / "triton"):
        d.chmod(0o755)
    return root


ASKED: list[str] = []  # every path the test relay was asked for


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        ASKED.append(self.path)
        super().do_GET()


@pytest.fixture
def server(warm):
    ASKED.clear()
    handler = functools.partial(_Handler, directory=str(warm))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_manifest_lists_every_file_with_size_and_hash(warm):
    m = cc.manifest(str(warm))
    assert m["unservable"] == []
    assert [e["path"] for e in m["files"]] == ["torch_compile_cache/abc/rank_0_0/inductor.bin", "triton/k.cubin"]
    assert m["files"][1] == {"path": "triton/k.cubin", "size": 5, "sha256": hashlib.sha256(b"cubin").hexdigest()}


def test_a_private_file_or_a_link_is_not_served(warm):
    (warm / "triton" / "k.cubin").chmod(0o600)
    (warm / "out").symlink_to("/etc")
    bad = cc.manifest(str(warm))["unservable"]
    assert any("k.cubin: mode 0600" in b for b in bad)
    assert any(b.endswith("out: a link") for b in bad)


def test_receive_fills_a_cold_cache_and_writes_the_marker_last(warm, server, tmp_path):
    files = cc.manifest(str(warm))["files"]
    cold = tmp_path / "n2" / "llmb-vllm"
    (cold / "torch_compile_cache").mkdir(parents=True)  # empty subdirectory: still cold
    res = cc.receive(server, files, str(cold), "n1", "d" * 64, peer.fetch)
    assert cc.classify(str(cold)) == "peer"
    assert (cold / "triton" / "k.cubin").read_bytes() == b"cubin"
    marker = json.loads((cold / cc.PEER_MARKER).read_text())
    assert marker == {"peer": "n1", "digest": "d" * 64, "manifest_sha256": cc.manifest_sha256(files),
                      "files": 2, "bytes": 3005}
    assert res["files"] == 2 and not os.path.exists(str(cold) + cc.INCOMING_SUFFIX)
    assert cc.manifest(str(cold))["files"] == files  # the marker is not part of the copy


def test_a_corrupt_copy_leaves_the_cache_cold(warm, server, tmp_path):
    files = cc.manifest(str(warm))["files"]
    files[1] = dict(files[1], sha256="0" * 64)
    cold = tmp_path / "n2" / "llmb-vllm"
    with pytest.raises(peer.PeerError, match="sha256"):
        cc.receive(server, files, str(cold), "n1", "d" * 64, peer.fetch)
    assert cc.classify(str(cold)) == "cold"


def test_an_interrupted_copy_is_neither_warm_nor_peer(warm, tmp_path):
    files = cc.manifest(str(warm))["files"]
    cold = tmp_path / "n2" / "llmb-vllm"

    def dies(base, entries, dest):
        (tmp_path / "n2" / "llmb-vllm.llmb-incoming" / "triton").mkdir(parents=True, exist_ok=True)
        (tmp_path / "n2" / "llmb-vllm.llmb-incoming" / "triton" / "k.cubin").write_bytes(b"cubin")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cc.receive("http://x", files, str(cold), "n1", "d" * 64, dies)
    assert cc.classify(str(cold)) == "cold"
    calls = []
    cc.receive("http://x", files, str(cold), "n1", "d" * 64, lambda b, e, d: calls.append(os.listdir(d)) or {})
    assert calls == [[]]  # the next try starts from an empty staging directory


def test_a_warm_cache_is_not_overwritten(warm, server):
    with pytest.raises(ValueError, match="expected a cold cache"):
        cc.receive(server, cc.manifest(str(warm))["files"], str(warm), "n1", "d" * 64, peer.fetch)


@pytest.mark.parametrize("files, word", [
    ([], "non-empty"),
    ([{"path": "../x", "size": 1, "sha256": "a" * 64}], "path"),
    ([{"path": "/etc/x", "size": 1, "sha256": "a" * 64}], "path"),
    ([{"path": cc.PEER_MARKER, "size": 1, "sha256": "a" * 64}], "path"),
    ([{"path": "x", "size": -1, "sha256": "a" * 64}], "size"),
    ([{"path": "x", "size": 1, "sha256": "xyz"}], "sha256"),
])
def test_a_bad_manifest_names_the_entry(files, word):
    with pytest.raises(ValueError, match=word):
        cc.check_manifest(files)


def test_the_module_serves_receives_and_stops(warm, server, tmp_path, monkeypatch, capsys):
    started, stopped = [], []
    monkeypatch.setattr(relay, "start", lambda port, addr, d, unit, timeout: started.append((port, addr, d, unit)))
    monkeypatch.setattr(relay, "stop", lambda unit: stopped.append(unit))
    sent = run_module("llmb_compile_cache_peer", {"state": "serving", "dirs": {"llmb-vllm": str(warm)},
                                                  "address": "10.0.0.1", "port": 18190, "host": "n1"}, monkeypatch, capsys)
    man = sent["manifests"]["llmb-vllm"]
    assert started == [(18190, "10.0.0.1", str(warm), "llmb-cache-relay-llmb-vllm")]
    assert man["url"] == "http://10.0.0.1:18190" and man["unservable"] == [] and len(man["files"]) == 2
    cold = tmp_path / "n2" / "llmb-vllm"
    job = {"cache_dir": str(cold), "url": server, "source": "n1", "digest": "e" * 64, "files": man["files"]}
    got = run_module("llmb_compile_cache_peer", {"state": "received", "receive": {"llmb-vllm": job}, "host": "n2"},
                     monkeypatch, capsys)
    assert got["changed"] is True and got["received"]["llmb-vllm"]["manifest_sha256"] == man["manifest_sha256"]
    # each file asked for once: a cache has no unpatched originals (the weights' .orig first was a 404 a file)
    assert sorted(ASKED) == sorted("/" + f["path"] for f in man["files"])
    assert cc.classify(str(cold)) == "peer"
    again = run_module("llmb_compile_cache_peer", {"state": "received", "receive": {"llmb-vllm": job}, "host": "n2"},
                       monkeypatch, capsys)
    assert again["failed"] is True and again["msg"].startswith("n2: ") and "expected a cold cache" in again["msg"]
    run_module("llmb_compile_cache_peer", {"state": "stopped", "dirs": {"llmb-vllm": str(warm)}, "host": "n1"}, monkeypatch, capsys)
    assert stopped == ["llmb-cache-relay-llmb-vllm"]


def _private_like_vllm(warm):
    """What the real vLLM 0.26.0 cache held: FlashInfer's autotune configs written with mkstemp (0600) in a
    directory of its own (vllm/model_executor/warmup/flashinfer_autotune_cache.py)."""
    d = warm / "flashinfer_autotune_cache" / "90" / "cached_ops" / ("f" * 64)
    d.mkdir(parents=True)
    (d / "autotune_configs.json").write_text("{}")
    (d / "autotune_configs.json").chmod(0o600)
    d.chmod(0o700)
    return d


def test_open_for_relay_adds_read_for_others_only_and_follows_no_link(warm, tmp_path):
    d = _private_like_vllm(warm)
    (warm / "triton" / "k.cubin").chmod(0o640)
    outside = tmp_path / "secret"
    outside.write_text("x")
    outside.chmod(0o600)
    (warm / "triton" / "out").symlink_to(outside)
    rel = "flashinfer_autotune_cache/90/cached_ops/" + "f" * 64
    assert cc.open_for_relay(str(warm), check=True) == [rel, rel + "/autotune_configs.json", "triton/k.cubin"]
    assert (d / "autotune_configs.json").stat().st_mode & 0o777 == 0o600  # check mode changes nothing
    assert sorted(cc.open_for_relay(str(warm))) == sorted([rel, rel + "/autotune_configs.json", "triton/k.cubin"])
    assert (d / "autotune_configs.json").stat().st_mode & 0o777 == 0o604  # the bits added, nothing else
    assert d.stat().st_mode & 0o777 == 0o705 and (warm / "triton" / "k.cubin").stat().st_mode & 0o777 == 0o644
    assert outside.stat().st_mode & 0o777 == 0o600  # the link's target untouched
    assert cc.open_for_relay(str(warm)) == []  # once is enough
    assert any("triton/out: a link" in r for r in cc.manifest(str(warm))["unservable"])


def test_the_module_serves_a_cache_the_engine_wrote_private(warm, monkeypatch, capsys):
    from ansible.module_utils import basic

    d = _private_like_vllm(warm)
    started = []
    monkeypatch.setattr(relay, "start", lambda port, addr, path, unit, timeout: started.append(path))
    said = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: said.append(msg))
    args = {"state": "serving", "dirs": {"llmb-vllm": str(warm)}, "address": "10.0.0.1", "host": "n1"}
    # check mode: nothing opened nor started, the manifest is what it would serve
    seen = run_module("llmb_compile_cache_peer", dict(args, _ansible_check_mode=True), monkeypatch, capsys)
    man = seen["manifests"]["llmb-vllm"]
    assert started == [] and (d / "autotune_configs.json").stat().st_mode & 0o777 == 0o600
    assert man["unservable"] == [] and len(man["files"]) == 3 and len(man["opened"]) == 2 and seen["changed"] is True
    sent = run_module("llmb_compile_cache_peer", args, monkeypatch, capsys)
    man = sent["manifests"]["llmb-vllm"]
    assert started == [str(warm)] and man["unservable"] == [] and sent["changed"] is True
    assert any(f["path"].endswith("autotune_configs.json") for f in man["files"])
    assert said[-1].startswith("n1: the compile cache of llmb-vllm: gave others read access to 2 entries")


def test_the_module_does_not_serve_a_cache_with_a_link(warm, tmp_path, monkeypatch, capsys):
    from ansible.module_utils import basic

    (warm / "triton" / "out").symlink_to(tmp_path)
    monkeypatch.setattr(relay, "start", lambda *a, **k: pytest.fail("served a cache with a link out of it"))
    said = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: said.append(msg))
    sent = run_module("llmb_compile_cache_peer", {"state": "serving", "dirs": {"llmb-vllm": str(warm)},
                                                  "address": "10.0.0.1", "host": "n1"}, monkeypatch, capsys)
    assert sent["changed"] is False and "a link" in sent["manifests"]["llmb-vllm"]["unservable"][0]
    # said on the sender (the real vLLM 0.26.0 cache was refused silently on 2x H200: docs/real-hardware.md)
    (w,) = said
    assert w.startswith("n1: the compile cache of llmb-vllm is not served to its cold peers (they start cold)")
    assert "1 entry" in w and "triton/out: a link" in w


def test_the_module_refuses_a_bad_receive(tmp_path, monkeypatch, capsys):
    job = {"cache_dir": str(tmp_path / "c"), "url": "file:///etc", "source": "n1", "digest": "e" * 64,
           "files": [{"path": "x", "size": 1, "sha256": "a" * 64}]}
    bad = run_module("llmb_compile_cache_peer", {"state": "received", "receive": {"llmb-vllm": job}, "host": "n2"},
                     monkeypatch, capsys)
    assert bad["failed"] is True and bad["msg"].startswith("n2: receive[llmb-vllm].url")
