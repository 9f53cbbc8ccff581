"""Container image references for the engine stage: parse, pin by digest, pull through a mirror.

    ref = parse("nvcr.io/nvidia/tensorrt-llm/release:1.1.0")
    pull_ref(ref, "sha256:...", mirror="registry.local:5000/cache")   # what `docker pull` gets
    diagnose_pull(stderr)                                            # why a pull failed, what to do

Docker's rules: the first path component is a registry when it has a '.' or a ':' or is
'localhost'; otherwise the registry is Docker Hub and one-component names live under 'library/'.
No Ansible imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_PATH_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")


class ImageError(ValueError):
    """A reference or digest that cannot be used."""


@dataclass(frozen=True)
class ImageRef:
    registry: str  # "docker.io" when none was written
    path: str  # repository path inside the registry ("library/ubuntu" on Docker Hub)
    tag: str | None
    digest: str | None
    explicit_registry: bool

    @property
    def repository(self) -> str:
        """Repository as docker names it locally (no docker.io/ prefix, no library/ on Docker Hub)."""
        if not self.explicit_registry:
            return self.path[len("library/"):] if self.path.startswith("library/") else self.path
        return f"{self.registry}/{self.path}"

    @property
    def name(self) -> str:
        """repository:tag (the name the launch plan runs)."""
        return f"{self.repository}:{self.tag or 'latest'}"

    def to_dict(self) -> dict:
        return {"registry": self.registry, "path": self.path, "tag": self.tag, "digest": self.digest,
                "repository": self.repository, "name": self.name}


def is_digest(value: str) -> bool:
    return bool(DIGEST_RE.match(str(value or "")))


def parse(reference: str) -> ImageRef:
    ref = str(reference or "").strip()
    if not ref or any(c.isspace() for c in ref):
        raise ImageError(f"not an image reference: {reference!r}")
    digest = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
        if not is_digest(digest):
            raise ImageError(f"{reference}: digest {digest!r} is not sha256:<64 hex>")
    tag = None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref, tag = ref.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise ImageError(f"{reference}: bad tag {tag!r}")
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path, explicit = first, rest, True
    else:
        registry, path, explicit = DOCKER_HUB, ref, False
        if "/" not in path:
            path = f"library/{path}"
    if registry in ("index.docker.io", "registry-1.docker.io", DOCKER_HUB):
        registry, explicit = DOCKER_HUB, False
        if "/" not in path:
            path = f"library/{path}"
    if not _PATH_RE.match(path):
        raise ImageError(f"{reference}: bad repository path {path!r} (lowercase, digits, . _ - and /)")
    return ImageRef(registry, path, tag, digest, explicit)


def pull_ref(image: str | ImageRef, digest: str, mirror: str = "") -> str:
    """Reference `docker pull` gets: <registry or mirror>/<path>@<digest>.

    A mirror is `host[:port][/prefix]`; the image's path is kept under it (as registry mirrors and
    pull-through caches lay images out).
    """
    ref = image if isinstance(image, ImageRef) else parse(image)
    if not is_digest(digest):
        raise ImageError(f"{ref.name}: pinned digest {digest!r} is not sha256:<64 hex>")
    if ref.digest and ref.digest != digest:
        raise ImageError(f"{ref.name}: the reference names digest {ref.digest} but the pin is {digest}")
    if mirror:
        base = mirror.strip().rstrip("/")
        if "://" in base:
            raise ImageError(f"mirror {mirror!r}: write host[:port][/prefix], without a scheme")
        return f"{base}/{ref.path}@{digest}"
    return f"{ref.repository}@{digest}"


def registry_of(reference: str) -> str:
    """The registry host a pull reference talks to."""
    return parse(reference).registry


PULL_HINTS = (
    (("manifest unknown", "not found: manifest", "manifest for", "no such manifest"),
     "the registry has no image with this digest: the pin is wrong, or the image was not pushed to this "
     "registry/mirror; re-read the digest with `docker buildx imagetools inspect <image>` where the registry "
     "is reachable"),
    (("unauthorized", "authentication required", "denied", "no basic auth credentials"),
     "the registry refused the credentials: set engine_image_registry_auth (docker login) for it"),
    (("connection refused", "no such host", "i/o timeout", "network is unreachable", "no route to host",
      "dial tcp", "TLS handshake timeout", "server misbehaving", "Client.Timeout"),
     "the registry cannot be reached from this node: check engine_image_mirror, the proxy of the Docker "
     "daemon, and firewalls; air-gapped sites load a tarball (engine_image_tarball)"),
    (("http: server gave HTTP response to HTTPS client",),
     "the registry speaks plain HTTP: add it to the Docker daemon's insecure-registries or serve it with TLS"),
    (("no space left on device",), "the Docker data root is full: free space under /var/lib/docker"),
)


def diagnose_pull(stderr: str) -> str:
    text = stderr or ""
    low = text.lower()
    for needles, hint in PULL_HINTS:
        if any(n.lower() in low for n in needles):
            return hint
    return "run the same docker pull by hand on the node to see the daemon's error"


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""
