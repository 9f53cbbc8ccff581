"""Pins resolved or refused in stage 0, on the controller, before any host is contacted.

A model revision that is a branch (``main``) is resolved to its commit at the hub; an image tag
to its manifest digest at its registry. Both are recorded in a lock file next to the inventory,
``<inventory_dir>/llmb.lock.json``::

    {"engine": {"name": "vllm", "version": "0.33.0", "resolved_at": ...},
     "model": {"repo_id": ..., "revision": "main", "commit": "<40 hex>", "resolved_at": ...,
               "endpoint": "https://huggingface.co"},
     "images": {"vllm/vllm-openai:v0.19.1": "sha256:..."}}

so that every node gets the same engine release, commit and digest, and the next run (or a DR run
from the same inventory) uses the recorded ones without asking the hub or the registry, until asked
to move (``LLMB_REPIN=1`` or ``-e llmb_repin=true``). A lock entry whose repo_id / revision (engine
name) no longer matches the inventory is resolved again.

The engine release: an inventory that sets ``llmb_engine_version`` decides it; one that leaves it
unset gets the locked release (:func:`resolve_engine`), else the newest shipped one, which the first
bring-up records. Shipping a newer release in this repository therefore changes nothing for an
inventory that has a lock; the image of a container install follows the release, its digest is
locked per reference. A 40-hex revision, an ``image@sha256:`` reference or an
``engine_image_pins`` digest is a pin already: no network is used for it.

Entry point for the stages: :func:`resolve_pins`. Controller side only (huggingface_hub is
imported when a branch has to be resolved); the registry client is urllib.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmb.fsutil import write_text_if_changed

from .planner.model import Problem

LOCK_NAME = "llmb.lock.json"
DEFAULT_HUB = "https://huggingface.co"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# the manifest types a tag may point to; the digest of the one the registry returns is pinned
MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
DOCKER_HUB = "registry-1.docker.io"
TRUE_WORDS = ("1", "true", "yes", "on")


class PinError(Exception):
    """A pin that could not be resolved; carries the Problem to report."""

    def __init__(self, problem: Problem):
        super().__init__(problem.message)
        self.problem = problem


# ----------------------------------------------------------------------------- lock file


def lock_path(inventory_dir: str | os.PathLike[str]) -> Path:
    return Path(inventory_dir) / LOCK_NAME


def read_lock(path: Path) -> dict[str, Any]:
    """The lock file's content ({} when absent); PinError when it is not a lock file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise PinError(
            Problem("pins", f"cannot read the lock file {path}: {exc.strerror}", fix=f"make {path} readable")
        ) from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        doc = exc
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("images", {}), dict)
        or not isinstance(doc.get("model", {}), dict)
        or not isinstance(doc.get("engine", {}), dict)
    ):
        raise PinError(
            Problem(
                "pins",
                f"the lock file {path} is not a JSON object with 'model' and 'images'",
                found=str(doc)[:120] if isinstance(doc, Exception) else type(doc).__name__,
                expected='{"model": {...}, "images": {...}}',
                fix=f"restore {path} from version control, or delete it to resolve the pins again",
            )
        )
    return doc


