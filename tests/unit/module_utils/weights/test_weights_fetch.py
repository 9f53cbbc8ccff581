"""llmb.weights.fetch end to end on this machine: the real huggingface_hub client (the controller
venv stands in for the node's tool venv) against the test hub serving the generated model."""

from __future__ import annotations

import ast
import json
from types import SimpleNamespace

import pytest
from llmb.weights import disk, fetch
from llmb.weights import verify as vf
from llmb.weights.lock import DirLock
from weights_helpers import ALLOW, REPO

SHARD2 = "model-00002-of-000004.safetensors"
TOKEN = "hf_w4TestTokenThatMustNeverBePrinted"


def params(hub, dest, python, **kw):
    base = dict(dest=str(dest), repo_id=REPO, revision="main", endpoint=hub.url, allow_patterns=ALLOW,
                python=python, hf_home=str(dest) + ".hf-home", max_workers=4)
    base.update(kw)
    return fetch.FetchParams(**base)


def served(hub) -> dict:
    return hub.state.stats()["bytes_by_file"]


def test_first_run_downloads_everything_second_run_nothing(hub, tmp_path, venv_python, sim_manifest):
    dest = tmp_path / "m"
    r1 = fetch.run(params(hub, dest, venv_python))
    assert r1["changed"] and r1["complete"] and r1["source"] == "hub"
    assert sorted(r1["fetched"]) == sorted(f["path"] for f in sim_manifest["files"])
    assert r1["commit"] == sim_manifest["commit"] and r1["digest"] == sim_manifest["digest"]
    assert hub.state.stats()["bytes_total"] == sim_manifest["total_size"]
    rec = json.loads((dest / vf.RECORD_NAME).read_text())
    assert rec["status"] == "complete" and len(rec["files"]) == len(sim_manifest["files"])
    hub.state.reset()
    r2 = fetch.run(params(hub, dest, venv_python, manifest=r1["manifest"]))
    assert not r2["changed"] and r2["fetched"] == [] and r2["verify"]["hashed"] == []
    assert hub.state.stats()["bytes_total"] == 0 and hub.state.stats()["api_calls"] == 0


def test_corrupt_shard_is_the_only_file_fetched_again(hub, tmp_path, venv_python, sim_manifest):
    dest = tmp_path / "m"
    fetch.run(params(hub, dest, venv_python))
    data = bytearray((dest / SHARD2).read_bytes())
    data[4096] ^= 0x55
    (dest / SHARD2).write_bytes(bytes(data))
    (dest / "tokenization_kimi.py").unlink()
    hub.state.reset()
    r = fetch.run(params(hub, dest, venv_python, manifest=sim_manifest))
    assert r["refetched"] == [SHARD2]
    assert sorted(r["fetched"]) == [SHARD2, "tokenization_kimi.py"]
    assert set(served(hub)) == {f"{REPO}/{SHARD2}", f"{REPO}/tokenization_kimi.py"}
    assert vf.verify_dir(str(dest), sim_manifest, None)["complete"]


def test_dropped_connection_resumes_with_fewer_bytes_than_the_file(hub, tmp_path, venv_python, sim_manifest):
    size = {f["path"]: f["size"] for f in sim_manifest["files"]}[SHARD2]
    hub.state.drops = [{"path": SHARD2, "after_bytes": 1_000_000, "count": 1}]
    r = fetch.run(params(hub, tmp_path / "m", venv_python, manifest=sim_manifest, chunk_bytes=256 * 1024))
    assert r["complete"]
    reqs = [q for q in hub.state.stats()["requests"] if q["file"].endswith(SHARD2)]
    assert [q["dropped"] for q in reqs] == [True, False]
    retry = reqs[1]
    assert retry["status"] == 206 and retry["start"] > 0
    assert retry["bytes"] < size  # the resumed request fetched less than the whole file
    assert reqs[0]["bytes"] + retry["bytes"] < 2 * size


def test_bad_token_is_clear_and_never_printed(hub, tmp_path, venv_python):
    hub.state.token = "the-right-one"
    tf = tmp_path / "tok"
    tf.write_text(TOKEN)
    with pytest.raises(fetch.FetchError) as err:
        fetch.run(params(hub, tmp_path / "m", venv_python, token_file=str(tf)))
    msg = str(err.value)
    assert err.value.details["kind"] == "auth" and err.value.details["status"] == 401
    assert "rejected the token" in msg and "Invalid credentials" in msg and "weights_hf_token" in msg
    assert TOKEN not in msg and TOKEN not in repr(err.value.details)
    assert not (tmp_path / "m").exists()  # failed at the manifest, before anything was written
    # no token at all
    with pytest.raises(fetch.FetchError, match="requires a token"):
        fetch.run(params(hub, tmp_path / "m", venv_python))
    # the right token works
    tf.write_text("the-right-one\n")
    assert fetch.run(params(hub, tmp_path / "m", venv_python, token_file=str(tf)))["complete"]


def test_full_disk_fails_before_any_download(hub, tmp_path, venv_python, sim_manifest, monkeypatch):
    monkeypatch.setattr(disk.os, "statvfs", lambda p: SimpleNamespace(f_bavail=256, f_frsize=4096))
    with pytest.raises(fetch.FetchError) as err:
        fetch.run(params(hub, tmp_path / "m", venv_python, manifest=sim_manifest))
    assert err.value.check == "disk-space"
    assert f"needed {sim_manifest['total_size']} bytes" in str(err.value) and "free 1048576 bytes" in str(err.value)
    assert hub.state.stats()["bytes_total"] == 0


