"""The test hub (tests/hfserver/server.py): the endpoints huggingface_hub 2.4.0 uses, Range, auth,
byte counters, throttling and dropped connections; and the generator's determinism."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request

import pytest
import yaml
from hfserver.genmodel import generate
from hfserver.server import Running
from llmb.weights.manifest import index_shards
from weights_helpers import REPO, ROOT


def req(url, method="GET", headers=None, data=None):
    r = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_head_and_range(hub, hub_root):
    repo = hub.state.repos[REPO]
    shard = "model-00001-of-000004.safetensors"
    data = (hub_root / REPO / shard).read_bytes()
    url = f"{hub.url}/{REPO}/resolve/main/{shard}"
    code, h, body = req(url, "HEAD")
    assert code == 200 and body == b""
    assert h["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"' and h["X-Repo-Commit"] == repo.sha
    assert h["X-Linked-Size"] == str(len(data)) and h["Accept-Ranges"] == "bytes"
    code, h, body = req(url, headers={"Range": "bytes=100-199"})
    assert code == 206 and body == data[100:200] and h["Content-Range"] == f"bytes 100-199/{len(data)}"
    code, _, body = req(url, headers={"Range": "bytes=-10"})
    assert code == 206 and body == data[-10:]
    code, h, _ = req(url, headers={"Range": f"bytes={len(data)}-"})
    assert code == 416 and h["Content-Range"] == f"bytes */{len(data)}"
    # non-LFS files: the git blob id is the ETag
    code, h, body = req(f"{hub.url}/{REPO}/resolve/{repo.sha}/config.json")
    assert code == 200 and h["ETag"].strip('"') == hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
    assert hub.state.stats()["bytes_by_file"][f"{REPO}/{shard}"] == 100 + 10


@pytest.mark.parametrize(
    ("path", "code", "error_code"),
    [
        (f"/{REPO}/resolve/main/nope.bin", 404, "EntryNotFound"),
        (f"/{REPO}/resolve/{'0' * 40}/config.json", 404, "RevisionNotFound"),
        ("/llmb-test/other/resolve/main/config.json", 404, "RepoNotFound"),
        ("/api/models/llmb-test/other", 404, "RepoNotFound"),
    ],
)
def test_errors_carry_hub_error_codes(hub, path, code, error_code):
    got, h, _ = req(hub.url + path)
    assert got == code and h["X-Error-Code"] == error_code


def test_client_listing_with_pagination_and_paths_info(hub):
    import huggingface_hub as hh

    hub.state.page_size = 3
    api = hh.HfApi(endpoint=hub.url, token=False)
    files = [f for f in api.list_repo_tree(REPO, recursive=True) if isinstance(f, hh.hf_api.RepoFile)]
    assert len(files) == len(hub.state.repos[REPO].files)
    shard = next(f for f in files if f.path.endswith("00003-of-000004.safetensors"))
    assert shard.lfs is not None and len(shard.lfs.sha256) == 64
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == hub.state.repos[REPO].sha and len(info.siblings) == len(files)
    got = api.get_paths_info(REPO, ["config.json", "tiktoken.model"])
    assert [g.path for g in got] == ["config.json", "tiktoken.model"]


def test_token_required_and_checked(hub):
    hub.state.token = "good"
    url = f"{hub.url}/api/models/{REPO}"
    assert req(url)[0] == 401
    code, h, _ = req(url, headers={"Authorization": "Bearer bad"})
    assert code == 401 and h["X-Error-Message"] == "Invalid credentials in Authorization header"
    assert req(url, headers={"Authorization": "Bearer good"})[0] == 200
    assert hub.state.stats()["auth_failures"] == 2


def test_throttle_is_shared_by_all_downloads(hub):
    url = f"{hub.url}/{REPO}/resolve/main/model-00002-of-000004.safetensors"
    hub.state.throttle.rate = 4_000_000
    t0 = time.monotonic()
    code, _, body = req(url)
    took = time.monotonic() - t0
    assert code == 200 and took >= len(body) / 4_000_000 * 0.9


def test_drop_mid_file_then_controls(hub):
    url = f"{hub.url}/{REPO}/resolve/main/model-00002-of-000004.safetensors"
    code, _, _ = req(f"{hub.url}/_test/config", "POST",
                     data=json.dumps({"drop": [{"path": "model-00002-*", "after_bytes": 4096}]}).encode(),
                     headers={"Content-Type": "application/json"})
    assert code == 200
    with pytest.raises(Exception):  # noqa: B017 - http.client raises IncompleteRead
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
    stats = json.loads(req(f"{hub.url}/_test/stats")[2])
    assert stats["requests"][-1]["dropped"] and stats["requests"][-1]["bytes"] == 4096
    assert req(url)[0] == 200  # count 1: the next request is whole
    req(f"{hub.url}/_test/reset", "POST", data=b"")
    assert json.loads(req(f"{hub.url}/_test/stats")[2])["bytes_total"] == 0


def test_generator_is_deterministic_and_matches_its_profile(tmp_path, hub_root):
    info = generate(tmp_path / REPO)
    with Running(tmp_path) as h:
        sha = h.state.repos[REPO].sha
    profile = yaml.safe_load((ROOT / "data" / "models" / "kimi-k2-sim.yml").read_text())
    assert profile["repo_id"] == REPO
    assert profile["revision"] == sha, "regenerate: the generated model changed; update the pinned revision"
    assert profile["total_size_bytes"] == info["total_size"] - sum(
        info["files"][n] for n in (".gitattributes", "README.md"))
    assert profile["shard_count"] == info["shard_count"]
    cfg = json.loads((tmp_path / REPO / "config.json").read_text())
    assert cfg["model_type"] == "kimi_k2"
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"
    assert cfg["quantization_config"]["config_groups"]["group_0"]["targets"] == ["Linear"]
    index = json.loads((tmp_path / REPO / "model.safetensors.index.json").read_text())
    assert index_shards(index) == {f"model-{i:05d}-of-000004.safetensors" for i in range(1, 5)}