def write_lock(path: Path, doc: dict[str, Any]) -> bool:
    """Write the lock atomically (llmb.fsutil); False when the content is already there."""
    return write_text_if_changed(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def repin_requested(value: Any = None, env: dict[str, str] | None = None) -> bool:
    """-e llmb_repin=true (value) or LLMB_REPIN=1 in the controller's environment."""
    if value is not None and str(value).strip().lower() in TRUE_WORDS:
        return True
    env = os.environ if env is None else env
    return str(env.get("LLMB_REPIN", "")).strip().lower() in TRUE_WORDS


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ----------------------------------------------------------------------------- engine release


def resolve_engine(
    engine: str | None,
    inventory_version: Any,
    shipped: list[str],
    lock: dict[str, Any],
    *,
    repin: bool = False,
) -> tuple[str | None, str]:
    """(version, source) of the engine release; source is "inventory", "lock" or "default".

    ``inventory_version``: llmb_engine_version (None when unset); ``shipped``: the releases this
    repository ships, oldest first. The inventory's value wins; else the lock's entry for the same
    engine unless ``repin``; else the newest shipped (None when there is none: the planner reports
    it). A locked release this repository no longer ships is a PinError naming both ways out.
    """
    if inventory_version not in (None, ""):
        return str(inventory_version), "inventory"
    entry = lock.get("engine") or {}
    locked = entry.get("version")
    if not repin and engine and entry.get("name") == engine and isinstance(locked, str) and locked:
        if locked not in shipped:
            raise PinError(
                Problem(
                    "pins",
                    f"the lock pins {engine} {locked}, a release this repository no longer ships",
                    found=f"engine: {engine} {locked} in {LOCK_NAME}",
                    expected=", ".join(shipped) or "a shipped release",
                    fix="set llmb_engine_version to a shipped release, or run with LLMB_REPIN=1 to move to "
                    f"the newest shipped ({shipped[-1] if shipped else 'none'})",
                )
            )
        return locked, "lock"
    return (shipped[-1] if shipped else None), "default"


def locked_engine(engine: str | None, lock: dict[str, Any]) -> str | None:
    """The release the lock records for ``engine`` (None when none)."""
    entry = lock.get("engine") or {}
    version = entry.get("version")
    return str(version) if engine and entry.get("name") == engine and version else None


# ----------------------------------------------------------------------------- model


def resolve_model(
    repo_id: str,
    revision: str | None,
    endpoint: str | None,
    token: str | None,
    lock: dict[str, Any],
    *,
    repin: bool = False,
    model_name: str | None = None,
    timeout: float = 10.0,
) -> tuple[str, str]:
    """(commit, source) of a model revision; source is "commit", "lock" or "hub".

    A 40-hex revision is the commit (no network). Otherwise the lock's entry for the same
    repo_id and revision is used unless ``repin``; else the hub answers model_info(...).sha.
    Raises PinError with the fix when none of these gives a commit.
    """
    name = model_name or repo_id
    rev = (revision or "main").strip()
    if COMMIT_RE.match(rev):
        return rev, "commit"
    entry = lock.get("model") or {}
    if (
        not repin
        and entry.get("repo_id") == repo_id
        and entry.get("revision") == rev
        and COMMIT_RE.match(str(entry.get("commit", "")))
    ):
        return str(entry["commit"]), "lock"
    hub = (endpoint or "").rstrip("/") or DEFAULT_HUB
    fix = (
        f"set revision to a 40-hex commit in data/models/{name}.yml (or llmb_model_revision in the inventory), or make the "
        "hub reachable from the controller (HF_ENDPOINT / weights_hf_endpoint)"
    )
    try:
        from huggingface_hub import HfApi  # controller side only
    except ImportError as exc:
        raise PinError(
            Problem(
                "pins",
                f"{name}: revision {rev!r} is a branch and huggingface_hub is not installed on the "
                "controller to resolve it",
                found=f"revision: {rev}",
                expected="a 40-hex commit",
                fix=fix + "; or install the controller requirements",
            )
        ) from exc
    try:
        info = HfApi(endpoint=hub, token=token or None).model_info(repo_id, revision=rev, timeout=timeout)
    except Exception as exc:  # the hub client raises httpx, OSError and HfHubHTTPError types
        kind = type(exc).__name__
        if kind == "RevisionNotFoundError":
            what = f"the hub at {hub} has no revision {rev!r} of {repo_id}"
            fix_text = f"set revision in data/models/{name}.yml (or llmb_model_revision in the inventory) to a branch or commit of it"
        elif kind in ("RepositoryNotFoundError", "GatedRepoError"):
            what = f"the hub at {hub} does not show {repo_id} (missing, gated, or the token lacks access)"
            fix_text = "check repo_id, and put a token with read access in weights_hf_token or HF_TOKEN"
        else:
            what = f"the hub at {hub} could not be reached ({kind}: {_short(exc)})"
            fix_text = fix
        raise PinError(
            Problem(
                "pins",
                f"{name}: revision {rev!r} is a branch and {what}",
                found=f"{repo_id} revision {rev}",
                expected="a 40-hex commit, a lock entry, or a hub that resolves the branch",
                fix=fix_text,
            )
        ) from exc
    sha = str(getattr(info, "sha", "") or "")
    if not COMMIT_RE.match(sha):
        raise PinError(
            Problem(
                "pins",
                f"{name}: the hub at {hub} answered for {repo_id}@{rev} without a commit id",
                found=sha or None,
                expected="a 40-hex commit",
                fix=fix,
            )
        )
    return sha, "hub"


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


# ----------------------------------------------------------------------------- images


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port] as written (docker.io for Docker Hub)
    repository: str  # path in the registry (library/ added for Docker Hub)
    tag: str | None
    digest: str | None

    @property
    def api_host(self) -> str:
        return DOCKER_HUB if self.registry in ("docker.io", "index.docker.io") else self.registry


