"""Talks to the hub with the real huggingface_hub client; runs in the tool venv on a node.

The model_fetch module (system python3, standard library only) runs this file's source with the
tool venv's interpreter, a JSON request on stdin and one JSON answer on stdout:

    {"op": "manifest", "repo_id", "revision", "endpoint"}
        -> {"commit", "entries": [tree entries]}
    {"op": "download", "repo_id", "commit", "endpoint", "dest", "files": [...], "max_workers",
     "chunk_bytes"} -> {"downloaded": [...], "seconds"}
    any error -> {"error": {"kind": auth|auth_required|not_found|revision|connect|disk|other,
                            "message", "status"}} and exit status 2

The token comes from the HF_TOKEN environment variable of this process only (the module reads it
from a 0600 file); it is never printed. Self-contained on purpose: no imports from llmb.
"""

import json
import os
import sys
import time


def _api(req):
    from huggingface_hub import HfApi

    return HfApi(endpoint=req.get("endpoint") or None, token=os.environ.get("HF_TOKEN") or False)


def op_manifest(req):
    import re

    api = _api(req)
    revision = req.get("revision") or "main"
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        commit = revision
    else:
        commit = api.model_info(req["repo_id"], revision=revision).sha
    entries = []
    for f in api.list_repo_tree(req["repo_id"], revision=commit, recursive=True):
        if not hasattr(f, "blob_id"):
            continue  # a folder
        e = {"type": "file", "path": f.path, "size": f.size, "oid": f.blob_id}
        if f.lfs is not None:
            e["lfs"] = {"oid": f.lfs.sha256, "size": f.lfs.size}
        entries.append(e)
    return {"commit": commit, "entries": entries}


def op_download(req):
    from concurrent.futures import ThreadPoolExecutor

    import huggingface_hub
    from huggingface_hub import hf_hub_download

    if req.get("chunk_bytes"):
        # how much a dropped connection can lose: the client resumes from its last whole chunk
        huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE = int(req["chunk_bytes"])
    token = os.environ.get("HF_TOKEN") or False
    t0 = time.monotonic()

    def one(name):
        hf_hub_download(
            req["repo_id"], name, revision=req["commit"], local_dir=req["dest"],
            endpoint=req.get("endpoint") or None, token=token,
        )
        return name

    files = list(req["files"])
    workers = max(1, min(int(req.get("max_workers") or 8), len(files) or 1))
    with ThreadPoolExecutor(max_workers=workers) as ex:
        done = list(ex.map(one, files))
    return {"downloaded": done, "seconds": round(time.monotonic() - t0, 3)}


def classify(exc):
    """(kind, status, message) for an exception of the hub client, without any secret in it."""
    import errno

    status = None
    response = getattr(exc, "response", None)
    if response is not None:
        status = getattr(response, "status_code", None)
    name = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = text[0] if text else name
    server_msg = ""
    if response is not None:
        try:
            server_msg = response.headers.get("X-Error-Message") or ""
        except Exception:  # noqa: BLE001 - best effort detail
            server_msg = ""
    detail = f"{first}" + (f" ({server_msg})" if server_msg and server_msg not in first else "")
    if name == "RevisionNotFoundError":
        return "revision", status, detail
    if status == 401 and os.environ.get("HF_TOKEN"):
        return "auth", status, detail
    if status in (401, 403) or name in ("GatedRepoError",):
        return "auth_required", status, detail
    if name == "RepositoryNotFoundError" or status == 404:
        return "not_found", status, detail
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == errno.ENOSPC:
        return "disk", status, detail
    mod = type(exc).__module__ or ""
    if mod.startswith("httpx") and ("Connect" in name or "Timeout" in name):
        return "connect", status, detail
    if name == "LocalEntryNotFoundError":
        return "connect", status, detail
    return "other", status, f"{name}: {detail}"


def main():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    req = json.loads(sys.stdin.read() or "{}")
    if req.get("endpoint"):
        os.environ["HF_ENDPOINT"] = req["endpoint"]
    ops = {"manifest": op_manifest, "download": op_download}
    try:
        out = ops[req.get("op")](req)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one JSON answer
        kind, status, message = classify(exc)
        token = os.environ.get("HF_TOKEN")
        if token:
            message = message.replace(token, "********")
        sys.stdout.write(json.dumps({"error": {"kind": kind, "status": status, "message": message}}))
        sys.stdout.flush()
        return 2
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
