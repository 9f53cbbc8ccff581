"""One node's weights step: manifest, verify what is there, check space, fetch what is missing or
corrupt (from the hub or from a peer), verify it, write the record. Called by model_fetch.

    result = run(FetchParams(dest=..., repo_id=..., revision=..., source="hub", ...), check=False)

Raises FetchError with a message that names the host, the check, what was expected and found,
and what to do.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

from . import disk, hubclient, peer
from . import manifest as mf
from . import verify as vf
from .lock import DirLock, LockTimeout

HF_META_DIR = os.path.join(".cache", "huggingface", "download")
# another revision's files that the fetched one replaces wait here until it is verified (issue 27)
PREVIOUS_DIR = ".llmb-previous"


class FetchError(Exception):
    def __init__(self, message: str, check: str = "weights", **details):
        super().__init__(message)
        self.check = check
        self.details = details


@dataclass
class FetchParams:
    dest: str
    repo_id: str | None = None
    revision: str | None = None
    endpoint: str | None = None
    token_file: str | None = None
    allow_patterns: list[str] | None = None
    ignore_patterns: list[str] | None = None
    manifest: dict | None = None
    manifest_only: bool = False
    source: str = "hub"  # hub | peer | none
    peer_url: str | None = None
    wait_for: list[str] = field(default_factory=list)
    wait_timeout: float = 3600.0
    python: str = "/opt/llmb/tools/bin/python"
    hf_home: str | None = None
    max_workers: int = 8
    verify_workers: int | None = None
    lock_timeout: float = 600.0
    chunk_bytes: int | None = None
    hub_timeout: float = 86400.0
    mode: int = 0o755


def host() -> str:
    return socket.gethostname()


# ----------------------------------------------------------------------------- hub client


def hubclient_source() -> str:
    try:
        return inspect.getsource(hubclient)
    except (OSError, TypeError):
        with open(hubclient.__file__, encoding="utf-8") as fh:
            return fh.read()


def read_token(token_file: str | None) -> str | None:
    if not token_file:
        return None
    try:
        with open(token_file, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise FetchError(f"{host()}: hub token: cannot read the token file {token_file}: {exc.strerror}",
                         check="hub-token") from None
    return token or None


# getaddrinfo's answers that mean the name does not exist (not a passing fault: no retry helps)
_NO_SUCH_NAME = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, n)}


def check_resolves(endpoint: str | None) -> None:
    """Fail at once when the hub's host name does not resolve on this node (the hub client would
    retry it for half a minute as if it were a passing fault). A refused or reset connection, a
    timeout or a temporary DNS failure (EAI_AGAIN) are left to the client and its retries; so is a
    hub reached through a proxy (the proxy resolves the name)."""
    import urllib.parse
    import urllib.request

    where = endpoint or "https://huggingface.co"
    url = urllib.parse.urlsplit(where)
    name = url.hostname
    if not name:
        return
    # the proxies the hub client will see (call_hub passes this process's proxy variables on)
    proxied = bool(urllib.request.getproxies().get(url.scheme)) and not urllib.request.proxy_bypass(name)
    if proxied:
        return
    try:
        socket.getaddrinfo(name, url.port or (443 if url.scheme == "https" else 80), proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        if exc.errno not in _NO_SUCH_NAME:
            return  # EAI_AGAIN and the like may pass: the client's retries handle them
        raise FetchError(
            f"{host()}: hub-resolve: the hub's host name {name!r} ({where}) does not resolve on this node "
            f"({exc.strerror or exc}); expected a name the node's resolver knows. Set weights_hf_endpoint "
            "(or HF_ENDPOINT on the controller) to the hub or mirror this node reaches, or fix the node's DNS "
            "(/etc/resolv.conf, /etc/hosts).",
            check="hub-resolve", kind="dns",
        ) from None


def call_hub(p: FetchParams, request: dict, timeout: float) -> dict:
    token = read_token(p.token_file)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/root"),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    }
    for proxy in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        if proxy in os.environ:
            env[proxy] = os.environ[proxy]
    if p.hf_home:
        env["HF_HOME"] = p.hf_home
    if p.endpoint:
        env["HF_ENDPOINT"] = p.endpoint
    if token:
        env["HF_TOKEN"] = token
    if not os.access(p.python, os.X_OK):
        raise FetchError(
            f"{host()}: hub client: {p.python} does not exist; expected the tool venv with huggingface_hub "
            "(the weights role installs it: run it without --tags, or set weights_tools_dir)",
            check="hub-client",
        )
    check_resolves(p.endpoint)
    request = dict(request, endpoint=p.endpoint)
    try:
        proc = subprocess.run([p.python, "-c", hubclient_source()], input=json.dumps(request), capture_output=True,
                              text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FetchError(f"{host()}: hub {request['op']}: no answer within {timeout:.0f}s from {p.endpoint or 'the hub'}",
                         check="hub-" + request["op"]) from None
    stderr = proc.stderr.strip()
    if token:
        stderr = stderr.replace(token, "********")
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise FetchError(f"{host()}: hub client crashed (rc {proc.returncode}): {stderr[-1500:]}",
                         check="hub-client") from None
    if "error" in out:
        raise hub_error(p, request["op"], out["error"])
    return out


def hub_error(p: FetchParams, op: str, err: dict) -> FetchError:
    where = p.endpoint or "https://huggingface.co"
    what = f"{p.repo_id}@{p.revision or 'main'}"
    kind, msg, status = err.get("kind"), err.get("message", ""), err.get("status")
    check = "hub-" + op
    if kind == "auth":
        return FetchError(
            f"{host()}: {check}: {where} rejected the token for {what} (HTTP {status}: {msg}); expected a token "
            "with read access to the repository. Put a valid token in weights_hf_token (ansible-vault) or "
            "HF_TOKEN on the controller.", check=check, kind=kind, status=status)
    if kind == "auth_required":
        return FetchError(
            f"{host()}: {check}: {where} requires a token for {what} (HTTP {status}: {msg}) and none was given; "
            "set weights_hf_token (ansible-vault) or HF_TOKEN on the controller, or check the repo_id of the "
            "model profile.", check=check, kind=kind, status=status)
    if kind == "not_found":
        return FetchError(f"{host()}: {check}: repository {p.repo_id} not found at {where} ({msg}); check repo_id in "
                          "the model profile and weights_hf_endpoint.", check=check, kind=kind, status=status)
    if kind == "revision":
        return FetchError(f"{host()}: {check}: revision {p.revision} of {p.repo_id} not found at {where} ({msg}); "
                          "check the profile's revision (a 40-hex commit id).", check=check, kind=kind)
    if kind == "connect":
        return FetchError(f"{host()}: {check}: cannot reach {where} ({msg}); check weights_hf_endpoint, the node's "
                          "route and proxy to it.", check=check, kind=kind)
    if kind == "disk":
        return FetchError(f"{host()}: {check}: the disk filled up during the download ({msg}).", check="disk-space",
                          kind=kind)
    return FetchError(f"{host()}: {check}: {msg}", check=check, kind=kind, status=status)


def hub_manifest(p: FetchParams) -> dict:
    if not p.repo_id:
        raise FetchError(f"{host()}: manifest: no manifest given and no repo_id to ask the hub for one",
                         check="manifest")
    out = call_hub(p, {"op": "manifest", "repo_id": p.repo_id, "revision": p.revision}, timeout=600)
    try:
        return mf.build(p.repo_id, out["commit"], out["entries"], p.allow_patterns, p.ignore_patterns)
    except mf.ManifestError as exc:
        raise FetchError(f"{host()}: manifest: {exc}", check="manifest") from None


# ----------------------------------------------------------------------------- helpers


def _remove_bad(dest: str, bad: list[dict]) -> None:
    for b in bad:
        for name in (b["path"], b["path"] + vf.ORIG_SUFFIX):
            try:
                os.unlink(os.path.join(dest, name))
            except FileNotFoundError:
                pass
        # huggingface_hub skips a file whose local metadata names the same commit: drop it too
        try:
            os.unlink(os.path.join(dest, HF_META_DIR, b["path"] + ".metadata"))
        except FileNotFoundError:
            pass


def _set_aside(dest: str, bad: list[dict]) -> list[str]:
    """Files of the revision on disk that the new revision replaces: renamed under
    ``dest/.llmb-previous/`` (same filesystem, no copy), kept until the new files are verified; the
    names moved, for _put_back."""
    keep = os.path.join(dest, PREVIOUS_DIR)
    moved = []
    for b in bad:
        for name in (b["path"], b["path"] + vf.ORIG_SUFFIX):
            src = os.path.join(dest, name)
            if os.path.lexists(src):
                target = os.path.join(keep, name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(src, target)
                moved.append(name)
        try:
            os.unlink(os.path.join(dest, HF_META_DIR, b["path"] + ".metadata"))
        except FileNotFoundError:
            pass
    return moved


def _put_back(dest: str, moved: list[str]) -> None:
    """The new revision did not arrive verified: the previous revision's files back where they were."""
    keep = os.path.join(dest, PREVIOUS_DIR)
    for name in moved:
        os.replace(os.path.join(keep, name), os.path.join(dest, name))
    shutil.rmtree(keep, ignore_errors=True)


