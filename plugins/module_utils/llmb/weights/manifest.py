"""The manifest: which files a model directory must hold, with the hub's sizes and hashes.

    m = build(repo_id, commit, tree_entries, allow_patterns, ignore_patterns)
    {"format": 1, "repo_id": ..., "commit": <40 hex>, "files": [{"path", "size", "sha256"|None,
     "git_oid"}], "total_size": N, "digest": <sha256 of the above>}

``tree_entries`` are the hub's tree listing entries (``/api/models/{repo}/tree/{rev}``): large
files stored in LFS carry ``lfs.oid``, their SHA-256; other files only their git blob id (sha1 of
``blob <size>\\0<content>``), which verification then computes instead.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re

FORMAT = 1
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
INDEX_NAME = "model.safetensors.index.json"


class ManifestError(Exception):
    pass


def _normalize_patterns(patterns) -> list[str] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        patterns = [patterns]
    # like huggingface_hub.utils.filter_repo_objects: "dir/" means everything below dir
    return [p + "*" if p.endswith("/") else p for p in patterns]


def selected(path: str, allow_patterns=None, ignore_patterns=None) -> bool:
    """Whether ``path`` passes the filters, with huggingface_hub's fnmatch semantics."""
    allow = _normalize_patterns(allow_patterns)
    ignore = _normalize_patterns(ignore_patterns)
    if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
        return False
    if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
        return False
    return True


def digest(repo_id: str, commit: str, files: list[dict]) -> str:
    canon = json.dumps({"repo_id": repo_id, "commit": commit, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def build(repo_id: str, commit: str, entries: list[dict], allow_patterns=None, ignore_patterns=None) -> dict:
    if not COMMIT_RE.match(commit or ""):
        raise ManifestError(f"the hub answered commit {commit!r} for {repo_id}: not a 40-hex commit id")
    files = []
    for e in entries:
        if e.get("type", "file") != "file":
            continue
        path = e["path"]
        if not selected(path, allow_patterns, ignore_patterns):
            continue
        lfs = e.get("lfs") or None
        sha = (lfs.get("oid") or lfs.get("sha256")) if lfs else None
        size = int(lfs.get("size", e["size"])) if lfs else int(e["size"])
        files.append({"path": path, "size": size, "sha256": sha, "git_oid": e.get("oid") or e.get("blob_id")})
    files.sort(key=lambda f: f["path"])
    if not files:
        raise ManifestError(
            f"no file of {repo_id}@{commit[:12]} matches allow_patterns {allow_patterns} "
            f"(ignore_patterns {ignore_patterns}); the hub lists {len(entries)} entries"
        )
    m = {"format": FORMAT, "repo_id": repo_id, "commit": commit, "files": files,
         "total_size": sum(f["size"] for f in files)}
    m["digest"] = digest(repo_id, commit, files)
    return m


def validate(m) -> dict:
    """Structural check of a manifest handed to a module; returns it or raises ManifestError."""
    if not isinstance(m, dict):
        raise ManifestError(f"manifest must be a mapping, got {type(m).__name__}")
    for key in ("repo_id", "commit", "files", "digest"):
        if key not in m:
            raise ManifestError(f"manifest lacks {key!r}")
    if not isinstance(m["files"], list) or not m["files"]:
        raise ManifestError("manifest has no files")
    seen = set()
    for f in m["files"]:
        path = f.get("path")
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise ManifestError(f"manifest file path {path!r} is not a relative path inside the model directory")
        if path in seen:
            raise ManifestError(f"manifest lists {path} twice")
        seen.add(path)
        if not isinstance(f.get("size"), int) or f["size"] < 0:
            raise ManifestError(f"manifest file {path}: size {f.get('size')!r} is not a byte count")
        if f.get("sha256") is None and not f.get("git_oid"):
            raise ManifestError(f"manifest file {path}: neither sha256 nor git_oid to verify against")
        if f.get("sha256") is not None and not HEX64.match(f["sha256"]):
            raise ManifestError(f"manifest file {path}: sha256 {f['sha256']!r} is not 64 hex digits")
    if digest(m["repo_id"], m["commit"], m["files"]) != m["digest"]:
        raise ManifestError("manifest digest does not match its files (edited or truncated in transit)")
    return m


def index_shards(index_doc: dict) -> set[str]:
    """Shard file names that model.safetensors.index.json's weight_map names."""
    wm = index_doc.get("weight_map") if isinstance(index_doc, dict) else None
    if not isinstance(wm, dict) or not wm:
        raise ManifestError(f"{INDEX_NAME} has no weight_map")
    return set(wm.values())


def missing_from_manifest(m: dict, index_doc: dict) -> list[str]:
    """Shards the index names that the manifest lacks (filtered out, or absent at the hub)."""
    have = {f["path"] for f in m["files"]}
    return sorted(s for s in index_shards(index_doc) if s not in have)


def by_path(m: dict) -> dict[str, dict]:
    return {f["path"]: f for f in m["files"]}
