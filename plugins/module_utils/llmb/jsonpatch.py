"""Set values at dotted paths of a JSON file (config.json) safely.

    changes = plan(doc, patches)          # what would change, or JsonPatchError
    result = patch_file("config.json", patches, check=False)

A patch is ``{"path": "quantization_config.config_groups.group_0.targets", "value": ["MoE"],
"expect": ["Linear"]}``:

- ``path``: keys separated by dots (``\\.`` for a dot inside a key); a segment of digits indexes a
  list. A list of segments is accepted too, for keys that are awkward to write dotted.
- ``value``: the new value (any JSON value).
- ``expect`` (optional): the value the path must hold before the edit. A path that already holds
  ``value`` is left alone whatever ``expect`` says, so a second run changes nothing.
- ``create`` (optional, default false): allow adding a missing last key to an existing object.
  Without it a missing path fails: a patch that finds nothing to patch is a wrong profile.

``patch_file`` keeps the file's first content once as ``<file>.orig`` (never overwritten later;
with the original's mode and mtime), writes through a temporary file in the same directory plus
``os.replace`` (a crash leaves either the old or the new file, never half of one), and leaves the
file untouched on any error.
Standard library only: this runs on the nodes (Python 3.11).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any

_MISSING = object()


class JsonPatchError(Exception):
    """A patch cannot be applied; the message says which path, what was expected and found."""


def parse_path(path: str | list | tuple) -> list[str | int]:
    """Split a dotted path into segments; digit segments become list indexes."""
    if isinstance(path, (list, tuple)):
        if not path:
            raise JsonPatchError("empty path")
        return [int(s) if isinstance(s, int) or (isinstance(s, str) and s.isdigit()) else str(s) for s in path]
    if not isinstance(path, str) or not path.strip():
        raise JsonPatchError(f"path must be a non-empty string, got {path!r}")
    parts = re.split(r"(?<!\\)\.", path)
    out: list[str | int] = []
    for raw in parts:
        seg = raw.replace("\\.", ".")
        if seg == "":
            raise JsonPatchError(f"path {path!r} has an empty segment")
        out.append(int(seg) if seg.isdigit() else seg)
    return out


def format_path(segments: list[str | int]) -> str:
    return ".".join(str(s).replace(".", "\\.") if isinstance(s, str) else str(s) for s in segments)


def _step(node: Any, seg: str | int, done: list[str | int]) -> Any:
    where = format_path(done) or "(top level)"
    if isinstance(node, dict):
        key = str(seg)
        if key not in node:
            keys = ", ".join(sorted(map(str, node))[:12])
            raise JsonPatchError(f"key {key!r} not found under {where} (keys there: {keys or 'none'})")
        return node[key]
    if isinstance(node, list):
        if not isinstance(seg, int):
            raise JsonPatchError(f"{where} is a list; segment {seg!r} is not an index")
        if not -len(node) <= seg < len(node):
            raise JsonPatchError(f"index {seg} out of range under {where} (list of {len(node)})")
        return node[seg]
    raise JsonPatchError(f"{where} is a {type(node).__name__}, not an object or list; cannot descend into {seg!r}")


def get_at(doc: Any, path: str | list) -> Any:
    """The value at ``path``; JsonPatchError naming the first missing segment."""
    segs = parse_path(path)
    node = doc
    for i, seg in enumerate(segs):
        node = _step(node, seg, segs[:i])
    return node


def _set_at(doc: Any, segs: list[str | int], value: Any, create: bool) -> None:
    parent = doc
    for i, seg in enumerate(segs[:-1]):
        parent = _step(parent, seg, segs[:i])
    last = segs[-1]
    if isinstance(parent, dict):
        if str(last) not in parent and not create:
            _step(parent, last, segs[:-1])  # raises the "not found" message
        parent[str(last)] = value
    elif isinstance(parent, list):
        _step(parent, last, segs[:-1])
        parent[last] = value  # type: ignore[index]
    else:
        _step(parent, last, segs[:-1])


def _same(a: Any, b: Any) -> bool:
    """JSON equality that keeps 1 and true apart (Python says 1 == True)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def validate_patches(patches: Any) -> list[dict]:
    if not isinstance(patches, list):
        raise JsonPatchError(f"patches must be a list of {{path, value[, expect]}}, got {type(patches).__name__}")
    out = []
    for i, p in enumerate(patches):
        if not isinstance(p, dict) or "path" not in p or "value" not in p:
            raise JsonPatchError(f"patch #{i + 1} must be a mapping with 'path' and 'value', got {p!r}")
        unknown = set(p) - {"path", "value", "expect", "create", "key"}
        if unknown:
            raise JsonPatchError(f"patch #{i + 1} ({p.get('path')}): unknown keys {sorted(unknown)}")
        parse_path(p["path"])
        out.append(p)
    return out


