"""`llmb collect` on the controller: each host's bundle written redacted, then one archive.

The llmb_collect module reads a node's files (llmb.collect.gather); the llmb_collect_write action
hands them here (:func:`write_host`): every text masked by the one secret rule
(llmbctl.secrets.redact_text, with the secret values the run knows: the controller's secret
environment, the vaulted API key and sudo password), written under ``<run>/collect/<host>/`` with a
MANIFEST.json and SHA256SUMS. :func:`pack` then makes ``<run>/llmb-collect-<run>.tar.gz``:

    llmb-collect-<run>/index.html         what is in it, per host, with each file's size
    llmb-collect-<run>/MANIFEST.json      every file: path, size, sha256
    llmb-collect-<run>/SHA256SUMS         the same, for `sha256sum -c`
    llmb-collect-<run>/deployment.json    the run's deployment document
    llmb-collect-<run>/verify/<host>/     the verify bundle (`scripts/hwfacts --bundle .../verify`)
    llmb-collect-<run>/hosts/<host>/      units, journals, engine and kernel logs, versions

Everything packed is redacted again on its way into the archive. Controller side, stdlib only.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import os
import tarfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from .results import _name
from .secrets import is_secret_env, redact_text

MANIFEST = "MANIFEST.json"
SUMS = "SHA256SUMS"


class CollectError(ValueError):
    """A file name from a node that cannot be written (absolute, ..); the message names it."""


def secret_values(environ: Mapping[str, str], extra: Iterable = ()) -> list[str]:
    """The secret values a run knows: its environment's (the one rule) and ``extra`` (vault values)."""
    vals = [v for k, v in environ.items() if v and is_secret_env(k, v)]
    return sorted({str(v) for v in [*vals, *(extra or ())] if v and len(str(v)) >= 4})


def _safe(rel: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(part in ("", ".", "..") for part in p.parts):
        raise CollectError(f"bundle file {rel!r}: expected a relative path without '..'")
    return str(p)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest(entries: dict[str, bytes]) -> tuple[bytes, bytes]:
    files = [{"path": p, "size": len(d), "sha256": _digest(d)} for p, d in sorted(entries.items())]
    manifest = json.dumps({"format": 1, "files": files}, indent=1).encode() + b"\n"
    sums = "".join(f"{f['sha256']}  {f['path']}\n" for f in files).encode()
    return manifest, sums


def write_host(artifacts_dir: str, host: str, files: Mapping[str, str], secrets: Iterable[str] = ()) -> dict:
    """Write a host's bundle (redacted) under <artifacts_dir>/collect/<host>/ with its manifest and
    checksums: {"dir", "files", "bytes"}."""
    base = Path(artifacts_dir) / "collect" / _name("host", host)
    secrets = list(secrets)
    entries = {_safe(rel): redact_text(str(text), secrets).encode("utf-8") for rel, text in files.items()}
    manifest, sums = _manifest(entries)
    for rel, data in [*entries.items(), (MANIFEST, manifest), (SUMS, sums)]:
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return {"dir": str(base), "files": len(entries), "bytes": sum(len(d) for d in entries.values())}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.is_dir() else {}


def _redact_bytes(data: bytes, secrets: list[str]) -> bytes:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # binary: only the known values can be found in it
        for v in secrets:
            data = data.replace(v.encode(), b"********")
        return data
    return redact_text(text, secrets).encode("utf-8")


def index_html(run_id: str, hosts: dict[str, dict[str, int]], created: str) -> str:
    """The archive's index page: per host, its files and sizes; where to start."""
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'>",
           f"<title>llm-bringup support bundle {e(run_id)}</title>",
           "<style>body{font-family:system-ui,sans-serif;margin:1.5em}td,th{border:1px solid #bbb;"
           "padding:.2em .5em}table{border-collapse:collapse}</style></head><body>",
           f"<h1>llm-bringup support bundle {e(run_id)}</h1>",
           f"<p>Created {e(created)}. Secrets are masked (********). Check the files with "
           "<code>sha256sum -c SHA256SUMS</code>; the accelerator outputs with "
           "<code>scripts/hwfacts --bundle verify --platform PLATFORM</code>.</p>",
           "<p><a href='deployment.json'>deployment.json</a> (the plan) &middot; "
           "<a href='MANIFEST.json'>MANIFEST.json</a></p>"]
    for host, files in hosts.items():
        out.append(f"<h2>{e(host)}</h2><table><tr><th>file</th><th>bytes</th></tr>")
        out += [f"<tr><td><a href='{e(p)}'>{e(p)}</a></td><td>{n}</td></tr>" for p, n in files.items()]
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def pack(artifacts_dir: str, run_id: str, hosts: list[str], secrets: Iterable[str] = ()) -> dict:
    """<artifacts_dir>/llmb-collect-<run_id>.tar.gz: {"archive", "files", "bytes", "hosts"}."""
    run = Path(artifacts_dir)
    top = f"llmb-collect-{_name('run id', run_id)}"
    secrets = list(secrets)
    entries: dict[str, bytes] = {}
    dep = run / "deployment.json"
    if dep.is_file():
        entries["deployment.json"] = _redact_bytes(dep.read_bytes(), secrets)
    per_host: dict[str, dict[str, int]] = {}
    for host in hosts:
        per_host[host] = {}
        for sub, root in (("verify", run / "bundle" / host), ("hosts", run / "collect" / host)):
            for rel, data in _tree(root).items():
                path = f"{sub}/{host}/{rel}"
                entries[path] = _redact_bytes(data, secrets)
                per_host[host][path] = len(entries[path])
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entries["index.html"] = index_html(run_id, per_host, created).encode()
    manifest, sums = _manifest(entries)
    entries[MANIFEST], entries[SUMS] = manifest, sums
    archive = run / f"{top}.tar.gz"
    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for rel, data in sorted(entries.items()):
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, archive)
    return {"archive": str(archive), "files": len(entries), "bytes": archive.stat().st_size, "hosts": hosts}