def parse_image(ref: str) -> ImageRef:
    """Split ``[registry/]path[:tag][@sha256:...]`` the way the Docker CLI does; ValueError if bad."""
    if not isinstance(ref, str) or not ref or any(c.isspace() for c in ref) or ref != ref.strip():
        raise ValueError(f"not an image reference: {ref!r}")
    name, _, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", name
    if not re.fullmatch(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?", registry):
        raise ValueError(f"bad registry host {registry!r} in {ref!r}")
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    if not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+|__[a-z0-9]+)*", path or ""):
        raise ValueError(f"bad repository name {path!r} in {ref!r}")
    if tag is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag):
        raise ValueError(f"bad tag {tag!r} in {ref!r}")
    if digest and not DIGEST_RE.match(digest):
        raise ValueError(f"bad digest {digest!r} in {ref!r}")
    return ImageRef(registry, path, tag if tag is not None else (None if digest else "latest"), digest or None)


def _insecure(host: str, insecure: list[str]) -> bool:
    bare = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    return bare in ("localhost", "[::1]") or bare.startswith("127.") or host in insecure or bare in insecure


def _registry_key(name: str) -> str:
    name = name.removeprefix("https://").removeprefix("http://").rstrip("/")
    return DOCKER_HUB if name in ("docker.io", "index.docker.io", DOCKER_HUB) else name