def plan(doc: Any, patches: list[dict]) -> tuple[Any, list[dict]]:
    """Apply ``patches`` to a copy of ``doc``: (new_doc, changes). Raises JsonPatchError on the first
    patch that cannot apply; nothing is half-applied because the caller writes only new_doc."""
    new = json.loads(json.dumps(doc))
    changes = []
    for p in validate_patches(patches):
        segs = parse_path(p["path"])
        name = format_path(segs)
        try:
            current = get_at(new, segs)
        except JsonPatchError as exc:
            if not p.get("create"):
                raise JsonPatchError(f"path {name}: {exc}") from None
            current = _MISSING
        if current is not _MISSING and _same(current, p["value"]):
            changes.append({"path": name, "before": current, "after": p["value"], "changed": False})
            continue
        if "expect" in p and p["expect"] is not None and (current is _MISSING or not _same(current, p["expect"])):
            found = "(missing)" if current is _MISSING else json.dumps(current)
            raise JsonPatchError(
                f"path {name}: expected {json.dumps(p['expect'])} before setting {json.dumps(p['value'])}, "
                f"found {found}"
            )
        try:
            _set_at(new, segs, json.loads(json.dumps(p["value"])), bool(p.get("create")))
        except JsonPatchError as exc:
            raise JsonPatchError(f"path {name}: {exc}") from None
        changes.append(
            {"path": name, "before": None if current is _MISSING else current, "after": p["value"], "changed": True}
        )
    return new, changes


def detect_style(text: str) -> dict:
    """Indentation, separators and trailing newline of an existing JSON text, to write it back the
    same way (config.json files are written by json.dumps with indent=2 and a final newline)."""
    body = text.strip()
    indent = None
    if "\n" in body:
        for line in body.splitlines()[1:]:
            stripped = line.lstrip(" ")
            if stripped:
                indent = (len(line) - len(stripped)) or None
                break
    if indent is not None:
        sep = (",", ": ")
    else:
        sep = (", ", ": ") if ": " in body else (",", ":")
    return {"indent": indent, "newline": text.endswith("\n"), "separators": sep}


def dumps(doc: Any, style: dict) -> str:
    out = json.dumps(doc, indent=style.get("indent"), ensure_ascii=False, separators=style.get("separators"))
    return out + ("\n" if style.get("newline", True) else "")


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, mode: int | None = None, exclusive: bool = False,
                 times_ns: tuple[int, int] | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory.

    ``exclusive``: fail with FileExistsError instead of replacing an existing file (os.link is the
    atomic no-overwrite rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if times_ns is not None:
            os.utime(tmp, ns=times_ns)
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def patch_file(path: str, patches: list[dict], *, check: bool = False, keep_orig: bool = True,
               orig_suffix: str = ".orig") -> dict:
    """Patch the JSON file at ``path``. Returns changed, changes, before/after texts, orig path and
    whether the original was saved by this call. The file is never touched when this raises."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise JsonPatchError(f"{path} does not exist") from None
    except OSError as exc:
        raise JsonPatchError(f"cannot read {path}: {exc}") from None
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JsonPatchError(f"{path} is not valid JSON ({exc}); the file was left untouched") from None
    new, changes = plan(doc, patches)
    changed = any(c["changed"] for c in changes)
    orig = path + orig_suffix
    after = dumps(new, detect_style(text)) if changed else text
    result = {
        "path": path,
        "changed": changed,
        "changes": changes,
        "before": text,
        "after": after,
        "orig": orig if keep_orig else None,
        "orig_saved": False,
    }
    if not changed or check:
        result["orig_saved"] = bool(changed and keep_orig and not os.path.exists(orig))
        return result
    st = os.stat(path)
    mode = st.st_mode & 0o7777
    if keep_orig and not os.path.exists(orig):
        try:
            # like cp -p: the copy keeps the original's mtime, so a verification record made for the
            # original (llmb.weights.verify) still describes it
            atomic_write(orig, raw, mode=mode, exclusive=True, times_ns=(st.st_atime_ns, st.st_mtime_ns))
            result["orig_saved"] = True
        except FileExistsError:
            pass
    atomic_write(path, after.encode("utf-8"), mode=mode)
    return result
