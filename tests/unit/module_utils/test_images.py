"""llmbctl.images: references as docker reads them, pull references through mirrors, pull diagnostics."""

from __future__ import annotations

import pytest
from llmbctl import images

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "ref, registry, path, tag, repository, name",
    [
        ("vllm/vllm-openai:v0.19.1", "docker.io", "vllm/vllm-openai", "v0.19.1", "vllm/vllm-openai",
         "vllm/vllm-openai:v0.19.1"),
        ("ubuntu", "docker.io", "library/ubuntu", None, "ubuntu", "ubuntu:latest"),
        ("docker.io/library/ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", "ubuntu", "ubuntu:22.04"),
        ("quay.io/ascend/vllm-ascend:v0.20.2rc1-a3", "quay.io", "ascend/vllm-ascend", "v0.20.2rc1-a3",
         "quay.io/ascend/vllm-ascend", "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3"),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.1.0", "nvcr.io", "nvidia/tensorrt-llm/release", "1.1.0",
         "nvcr.io/nvidia/tensorrt-llm/release", "nvcr.io/nvidia/tensorrt-llm/release:1.1.0"),
        ("127.0.0.1:5000/llmb/tiny:v1", "127.0.0.1:5000", "llmb/tiny", "v1", "127.0.0.1:5000/llmb/tiny",
         "127.0.0.1:5000/llmb/tiny:v1"),
        ("localhost/x", "localhost", "x", None, "localhost/x", "localhost/x:latest"),
        (f"lmsysorg/sglang:v0.5.5@{D}", "docker.io", "lmsysorg/sglang", "v0.5.5", "lmsysorg/sglang",
         "lmsysorg/sglang:v0.5.5"),
    ],
)
def test_parse(ref, registry, path, tag, repository, name):
    r = images.parse(ref)
    assert (r.registry, r.path, r.tag, r.repository, r.name) == (registry, path, tag, repository, name)


@pytest.mark.parametrize("ref", ["", "a b", "Upper/case:v1", "x@sha256:123", "x:bad:tag:", "repo:-tag"])
def test_parse_rejects(ref):
    with pytest.raises(images.ImageError):
        images.parse(ref)


@pytest.mark.parametrize(
    "image, mirror, expected",
    [
        ("vllm/vllm-openai:v0.19.1", "", f"vllm/vllm-openai@{D}"),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.1.0", "", f"nvcr.io/nvidia/tensorrt-llm/release@{D}"),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.1.0", "mirror.local:5000",
         f"mirror.local:5000/nvidia/tensorrt-llm/release@{D}"),
        ("vllm/vllm-openai:v0.19.1", "harbor.site/dockerhub/", f"harbor.site/dockerhub/vllm/vllm-openai@{D}"),
        ("ubuntu:22.04", "mirror.local", f"mirror.local/library/ubuntu@{D}"),
        (f"quay.io/ascend/vllm-ascend:v1@{D}", "", f"quay.io/ascend/vllm-ascend@{D}"),
    ],
)
def test_pull_ref(image, mirror, expected):
    assert images.pull_ref(image, D, mirror) == expected


def test_pull_ref_refuses_bad_pins():
    with pytest.raises(images.ImageError, match="not sha256"):
        images.pull_ref("x:1", "sha256:abc")
    with pytest.raises(images.ImageError, match="names digest"):
        images.pull_ref(f"x:1@sha256:{'cd' * 32}", D)
    with pytest.raises(images.ImageError, match="without a scheme"):
        images.pull_ref("x:1", D, "https://mirror")


def test_registry_of_pull_ref():
    assert images.registry_of(f"127.0.0.1:1/llmb/tiny@{D}") == "127.0.0.1:1"
    assert images.registry_of(f"vllm/vllm-openai@{D}") == "docker.io"


# stderr of `docker pull` (docker 20.10) -> hint fragment
PULL_ERRORS = [
    ("Error response from daemon: manifest for 127.0.0.1:40123/llmb-eng5/tiny@sha256:0000 not found: "
     "manifest unknown: manifest unknown", "no image with this digest"),
    ('Error response from daemon: Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused',
     "cannot be reached"),
    ('Error response from daemon: Get "https://registry.upstream.invalid/v2/": dial tcp: lookup '
     "registry.upstream.invalid: no such host", "cannot be reached"),
    ("Error response from daemon: pull access denied for x, repository does not exist or may require "
     "'docker login': denied: requested access to the resource is denied", "credentials"),
    ("Error response from daemon: Head \"https://nvcr.io/v2/nvidia/x/manifests/sha256:1\": unauthorized: "
     "authentication required", "credentials"),
    ("write /var/lib/docker/tmp/x: no space left on device", "Docker data root is full"),
    ("something new", "by hand"),
]


@pytest.mark.parametrize("stderr, hint", PULL_ERRORS)
def test_diagnose_pull(stderr, hint):
    assert hint in images.diagnose_pull(stderr)


def test_last_line():
    assert images.last_line("a\n\n b \n") == "b"
    assert images.last_line("") == ""
