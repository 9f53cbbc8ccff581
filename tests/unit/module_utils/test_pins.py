"""pins.py against real servers on localhost: the project's test hub and Debian's docker-registry."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from llmbctl import pins

REPO_ID = "llmb-test/kimi-k2-sim"
TOKEN = "hf_not_a_secret_test_only_0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- servers
# hub_root, hub (the test hub serving the generated model): tests/unit/module_utils/conftest.py


def _put_blob(base: str, name: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    req = urllib.request.Request(f"{base}/v2/{name}/blobs/uploads/", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        location = resp.headers["Location"]
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    req = urllib.request.Request(
        f"{location}{sep}digest={digest}",
        data=data,
        method="PUT",
        headers={"Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
    return digest


def _put_manifest(base: str, name: str, tag: str, doc: dict, media_type: str) -> str:
    body = json.dumps(doc, separators=(",", ":")).encode()
    req = urllib.request.Request(
        f"{base}/v2/{name}/manifests/{tag}", data=body, method="PUT", headers={"Content-Type": media_type}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
        assert resp.headers["Docker-Content-Digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
    return "sha256:" + hashlib.sha256(body).hexdigest()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """Debian's docker-registry on a free port with one OCI image (v1) and an OCI index (multi)."""
    if not shutil.which("docker-registry"):
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    state = tmp_path_factory.mktemp("registry")
    port = free_port()
    (state / "config.yml").write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage:\n  filesystem: {{rootdirectory: {state / 'data'}}}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (state / "registry.log").open("w")
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(state / "config.yml")], stdout=log, stderr=log, stdin=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/v2/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("docker-registry did not answer: " + (state / "registry.log").read_text())
        name = "llmb-pins/tiny"
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
        cfg = _put_blob(base, name, config.encode())
        layer = _put_blob(base, name, b"llm-bringup pins test layer\n")
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": cfg,
                "size": len(config),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 28}
            ],
        }
        m_digest = _put_manifest(base, name, "v1", manifest, manifest["mediaType"])
        m_size = len(json.dumps(manifest, separators=(",", ":")).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": m_digest,
                    "size": m_size,
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
        i_digest = _put_manifest(base, name, "multi", index, index["mediaType"])
        yield {
            "host": f"127.0.0.1:{port}",
            "name": name,
            "digest": m_digest,
            "index_digest": i_digest,
            "image": f"127.0.0.1:{port}/{name}:v1",
            "index_image": f"127.0.0.1:{port}/{name}:multi",
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


# ----------------------------------------------------------------------------- model


def test_a_commit_needs_no_hub(tmp_path):
    commit = "d2299b8682de002b5b9603f1a35969b7a57cca49"
    dead = f"http://127.0.0.1:{free_port()}"
    assert pins.resolve_model(REPO_ID, commit, dead, None, {}) == (commit, "commit")


def test_a_branch_is_resolved_at_the_hub_and_locked(hub, tmp_path):
    sha = hub.state.repos[REPO_ID].sha
    got, problems = pins.resolve_pins(
        inventory_dir=tmp_path, model_name="kimi-k2-sim", repo_id=REPO_ID, revision="main",
        hf_endpoint=hub.url, hf_token=TOKEN, repin=False,
    )
    assert not problems
    assert got["model"]["commit"] == sha and got["model"]["source"] == "hub" and got["lock_written"]
    text = (tmp_path / "llmb.lock.json").read_text()
    lock = json.loads(text)
    assert lock["model"]["commit"] == sha and lock["model"]["revision"] == "main"
    assert lock["model"]["repo_id"] == REPO_ID and lock["model"]["endpoint"] == hub.url
    assert lock["model"]["resolved_at"].endswith("Z")
    assert TOKEN not in text
    assert [p.name for p in tmp_path.iterdir()] == ["llmb.lock.json"]  # no temp file left
    # idempotent: the same run again leaves the file alone
    again, problems = pins.resolve_pins(
        inventory_dir=tmp_path, model_name="kimi-k2-sim", repo_id=REPO_ID, revision="main",
        hf_endpoint=hub.url, repin=False,
    )
    assert not problems and again["model"]["source"] == "lock" and not again["lock_written"]


def test_the_lock_is_used_without_a_hub_and_repin_asks_again(hub, tmp_path):
    sha = hub.state.repos[REPO_ID].sha
    _, problems = pins.resolve_pins(
        inventory_dir=tmp_path, repo_id=REPO_ID, revision=None, hf_endpoint=hub.url, repin=False
    )
    assert not problems
    dead = f"http://127.0.0.1:{free_port()}"
    got, problems = pins.resolve_pins(
        inventory_dir=tmp_path, repo_id=REPO_ID, revision=None, hf_endpoint=dead, repin=False
    )
    assert not problems and got["model"] == {
        "repo_id": REPO_ID, "revision": "main", "commit": sha, "source": "lock", "endpoint": dead,
    }
    # LLMB_REPIN=1 moves the pin: the hub is asked, and without one the run is refused
    env_before = os.environ.get("LLMB_REPIN")
    os.environ["LLMB_REPIN"] = "1"
    try:
        _, problems = pins.resolve_pins(
            inventory_dir=tmp_path, model_name="kimi-k2-sim", repo_id=REPO_ID, hf_endpoint=dead
        )
    finally:
        if env_before is None:
            del os.environ["LLMB_REPIN"]
        else:
            os.environ["LLMB_REPIN"] = env_before
    assert len(problems) == 1 and "could not be reached" in problems[0].message
    # repin with the hub up rewrites the entry (resolved_at moves on)
    lock = tmp_path / "llmb.lock.json"
    old = json.loads(lock.read_text())
    old["model"]["resolved_at"] = "2000-01-01T00:00:00Z"
    lock.write_text(json.dumps(old))
    got, problems = pins.resolve_pins(inventory_dir=tmp_path, repo_id=REPO_ID, hf_endpoint=hub.url, repin=True)
    assert not problems and got["model"]["source"] == "hub" and got["lock_written"]
    assert json.loads(lock.read_text())["model"]["resolved_at"] != "2000-01-01T00:00:00Z"


def test_a_lock_entry_for_another_repo_or_revision_is_resolved_again(hub, tmp_path):
    stale = {"model": {"repo_id": "other/model", "revision": "main", "commit": "a" * 40}, "images": {}}
    (tmp_path / "llmb.lock.json").write_text(json.dumps(stale))
    got, problems = pins.resolve_pins(inventory_dir=tmp_path, repo_id=REPO_ID, hf_endpoint=hub.url, repin=False)
    assert not problems and got["model"]["source"] == "hub"
    assert got["model"]["commit"] == hub.state.repos[REPO_ID].sha
    stale = {"model": {"repo_id": REPO_ID, "revision": "v1", "commit": "a" * 40}, "images": {}}
    (tmp_path / "llmb.lock.json").write_text(json.dumps(stale))
    dead = f"http://127.0.0.1:{free_port()}"
    _, problems = pins.resolve_pins(inventory_dir=tmp_path, repo_id=REPO_ID, hf_endpoint=dead, repin=False)
    assert problems and "'main' is a branch" in problems[0].message


def test_no_hub_and_no_commit_is_refused_with_the_fix(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    got, problems = pins.resolve_pins(
        inventory_dir=tmp_path, model_name="kimi-k2-instruct", repo_id="moonshotai/Kimi-K2-Instruct",
        revision="main", hf_endpoint=dead, hf_token=TOKEN, repin=False,
    )
    assert got["model"] is None and len(problems) == 1
    p = problems[0]
    assert p.check == "pins"
    assert p.message.startswith(f"kimi-k2-instruct: revision 'main' is a branch and the hub at {dead} could not")
    assert "data/models/kimi-k2-instruct.yml" in p.fix and "weights_revision" in p.fix
    assert "HF_ENDPOINT" in p.fix and TOKEN not in p.format()
    assert not (tmp_path / "llmb.lock.json").exists()


def test_an_unknown_revision_is_named(hub, tmp_path):
    _, problems = pins.resolve_pins(inventory_dir=tmp_path, repo_id=REPO_ID, revision="v9", hf_endpoint=hub.url)
    assert problems and "has no revision 'v9'" in problems[0].message


def test_a_corrupt_lock_is_refused(tmp_path):
    (tmp_path / "llmb.lock.json").write_text("{not json")
    _, problems = pins.resolve_pins(inventory_dir=tmp_path, repo_id=REPO_ID, revision="a" * 40)
    assert problems and "is not a JSON object" in problems[0].message and "delete it" in problems[0].fix


def test_check_mode_writes_nothing(hub, tmp_path):
    got, problems = pins.resolve_pins(inventory_dir=tmp_path, repo_id=REPO_ID, hf_endpoint=hub.url, write=False)
    assert not problems and got["model"]["source"] == "hub" and not (tmp_path / "llmb.lock.json").exists()


# ----------------------------------------------------------------------------- images


@pytest.mark.parametrize(
    "ref, registry, repository, tag",
    [
        ("vllm/vllm-openai:v0.19.1", "docker.io", "vllm/vllm-openai", "v0.19.1"),
        ("ubuntu", "docker.io", "library/ubuntu", "latest"),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.1.0", "nvcr.io", "nvidia/tensorrt-llm/release", "1.1.0"),
        ("127.0.0.1:5000/llmb/tiny:v1", "127.0.0.1:5000", "llmb/tiny", "v1"),
        ("localhost/x", "localhost", "x", "latest"),
    ],
)
def test_image_references_are_split_like_docker(ref, registry, repository, tag):
    got = pins.parse_image(ref)
    assert (got.registry, got.repository, got.tag) == (registry, repository, tag)


@pytest.mark.parametrize("ref", ["", "a b", "x:y:z/w", "UPPER/case:1", "x@sha256:1234", "x:$(id)"])
def test_bad_image_references_are_problems(ref, tmp_path):
    _, problems = pins.resolve_pins(inventory_dir=tmp_path, images=[ref])
    assert len(problems) == 1 and "is not an image reference" in problems[0].message


def test_a_digest_or_an_inventory_pin_needs_no_registry(tmp_path):
    digest = "sha256:" + "ab" * 32
    got, problems = pins.resolve_pins(
        inventory_dir=tmp_path,
        images=[f"127.0.0.1:{free_port()}/a/b@{digest}", "nvcr.io/nvidia/x:1"],
        image_pins={"nvcr.io/nvidia/x:1": {"digest": digest, "id": "sha256:" + "cd" * 32}},
    )
    assert not problems
    assert [v["source"] for v in got["images"].values()] == ["ref", "inventory"]
    assert not (tmp_path / "llmb.lock.json").exists()  # nothing resolved, nothing to record
    _, problems = pins.resolve_pins(inventory_dir=tmp_path, images=["x:1"], image_pins={"x:1": {"digest": "latest"}})
    assert problems and "not sha256:<64 hex>" in problems[0].message


def test_a_tag_is_resolved_at_the_registry_and_locked(registry, tmp_path):
    got, problems = pins.resolve_pins(
        inventory_dir=tmp_path, images=[registry["image"], registry["index_image"]], repin=False
    )
    assert not problems, [p.format() for p in problems]
    assert got["images"][registry["image"]] == {"digest": registry["digest"], "source": "registry"}
    assert got["images"][registry["index_image"]]["digest"] == registry["index_digest"]
    lock = json.loads((tmp_path / "llmb.lock.json").read_text())
    assert lock["images"] == {registry["image"]: registry["digest"], registry["index_image"]: registry["index_digest"]}


def test_the_image_lock_is_used_and_repin_moves_it(registry, tmp_path):
    stale = "sha256:" + "0" * 64
    (tmp_path / "llmb.lock.json").write_text(json.dumps({"images": {registry["image"]: stale}}))
    got, problems = pins.resolve_pins(inventory_dir=tmp_path, images=[registry["image"]], repin=False)
    assert not problems and got["images"][registry["image"]] == {"digest": stale, "source": "lock"}
    got, problems = pins.resolve_pins(inventory_dir=tmp_path, images=[registry["image"]], repin=True)
    assert not problems and got["images"][registry["image"]]["digest"] == registry["digest"]
    assert json.loads((tmp_path / "llmb.lock.json").read_text())["images"][registry["image"]] == registry["digest"]


def test_an_unknown_tag_is_refused(registry, tmp_path):
    ref = f"{registry['host']}/{registry['name']}:nope"
    _, problems = pins.resolve_pins(inventory_dir=tmp_path, images=[ref])
    assert problems and "HTTP 404" in problems[0].message


def test_no_registry_and_no_digest_is_refused_with_the_fix(tmp_path):
    ref = f"127.0.0.1:{free_port()}/llmb/tiny:v1"
    got, problems = pins.resolve_pins(inventory_dir=tmp_path, images=[ref], repin=False)
    assert got["images"] == {} and len(problems) == 1
    p = problems[0]
    assert p.message.startswith(f"image {ref} has no digest and the registry 127.0.0.1:")
    assert "unreachable" in p.message and "engine_image_pins" in p.fix and "imagetools inspect" in p.fix
    assert not (tmp_path / "llmb.lock.json").exists()


class _TokenRegistry(BaseHTTPRequestHandler):
    """Docker Hub's challenge protocol (stub): 401 + Bearer realm, a token service, then the digest."""

    digest = "sha256:" + "5e" * 32
    seen: list[tuple[str, str, str]] = []

    def log_message(self, *args):  # quiet
        pass

    def _base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def do_GET(self):
        if self.path.startswith("/token?"):
            self.seen.append(("token", self.path, self.headers.get("Authorization", "")))
            body = json.dumps({"token": "tok-123"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(404)
        self.end_headers()

    def do_HEAD(self):
        self.seen.append(("head", self.path, self.headers.get("Authorization", "")))
        if self.headers.get("Authorization") != "Bearer tok-123":
            self.send_response(401)
            self.send_header(
                "WWW-Authenticate",
                f'Bearer realm="{self._base()}/token",service="registry.test",'
                'scope="repository:library/tiny:pull"',
            )
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Docker-Content-Digest", self.digest)
        self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
        self.end_headers()


def test_the_bearer_challenge_is_answered(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ref = f"127.0.0.1:{server.server_address[1]}/library/tiny:v1"
        got, problems = pins.resolve_pins(
            inventory_dir=tmp_path,
            images=[ref],
            registry_auth=[{"registry": f"127.0.0.1:{server.server_address[1]}", "username": "u", "password": "pw-not-a-secret"}],
        )
    finally:
        server.shutdown()
        server.server_close()
    assert not problems and got["images"][ref]["digest"] == _TokenRegistry.digest
    kinds = [s[0] for s in _TokenRegistry.seen]
    assert kinds == ["head", "token", "head"]
    token_req = _TokenRegistry.seen[1]
    assert "service=registry.test" in token_req[1] and "scope=repository%3Alibrary%2Ftiny%3Apull" in token_req[1]
    assert token_req[2].startswith("Basic ")  # the credentials go to the token service only
    assert _TokenRegistry.seen[2][2] == "Bearer tok-123"
    assert "pw-not-a-secret" not in (tmp_path / "llmb.lock.json").read_text()