def test_check_mode_reports_and_writes_nothing(hub, tmp_path, venv_python, sim_manifest):
    r = fetch.run(params(hub, tmp_path / "m", venv_python, manifest=sim_manifest), check=True)
    assert r["changed"] and len(r["would_fetch"]) == len(sim_manifest["files"])
    assert not (tmp_path / "m").exists() and hub.state.stats()["bytes_total"] == 0


def test_index_naming_a_filtered_out_shard_fails(hub, tmp_path, venv_python):
    narrow = [p for p in ALLOW if p != "*.safetensors"] + ["model-0000[123]-*.safetensors"]
    with pytest.raises(fetch.FetchError, match=r"names 1 shard\(s\) .* model-00004-of-000004"):
        fetch.run(params(hub, tmp_path / "m", venv_python, allow_patterns=narrow))


def test_manifest_only_and_a_wrong_revision(hub, tmp_path, venv_python, sim_manifest):
    r = fetch.run(params(hub, tmp_path / "m", venv_python, manifest_only=True))
    assert r["manifest"] == sim_manifest and not (tmp_path / "m").exists()
    with pytest.raises(fetch.FetchError, match="revision 0000000000000000000000000000000000000000 of"):
        fetch.run(params(hub, tmp_path / "m", venv_python, revision="0" * 40))


def test_peer_source_and_source_none(hub, tmp_path, venv_python, sim_manifest):
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    src = tmp_path / "src"
    fetch.run(params(hub, src, venv_python, manifest=sim_manifest))
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(src))
    handler.func.log_message = lambda *a: None
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        hub.state.reset()
        r = fetch.run(fetch.FetchParams(dest=str(tmp_path / "rx"), manifest=sim_manifest, source="peer",
                                        peer_url=url, wait_for=[url], wait_timeout=5))
        assert r["complete"] and r["source"] == url and hub.state.stats()["bytes_total"] == 0
        again = fetch.run(fetch.FetchParams(dest=str(tmp_path / "rx"), manifest=sim_manifest, source="peer",
                                            peer_url=url))
        assert not again["changed"]
    finally:
        srv.shutdown()
        srv.server_close()
    with pytest.raises(fetch.FetchError, match="missing or corrupt .* not to fetch them"):
        fetch.run(fetch.FetchParams(dest=str(tmp_path / "empty"), manifest=sim_manifest, source="none"))


def test_lock_held_by_another_run(hub, tmp_path, venv_python, sim_manifest):
    dest = tmp_path / "m"
    dest.mkdir()
    with DirLock(str(dest)):
        with pytest.raises(fetch.FetchError, match="lock: .* held by another run"):
            fetch.run(params(hub, dest, venv_python, manifest=sim_manifest, lock_timeout=0.2))


def test_missing_tool_venv_is_explained(hub, tmp_path):
    with pytest.raises(fetch.FetchError, match="tool venv with huggingface_hub"):
        fetch.run(params(hub, tmp_path / "m", "/nonexistent/bin/python"))


def test_hubclient_source_is_self_contained():
    """It runs as `python -c SOURCE` in the tool venv: only stdlib and huggingface_hub imports."""
    tree = ast.parse(fetch.hubclient_source())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0
            mods.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
    assert mods <= {"json", "os", "sys", "time", "re", "errno", "concurrent", "huggingface_hub"}


def _as_other_revision(dest, manifest) -> dict:
    """The record of a complete copy rewritten as if it held another commit (an earlier revision)."""
    rec = json.loads((dest / vf.RECORD_NAME).read_text())
    rec["commit"] = "a" * 40
    (dest / vf.RECORD_NAME).write_text(json.dumps(rec))
    return rec


def test_a_new_revision_keeps_the_previous_files_until_it_is_verified(hub, tmp_path, venv_python, sim_manifest):
    dest = tmp_path / "m"
    fetch.run(params(hub, dest, venv_python))
    data = bytearray((dest / SHARD2).read_bytes())
    data[4096] ^= 0x55  # the earlier revision's shard 2 differs from this one's
    (dest / SHARD2).write_bytes(bytes(data))
    previous = bytes(data)
    rec = _as_other_revision(dest, sim_manifest)
    # the new revision's download fails: the previous revision's file is back, and its record
    real = fetch.call_hub

    def broken(p, request, timeout):
        if request.get("op") == "download":
            assert (dest / fetch.PREVIOUS_DIR / SHARD2).read_bytes() == previous  # set aside meanwhile
            assert not (dest / SHARD2).exists()
            raise fetch.FetchError("hub down", check="hub")
        return real(p, request, timeout)

    fetch.call_hub = broken
    try:
        with pytest.raises(fetch.FetchError, match="hub down"):
            fetch.run(params(hub, dest, venv_python, manifest=sim_manifest))
    finally:
        fetch.call_hub = real
    assert (dest / SHARD2).read_bytes() == previous and not (dest / fetch.PREVIOUS_DIR).exists()
    assert json.loads((dest / vf.RECORD_NAME).read_text()) == rec
    # the hub answers: the new file is fetched and verified, then the previous one is gone
    r = fetch.run(params(hub, dest, venv_python, manifest=sim_manifest))
    assert r["fetched"] == [SHARD2] and r["previous_removed"] == 1 and r["complete"]
    assert not (dest / fetch.PREVIOUS_DIR).exists()
    assert vf.verify_dir(str(dest), sim_manifest, None)["complete"]
    assert json.loads((dest / vf.RECORD_NAME).read_text())["commit"] == sim_manifest["commit"]