def _restore_patched(dest: str, ok: list[str], check: bool) -> list[str]:
    """A patched file whose pristine .orig is fine but which itself is gone: copy it back."""
    restored = []
    for rel in ok:
        path = os.path.join(dest, rel)
        if not os.path.exists(path) and os.path.isfile(path + vf.ORIG_SUFFIX):
            restored.append(rel)
            if not check:
                shutil.copy2(path + vf.ORIG_SUFFIX, path)
    return restored


def _index_check(dest: str, m: dict) -> None:
    if mf.INDEX_NAME not in mf.by_path(m):
        raise FetchError(
            f"{host()}: index: {mf.INDEX_NAME} is not among the files to fetch ({len(m['files'])} files); expected it "
            "in the repository and allow_patterns (model profile files.allow_patterns)", check="index")
    path, _ = vf.pristine(dest, mf.INDEX_NAME)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        missing = mf.missing_from_manifest(m, doc)
    except (OSError, ValueError, mf.ManifestError) as exc:
        raise FetchError(f"{host()}: index: cannot read {path}: {exc}", check="index") from None
    if missing:
        raise FetchError(
            f"{host()}: index: {mf.INDEX_NAME} names {len(missing)} shard(s) that the hub listing (after "
            f"allow_patterns/ignore_patterns) lacks: {', '.join(missing[:5])}; widen files.allow_patterns in the "
            "model profile", check="index", missing=missing)