def _credentials(host: str, auth: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(username, password) of engine_image_registry_auth for this registry host, if any."""
    for item in auth or []:
        if isinstance(item, dict) and _registry_key(str(item.get("registry", ""))) == _registry_key(host):
            user, password = item.get("username"), item.get("password")
            if user is not None and password is not None:
                return str(user), str(password)
    return None


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


class _NoRedirectAuth(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry the Authorization header to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 - urllib API
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_NoRedirectAuth)


def _request(url: str, method: str, headers: dict[str, str], timeout: float):
    req = urllib.request.Request(url, method=method, headers=headers)
    return _OPENER.open(req, timeout=timeout)


def registry_digest(
    ref: ImageRef, auth: list[dict[str, Any]] | None = None, insecure: list[str] | None = None, timeout: float = 10.0
) -> str:
    """The manifest digest the registry gives for ``ref``'s tag (HEAD, then GET if it omits it).

    Handles the Bearer token challenge of public registries (Docker Hub, nvcr.io, quay.io) and
    Basic auth; plain HTTP for localhost and the registries listed in ``insecure``.
    Raises OSError (urllib.error.URLError / HTTPError) or ValueError.
    """
    host = ref.api_host
    scheme = "http" if _insecure(host, insecure or []) else "https"
    url = f"{scheme}://{host}/v2/{ref.repository}/manifests/{ref.tag}"
    headers = {"Accept": MANIFEST_ACCEPT, "User-Agent": "llm-bringup-pins"}
    creds = _credentials(host, auth or [])
    for method in ("HEAD", "GET"):
        for _attempt in range(2):
            try:
                with _request(url, method, headers, timeout) as resp:
                    digest = resp.headers.get("Docker-Content-Digest", "")
                    if method == "GET" and not digest:
                        digest = "sha256:" + hashlib.sha256(resp.read()).hexdigest()
                if DIGEST_RE.match(digest):
                    return digest
                break  # no digest header on HEAD: ask with GET
            except urllib.error.HTTPError as exc:
                if exc.code != 401 or "Authorization" in headers:
                    raise
                scheme_name, params = _challenge(exc.headers.get("WWW-Authenticate", ""))
                if scheme_name == "bearer" and params.get("realm"):
                    headers["Authorization"] = "Bearer " + _bearer_token(params, ref, creds, timeout)
                elif scheme_name == "basic" and creds:
                    raw = f"{creds[0]}:{creds[1]}".encode()
                    headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
                else:
                    raise
    raise ValueError(f"the registry {host} gave no Docker-Content-Digest for {ref.repository}:{ref.tag}")


def _bearer_token(params: dict[str, str], ref: ImageRef, creds: tuple[str, str] | None, timeout: float) -> str:
    query = {"service": params.get("service", "")}
    query["scope"] = params.get("scope") or f"repository:{ref.repository}:pull"
    url = params["realm"] + "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v})
    headers = {"User-Agent": "llm-bringup-pins"}
    if creds:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
    with _request(url, "GET", headers, timeout) as resp:
        doc = json.loads(resp.read().decode("utf-8"))
    token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
    if not token:
        raise ValueError(f"the token service {params['realm']} returned no token")
    return str(token)


def resolve_image(
    ref: str,
    lock: dict[str, Any],
    *,
    pins: dict[str, Any] | None = None,
    auth: list[dict[str, Any]] | None = None,
    insecure: list[str] | None = None,
    repin: bool = False,
    timeout: float = 10.0,
) -> tuple[str, str]:
    """(digest, source) of an image reference; source is "ref", "inventory", "lock" or "registry".

    ``ref@sha256:...`` and an ``engine_image_pins`` entry ({ref: {digest: ...}}) need no network;
    the lock's digest is used unless ``repin``; else the registry's digest of the tag.
    Raises PinError with the fix.
    """
    try:
        parsed = parse_image(ref)
    except ValueError as exc:
        raise PinError(
            Problem(
                "pins",
                f"image {ref!r} is not an image reference: {exc}",
                found=ref,
                expected="[registry/]repository[:tag][@sha256:<64 hex>]",
                fix="correct llmb_container_image (or engine_image_image)",
            )
        ) from exc
    if parsed.digest:
        return parsed.digest, "ref"
    pin = (pins or {}).get(ref)
    pinned = pin.get("digest") if isinstance(pin, dict) else pin
    if pinned:
        if not DIGEST_RE.match(str(pinned)):
            raise PinError(
                Problem(
                    "pins",
                    f"engine_image_pins of {ref} has a digest that is not sha256:<64 hex>",
                    found=pinned,
                    expected="sha256:<64 hex>",
                    fix=f"copy the digest from `docker buildx imagetools inspect {ref}` into engine_image_pins",
                )
            )
        return str(pinned), "inventory"
    locked = (lock.get("images") or {}).get(ref)
    if not repin and isinstance(locked, str) and DIGEST_RE.match(locked):
        return locked, "lock"
    host = parsed.api_host
    try:
        return registry_digest(parsed, auth, insecure, timeout), "registry"
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            why = f"HTTP {exc.code} {exc.reason}"
        elif isinstance(exc, urllib.error.URLError):
            why = f"unreachable: {exc.reason}"
        else:
            why = _short(exc)
        raise PinError(
            Problem(
                "pins",
                f"image {ref} has no digest and the registry {host} did not give one ({why})",
                found=ref,
                expected=f"{ref.split('@')[0]}@sha256:<64 hex>, an engine_image_pins entry, or a reachable registry",
                fix=(
                    f"pin it: engine_image_pins: {{{ref!r}: {{digest: sha256:...}}}} from "
                    f"`docker buildx imagetools inspect {ref}` on a machine that reaches {host}, or make "
                    f"{host} reachable from the controller (engine_image_registry_auth for credentials)"
                ),
            )
        ) from exc


# ----------------------------------------------------------------------------- entry point


def resolve_pins(
    *,
    inventory_dir: str | os.PathLike[str],
    model_name: str | None = None,
    repo_id: str | None = None,
    revision: str | None = None,
    hf_endpoint: str | None = None,
    hf_token: str | None = None,
    images: list[str] | tuple[str, ...] = (),
    image_pins: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    registry_auth: list[dict[str, Any]] | None = None,
    insecure_registries: list[str] | None = None,
    repin: bool | None = None,
    write: bool = True,
    timeout: float = 10.0,
) -> tuple[dict[str, Any], list[Problem]]:
    """Resolve the model commit and image digests of a deployment; (pins, problems).

    Inputs are plain values, as the roles have them today:

    - ``model_name``: data/models/<name>.yml (for the messages); ``repo_id``: the profile's repo_id;
      ``revision``: llmb_model_revision or the profile's revision (None = "main");
      ``hf_endpoint``: weights_hf_endpoint / HF_ENDPOINT ("" = huggingface.co);
      ``hf_token``: weights_hf_token / HF_TOKEN (never written anywhere).
    - ``images``: image references the nodes run (engine_image_image / the launch plan's images);
      ``image_pins``: engine_image_pins ({ref: {digest, id}}); ``registry_auth``:
      engine_image_registry_auth ([{registry, username, password}]); ``insecure_registries``:
      host[:port] spoken to over plain HTTP (localhost and 127.0.0.0/8 always are).
    - ``engine``: {name, version} of the release the deployment runs (resolve_engine chose it);
      recorded in the lock when it is not what the lock holds.
    - ``repin``: move the locked pins (None: LLMB_REPIN from the environment); ``write``: update
      ``<inventory_dir>/llmb.lock.json`` (False in check mode).

    Returns ``pins`` = {"model": {repo_id, revision, commit, source, endpoint} or None,
    "images": {ref: {digest, source}}, "lock": path, "lock_written": bool} and the problems
    (each a refusal with its fix; nothing is written when there is one).
    """
    if repin is None:
        repin = repin_requested()
    path = lock_path(inventory_dir)
    problems: list[Problem] = []
    pins: dict[str, Any] = {"model": None, "images": {}, "lock": str(path), "lock_written": False}
    try:
        lock = read_lock(path)
    except PinError as err:
        return pins, [err.problem]
    new_lock: dict[str, Any] = {"model": dict(lock.get("model") or {}), "images": dict(lock.get("images") or {})}
    if lock.get("engine"):
        new_lock["engine"] = dict(lock["engine"])
    if engine and engine.get("name") and engine.get("version"):
        entry = {"name": str(engine["name"]), "version": str(engine["version"])}
        if {k: (lock.get("engine") or {}).get(k) for k in entry} != entry:
            new_lock["engine"] = dict(entry, resolved_at=_now())
    hub = (hf_endpoint or "").rstrip("/") or DEFAULT_HUB
    if repo_id:
        try:
            commit, source = resolve_model(
                repo_id, revision, hf_endpoint, hf_token, lock, repin=repin, model_name=model_name, timeout=timeout
            )
        except PinError as err:
            problems.append(err.problem)
        else:
            rev = (revision or "main").strip()
            pins["model"] = {"repo_id": repo_id, "revision": rev, "commit": commit, "source": source, "endpoint": hub}
            if source == "hub":
                new_lock["model"] = {
                    "repo_id": repo_id,
                    "revision": rev,
                    "commit": commit,
                    "resolved_at": _now(),
                    "endpoint": hub,
                }
    for ref in dict.fromkeys(images or ()):
        try:
            digest, source = resolve_image(
                ref, lock, pins=image_pins, auth=registry_auth, insecure=insecure_registries, repin=repin,
                timeout=timeout,
            )
        except PinError as err:
            problems.append(err.problem)
            continue
        pins["images"][ref] = {"digest": digest, "source": source}
        if source == "registry":
            new_lock["images"][ref] = digest
    if problems or not write:
        return pins, problems
    if not new_lock["model"]:
        new_lock.pop("model")
    if new_lock != lock and (new_lock.get("model") or new_lock["images"] or new_lock.get("engine")):
        try:
            pins["lock_written"] = write_lock(path, new_lock)
        except OSError as exc:
            problems.append(
                Problem(
                    "pins",
                    f"cannot write the lock file {path}: {exc.strerror or exc}",
                    fix=f"make {path.parent} writable by the controller user",
                )
            )
    return pins, problems
