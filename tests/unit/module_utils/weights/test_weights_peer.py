"""llmb.weights.peer: copies from a node serving its directory with python3 -m http.server."""

from __future__ import annotations

import functools
import os
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from llmb.jsonpatch import patch_file
from llmb.weights import peer
from llmb.weights import verify as vf


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(directory):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def complete(model_copy, manifest):
    v = vf.verify_dir(str(model_copy), manifest, None)
    vf.save_record(str(model_copy), v["record"])


def test_copy_everything_verified_on_arrival(model_copy, sim_manifest, serve, tmp_path):
    complete(model_copy, sim_manifest)
    url = serve(model_copy)
    assert peer.wait_ready([url], sim_manifest["digest"], timeout=5) >= 0
    dest = tmp_path / "rx"
    dest.mkdir()
    out = peer.fetch(url, sim_manifest["files"], str(dest), workers=4)
    assert out["bytes"] == sim_manifest["total_size"]
    rec = vf.record_add({"files": {}}, sim_manifest, str(dest), out["digests"])
    assert rec["status"] == "complete"
    assert vf.verify_dir(str(dest), sim_manifest, None)["complete"]
    assert not (dest / peer.PARTIAL_DIR).exists()


def test_corrupt_source_file_never_lands(model_copy, sim_manifest, serve, tmp_path):
    shard = "model-00003-of-000004.safetensors"
    data = bytearray((model_copy / shard).read_bytes())
    data[-1] ^= 0xFF
    (model_copy / shard).write_bytes(bytes(data))
    url = serve(model_copy)
    dest = tmp_path / "rx"
    dest.mkdir()
    entry = [f for f in sim_manifest["files"] if f["path"] == shard]
    with pytest.raises(peer.PeerError, match=rf"{shard}: sha256 .* on arrival, manifest says"):
        peer.fetch(url, entry, str(dest))
    assert not (dest / shard).exists() and os.listdir(dest) == []


def test_pristine_orig_is_taken_from_a_patched_source(model_copy, sim_manifest, serve, tmp_path):
    patch_file(str(model_copy / "config.json"), [{"path": "model_type", "value": "deepseek_v3"}])
    url = serve(model_copy)
    dest = tmp_path / "rx"
    dest.mkdir()
    entry = [f for f in sim_manifest["files"] if f["path"] == "config.json"]
    out = peer.fetch(url, entry, str(dest))
    assert out["files"] == ["config.json"]
    assert (dest / "config.json").read_bytes() == (model_copy / "config.json.orig").read_bytes()


def test_wait_ready_times_out_and_fails_fast(model_copy, sim_manifest, serve):
    url = serve(model_copy)  # no record yet
    with pytest.raises(peer.PeerError, match="sources not complete after 0s"):
        peer.wait_ready([url], sim_manifest["digest"], timeout=0.2, poll=0.05)
    failed = {"format": 1, "files": {}, "status": "failed", "manifest_digest": sim_manifest["digest"],
              "error": "hub said 401"}
    # a previous run's failure: keep waiting (this run's sender may still be working)
    vf.save_record(str(model_copy), dict(failed, failed_at=time.time() - 3600))
    with pytest.raises(peer.PeerError, match="sources not complete"):
        peer.wait_ready([url], sim_manifest["digest"], timeout=0.2, poll=0.05)
    vf.save_record(str(model_copy), dict(failed, failed_at=time.time()))
    with pytest.raises(peer.PeerError, match="failed to get the weights: hub said 401"):
        peer.wait_ready([url], sim_manifest["digest"], timeout=5, poll=0.05)
    with pytest.raises(peer.PeerError, match="not answering"):
        peer.wait_ready(["http://127.0.0.1:9"], sim_manifest["digest"], timeout=0.1, poll=0.05)