def _failed_record(dest: str, m: dict, message: str) -> None:
    rec = vf.load_record(dest) or {"format": vf.RECORD_FORMAT, "files": {}}
    rec.update(repo_id=m["repo_id"], commit=m["commit"], manifest_digest=m["digest"], status="failed",
               error=message[:2000], failed_at=round(time.time(), 3))
    try:
        vf.save_record(dest, rec)
    except OSError:
        pass


# ----------------------------------------------------------------------------- main entry


def run(p: FetchParams, check: bool = False) -> dict:
    t0 = time.monotonic()
    if p.manifest:
        try:
            m = mf.validate(p.manifest)
        except mf.ManifestError as exc:
            raise FetchError(f"{host()}: manifest: {exc}", check="manifest") from None
    else:
        m = hub_manifest(p)
    result: dict = {"changed": False, "manifest": m, "commit": m["commit"], "digest": m["digest"],
                    "total_size": m["total_size"], "files": len(m["files"]), "dest": p.dest}
    if p.manifest_only:
        return result

    exists = os.path.isdir(p.dest)
    if not exists:
        if check:
            result.update(changed=True, would_fetch=[f["path"] for f in m["files"]],
                          disk=disk.check_space(m["total_size"], p.dest, what=f"{m['repo_id']} ({len(m['files'])} files)"))
            return result
        os.makedirs(p.dest, mode=p.mode, exist_ok=True)
        result["changed"] = True

    lock = DirLock(p.dest, timeout=p.lock_timeout)
    try:
        lock.__enter__()
    except LockTimeout as exc:
        raise FetchError(f"{host()}: lock: {exc}", check="lock") from None
    try:
        return _run_locked(p, m, result, check, t0)
    finally:
        lock.__exit__(None, None, None)


def _run_locked(p: FetchParams, m: dict, result: dict, check: bool, t0: float) -> dict:
    dest = p.dest
    old_record = vf.load_record(dest)
    v = vf.verify_dir(dest, m, old_record, workers=p.verify_workers)
    result["verify"] = {k: v[k] for k in ("hashed", "hashed_bytes", "missing", "bad", "seconds")}
    result["verify"]["trusted"] = len(v["trusted"])
    need = sorted(set(v["missing"]) | {b["path"] for b in v["bad"]})
    restored = _restore_patched(dest, v["ok"], check)
    entries = mf.by_path(m)
    needed = sum(entries[n]["size"] for n in need)
    reclaim = 0
    for b in v["bad"]:
        try:
            reclaim += os.path.getsize(os.path.join(dest, b["file"]))
        except OSError:
            pass
    result.update(fetched=[], fetched_bytes=0, refetched=[b["path"] for b in v["bad"]], restored=restored)
    if restored:
        result["changed"] = True
    if need:
        if p.source == "none":
            raise FetchError(
                f"{host()}: verify: {len(need)} file(s) of {m['repo_id']} missing or corrupt under {dest} "
                f"({', '.join(need[:5])}) and this node is not to fetch them (strategy)",
                check="verify", missing=v["missing"], bad=v["bad"])
        try:
            result["disk"] = disk.check_space(needed, dest, reclaim=reclaim,
                                              what=f"{len(need)} file(s) of {m['repo_id']}")
        except disk.DiskSpaceError as exc:
            raise FetchError(f"{host()}: disk-space: {exc}", check="disk-space", needed=exc.needed, free=exc.free,
                             mount=exc.mount) from None
        if check:
            result.update(changed=True, would_fetch=need)
            return result
        # peers waiting on this node must not read a previous run's "failed" while this one works
        vf.save_record(dest, dict(v["record"], status="fetching"))
        # a new revision over a complete earlier one: its files are set aside, not deleted, until the new
        # ones are verified (an engine restarted meanwhile, or a failed fetch, still finds a whole model)
        upgrade = bool(old_record) and old_record.get("status") == "complete" and old_record.get("commit") not in (
            None, m["commit"])
        moved = _set_aside(dest, v["bad"]) if upgrade else []
        if not upgrade:
            _remove_bad(dest, v["bad"])
        try:
            if p.source == "hub":
                out = call_hub(p, {"op": "download", "repo_id": m["repo_id"], "commit": m["commit"], "dest": dest,
                                   "files": need, "max_workers": p.max_workers, "chunk_bytes": p.chunk_bytes},
                               timeout=p.hub_timeout)
                result["source"] = "hub"
                result["fetch_seconds"] = out.get("seconds")
            elif p.source == "peer":
                if not p.peer_url:
                    raise FetchError(f"{host()}: relay: source is peer but no peer_url", check="relay")
                try:
                    result["waited_seconds"] = peer.wait_ready(p.wait_for or [p.peer_url], m["digest"], p.wait_timeout)
                    out = peer.fetch(p.peer_url, [entries[n] for n in need], dest, workers=p.max_workers)
                except peer.PeerError as exc:
                    raise FetchError(f"{host()}: relay: {exc}", check="relay") from None
                result["source"] = p.peer_url
                result["fetch_seconds"] = out.get("seconds")
            else:
                raise FetchError(f"{host()}: source {p.source!r} is not hub, peer or none", check="params")
        except FetchError as exc:
            if moved:
                _put_back(dest, moved)
                vf.save_record(dest, old_record)
            else:
                _failed_record(dest, m, str(exc))
            raise
        result["changed"] = True
        result["fetched"] = need
        result["fetched_bytes"] = needed
        if p.source == "peer":
            # hashed on arrival against the manifest: record those digests, no second read
            new_record = vf.record_add(v["record"], m, dest, out["digests"])
        else:
            after = vf.verify_dir(dest, m, v["record"], workers=p.verify_workers, only=need)
            if after["bad"] or after["missing"]:
                msg = (f"{host()}: verify: after fetching from {result['source']}, "
                       f"{len(after['bad'])} file(s) corrupt and {len(after['missing'])} missing under {dest}: "
                       + "; ".join(f"{b['path']} expected {b['expected']}, found {b['found']}" for b in after["bad"][:3])
                       + (f" missing {', '.join(after['missing'][:5])}" if after["missing"] else "")
                       + "; run again (only these files are fetched again)")
                if moved:
                    _put_back(dest, moved)
                    vf.save_record(dest, old_record)
                else:
                    _failed_record(dest, m, msg)
                raise FetchError(msg, check="verify", bad=after["bad"], missing=after["missing"])
            new_record = after["record"]
        if moved:
            result["previous_removed"] = len(moved)
            shutil.rmtree(os.path.join(dest, PREVIOUS_DIR), ignore_errors=True)
    else:
        new_record = v["record"]
    _index_check(dest, m)
    if not check and vf.record_differs(old_record, new_record):
        vf.save_record(dest, new_record)
        result["record_written"] = True
        result["changed"] = True
    result["record"] = vf.record_path(dest)
    result["complete"] = True
    result["seconds"] = round(time.monotonic() - t0, 3)
    return result
