"""Set values at dotted paths of a JSON file (config.json), changing only the patched values' text.

    new_text, changes = plan_text(text, patches)   # or JsonPatchError
    result = patch_file("config.json", patches, check=False)

A patch is ``{"path": "quantization_config.config_groups.group_0.targets", "value": ["MoE"],
"expect": ["Linear"]}``:

- ``path``: keys separated by dots (``\\.`` for a dot inside a key); a segment of digits indexes a
  list (``quantization_config.ignore.0``). A list of segments is accepted too, for keys that are
  awkward to write dotted (an int segment may be negative: -1 is the last element).
- ``value``: the new value (any JSON value).
- ``expect`` (optional): the value the path must hold before the edit. A path that already holds
  ``value`` is left alone whatever ``expect`` says, so a second run changes nothing.
- ``create`` (optional, default false): allow adding a missing last key to an existing object.
  Without it a missing path fails: a patch that finds nothing to patch is a wrong profile.

Byte-preserving: the document is scanned once per patch into a tree of exact character spans;
the value at the path is replaced by the new value's JSON text and every other character of the
file stays as it was (whitespace, key order, number spellings such as ``1.0e-6``, escapes such as
``\\u00e9``, a final newline or its absence). A container value is written in the file's own
indentation; a created key is appended after the last member of its object, indented like its
siblings. A document with a duplicate key anywhere, invalid JSON (``NaN``/``Infinity`` are
accepted, as Python's json module writes them) or nesting deeper than ``MAX_DEPTH`` is refused
with the line and column.

``patch_file`` reads only a regular file: ``lstat`` first, so a FIFO, directory, device or socket
is refused before anything opens it (the open also uses ``O_NONBLOCK | O_NOFOLLOW``). A symbolic
link is refused on purpose: writing through it would change a file that other paths share, and
replacing it would silently detach it. The first content is kept once as ``<file>.orig`` (never
overwritten; original's mode, owner and mtime). An existing ``.orig`` is used only when it is a
true earlier copy (see ``check_backup``); a link (dangling or not), a non-regular file, invalid
JSON or a document that json_patch could not have turned into the current file is refused, so a
patch never goes ahead without a real backup. Writes go through a temporary file in the same
directory, fsync and ``os.replace`` (mode and owner kept); on any error the file is untouched.
Standard library only: this runs on the nodes (python3 >= 3.9).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from json.decoder import scanstring
from typing import Any

from .fsutil import fsync_dir as _fsync_dir

_MISSING = object()
MAX_DEPTH = 200
MAX_BYTES = 64 * 1024 * 1024  # config.json files are kilobytes; anything this large is not one
_WS = " \t\n\r"
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None), ("NaN", float("nan")),
             ("Infinity", float("inf")), ("-Infinity", float("-inf")))


class JsonPatchError(Exception):
    """A patch cannot be applied; the message says which path, what was expected and found."""


# ---------------------------------------------------------------------------------------------
# paths


def parse_path(path: str | list | tuple) -> list[str | int]:
    """Split a dotted path into segments; digit segments become list indexes."""
    if isinstance(path, (list, tuple)):
        if not path:
            raise JsonPatchError("empty path")
        return [s if isinstance(s, int) and not isinstance(s, bool) else _segment(str(s)) for s in path]
    if not isinstance(path, str) or not path.strip():
        raise JsonPatchError(f"path must be a non-empty string, got {path!r}")
    parts = re.split(r"(?<!\\)\.", path)
    out: list[str | int] = []
    for raw in parts:
        seg = raw.replace("\\.", ".")
        if seg == "":
            raise JsonPatchError(f"path {path!r} has an empty segment")
        out.append(_segment(seg))
    return out


def _segment(seg: str) -> str | int:
    """A list index for canonical digits ("0", "12"); any other string (also "00" or "²") is a key, so
    an object key always round-trips through str()."""
    return int(seg) if len(seg) < 19 and re.fullmatch(r"0|[1-9][0-9]*", seg) else seg


def format_path(segments: list[str | int]) -> str:
    return ".".join(str(s).replace(".", "\\.") if isinstance(s, str) else str(s) for s in segments)


# ---------------------------------------------------------------------------------------------
# the span scanner


@dataclass
class Node:
    """One JSON value: ``text[start:end]`` is its exact text; ``value`` the decoded Python value."""

    start: int
    end: int
    value: Any
    members: list[Member] | None = None  # objects: in file order
    items: list[Node] | None = None  # arrays


@dataclass
class Member:
    key: str
    key_start: int  # the opening quote
    key_end: int  # after the closing quote
    node: Node = field(repr=False)


def line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column (in characters) of offset ``pos``."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


class _Scanner:
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name

    def error(self, pos: int, msg: str, invalid: bool = True) -> JsonPatchError:
        line, col = line_col(self.text, pos)
        what = " is not valid JSON" if invalid else ""
        return JsonPatchError(f"{self.name}{what} at line {line} column {col}: {msg}")

    def ws(self, pos: int) -> int:
        text = self.text
        while pos < len(text) and text[pos] in _WS:
            pos += 1
        return pos

    def document(self) -> Node:
        if self.text.startswith("\ufeff"):
            raise self.error(0, "starts with a UTF-8 byte order mark, which JSON does not allow")
        node = self.value(self.ws(0), 0, [])
        end = self.ws(node.end)
        if end != len(self.text):
            raise self.error(end, f"extra data after the top-level value: {self.text[end:end + 20]!r}")
        return node

    def value(self, pos: int, depth: int, path: list[str | int]) -> Node:
        text = self.text
        if pos >= len(text):
            raise self.error(pos, "expected a value, found the end of the file")
        ch = text[pos]
        if ch == "{":
            return self.obj(pos, depth + 1, path)
        if ch == "[":
            return self.arr(pos, depth + 1, path)
        if ch == '"':
            s, end = self.string(pos)
            return Node(pos, end, s)
        for word, val in _LITERALS:
            if text.startswith(word, pos):
                return Node(pos, pos + len(word), val)
        m = _NUMBER.match(text, pos)
        if m:
            try:
                num: Any = float(m.group()) if m.group(1) or m.group(2) else int(m.group())
            except ValueError as exc:  # an integer beyond Python's digit limit
                raise self.error(pos, f"number {m.group()[:20]}... cannot be read ({exc})") from None
            return Node(pos, m.end(), num)
        raise self.error(pos, f"expected a value, found {text[pos:pos + 20]!r}")

    def string(self, pos: int) -> tuple[str, int]:
        try:
            return scanstring(self.text, pos + 1, True)
        except json.JSONDecodeError as exc:
            raise self.error(exc.pos, f"bad string: {exc.msg}") from None

    def obj(self, start: int, depth: int, path: list[str | int]) -> Node:
        if depth > MAX_DEPTH:
            raise self.error(start, f"nested deeper than {MAX_DEPTH} levels")
        text = self.text
        members: list[Member] = []
        seen: dict[str, int] = {}
        value: dict = {}
        pos = self.ws(start + 1)
        if pos < len(text) and text[pos] == "}":
            return Node(start, pos + 1, value, members=members)
        while True:
            if pos >= len(text) or text[pos] != '"':
                raise self.error(pos, "expected a key in double quotes" + (
                    " (a trailing comma?)" if members and pos < len(text) and text[pos] == "}" else ""))
            key, key_end = self.string(pos)
            if key in seen:
                fl, fc = line_col(text, seen[key])
                where = f"in {format_path(path)}" if path else "at the top level"
                raise self.error(pos, f"duplicate key {json.dumps(key)} {where} (first at line {fl} column {fc}); "
                                      "a JSON loader keeps only one of them silently, so which value counts is "
                                      "undefined: remove one and re-run", invalid=False)
            seen[key] = pos
            colon = self.ws(key_end)
            if colon >= len(text) or text[colon] != ":":
                raise self.error(colon, f"expected ':' after key {json.dumps(key)}")
            node = self.value(self.ws(colon + 1), depth, path + [key])
            members.append(Member(key, pos, key_end, node))
            value[key] = node.value
            pos = self.ws(node.end)
            if pos < len(text) and text[pos] == ",":
                pos = self.ws(pos + 1)
                continue
            if pos < len(text) and text[pos] == "}":
                return Node(start, pos + 1, value, members=members)
            raise self.error(pos, "expected ',' or '}' after an object member")

    def arr(self, start: int, depth: int, path: list[str | int]) -> Node:
        if depth > MAX_DEPTH:
            raise self.error(start, f"nested deeper than {MAX_DEPTH} levels")
        text = self.text
        items: list[Node] = []
        pos = self.ws(start + 1)
        if pos < len(text) and text[pos] == "]":
            return Node(start, pos + 1, [], items=items)
        while True:
            node = self.value(pos, depth, path + [len(items)])
            items.append(node)
            pos = self.ws(node.end)
            if pos < len(text) and text[pos] == ",":
                pos = self.ws(pos + 1)
                continue
            if pos < len(text) and text[pos] == "]":
                return Node(start, pos + 1, [n.value for n in items], items=items)
            raise self.error(pos, "expected ',' or ']' after a list element")


def scan(text: str, name: str = "document") -> Node:
    """The span tree of ``text``; JsonPatchError naming ``name``, line and column for invalid JSON or a
    duplicate key anywhere."""
    root = _Scanner(text, name).document()
    try:  # the node's own loader must agree with this scanner
        json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise JsonPatchError(f"{name} is not valid JSON ({exc})") from None
    return root


def loads_strict(text: str, name: str = "document") -> Any:
    """json.loads that refuses duplicate keys (with line and column)."""
    return scan(text, name).value


# ---------------------------------------------------------------------------------------------
# walking the tree


def _kind(value: Any) -> str:
    return type(value).__name__


def _step(node: Node, seg: str | int, done: list[str | int]) -> Node:
    where = format_path(done) or "(top level)"
    if node.members is not None:
        key = str(seg)
        for m in node.members:
            if m.key == key:
                return m.node
        keys = ", ".join(sorted(m.key for m in node.members)[:12])
        raise JsonPatchError(f"key {key!r} not found under {where} (keys there: {keys or 'none'})")
    if node.items is not None:
        if not isinstance(seg, int):
            raise JsonPatchError(f"{where} is a list; segment {seg!r} is not an index")
        if not -len(node.items) <= seg < len(node.items):
            raise JsonPatchError(f"index {seg} out of range under {where} (list of {len(node.items)})")
        return node.items[seg]
    raise JsonPatchError(f"{where} is a {_kind(node.value)}, not an object or list; cannot descend into {seg!r}")


def _resolve(root: Node, segs: list[str | int]) -> Node:
    node = root
    for i, seg in enumerate(segs):
        node = _step(node, seg, segs[:i])
    return node


def get_at(doc: Any, path: str | list) -> Any:
    """The value at ``path`` of a decoded document; JsonPatchError naming the first missing segment."""
    return _resolve(scan(json.dumps(doc)), parse_path(path)).value


def _same(a: Any, b: Any) -> bool:
    """JSON equality that keeps 1 and true apart (Python says 1 == True)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(a[i], b[i]) for i in range(len(a)))  # no zip(strict=): python 3.9
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
        try:
            parse_path(p["path"])
        except JsonPatchError as exc:
            raise JsonPatchError(f"patch #{i + 1}: {exc}") from None
        try:
            json.dumps(p["value"], allow_nan=True)
        except (TypeError, ValueError) as exc:
            raise JsonPatchError(f"patch #{i + 1} ({p.get('path')}): value is not JSON ({exc})") from None
        out.append(p)
    return out


# ---------------------------------------------------------------------------------------------
# writing new values in the file's style


@dataclass
class Style:
    indent: str | None  # one level of indentation, None for a one-line document
    key_sep: str  # between a key and its value, e.g. ": "
    item_sep: str  # between members on one line, e.g. ", "
    ensure_ascii: bool  # an all-ASCII file stays all-ASCII (\\u escapes)


def _line_prefix(text: str, pos: int) -> str:
    """The whitespace that starts the line holding ``pos``."""
    start = text.rfind("\n", 0, pos) + 1
    end = start
    while end < len(text) and text[end] in " \t":
        end += 1
    return text[start:end]


def _children(node: Node) -> list[tuple[int, Node]]:
    """(start of the child's text, node) for members (the key's quote) and items."""
    if node.members is not None:
        return [(m.key_start, m.node) for m in node.members]
    if node.items is not None:
        return [(n.start, n) for n in node.items]
    return []


def detect_style(text: str, root: Node) -> Style:
    """Indentation and separators of the existing text, to write new values the same way."""
    indent = key_sep = item_sep = None
    stack = [root]
    while stack and (indent is None or key_sep is None or item_sep is None):
        node = stack.pop()
        kids = _children(node)
        if kids:
            gap = text[node.start + 1:kids[0][0]]
            if indent is None and "\n" in gap:
                inner, outer = gap.rsplit("\n", 1)[1], _line_prefix(text, node.start)
                if inner.startswith(outer) and len(inner) > len(outer):
                    indent = inner[len(outer):]
            if item_sep is None and len(kids) > 1:
                between = text[kids[0][1].end:kids[1][0]]
                if "\n" not in between:
                    item_sep = "," + between.split(",", 1)[1]
        if key_sep is None and node.members:
            m = node.members[0]
            between = text[m.key_end:m.node.start]
            if "\n" not in between:
                key_sep = between
        stack.extend(reversed([n for _, n in kids]))
    if key_sep is None:
        key_sep = ": "
    if item_sep is None:
        item_sep = ", " if key_sep.endswith(" ") else ","
    return Style(indent, key_sep, item_sep, text.isascii())


def render(value: Any, style: Style, prefix: str, multiline: bool) -> str:
    """``value`` as JSON text for a place on a line that starts with ``prefix``: indented over several
    lines where its surroundings are (``multiline`` and the file is indented), else on one line."""
    if multiline and style.indent is not None:
        out = json.dumps(value, indent=style.indent, separators=(",", style.key_sep),
                         ensure_ascii=style.ensure_ascii)
        return out.replace("\n", "\n" + prefix)
    return json.dumps(value, separators=(style.item_sep, style.key_sep), ensure_ascii=style.ensure_ascii)


def _spans_lines(text: str, node: Node | None) -> bool:
    return node is not None and "\n" in text[node.start:node.end]


def _insert_member(text: str, obj: Node, outer: Node | None, key: str, value: Any, style: Style) -> str:
    """``text`` with ``"key": value`` appended to the object ``obj`` (``outer``: the value holding
    ``obj``, None at the top), laid out like the members before it."""
    key_text = json.dumps(key, ensure_ascii=style.ensure_ascii)
    if obj.members:
        last = obj.members[-1]
        k = last.key_start
        while text[k - 1] in _WS:
            k -= 1
        lead = text[k:last.key_start]
        if "\n" not in lead and len(obj.members) == 1:
            lead = style.item_sep[1:]
        between = text[last.key_end:last.node.start]
        sep = between if "\n" not in between else style.key_sep
        prefix = lead.rsplit("\n", 1)[1] if "\n" in lead else _line_prefix(text, last.key_start)
        piece = "," + lead + key_text + sep + render(value, style, prefix, _spans_lines(text, obj))
        return text[:last.node.end] + piece + text[last.node.end:]
    if style.indent is not None and (_spans_lines(text, outer) or _spans_lines(text, obj)):
        outer_prefix = _line_prefix(text, obj.start)
        inner = outer_prefix + style.indent
        body = ("{\n" + inner + key_text + style.key_sep + render(value, style, inner, True) + "\n"
                + outer_prefix + "}")
    else:
        body = "{" + key_text + style.key_sep + render(value, style, "", False) + "}"
    return text[:obj.start] + body + text[obj.end:]


# ---------------------------------------------------------------------------------------------
# planning


def plan_text(text: str, patches: list[dict], name: str = "document") -> tuple[str, list[dict]]:
    """Apply ``patches`` in order to the JSON ``text``: (new_text, changes). Only the patched values'
    text changes. Raises JsonPatchError on the first patch that cannot apply (nothing half-applied:
    the caller writes only new_text)."""
    patches = validate_patches(patches)
    changes = []
    root = scan(text, name)
    style = detect_style(text, root)
    for p in patches:
        segs = parse_path(p["path"])
        pname = format_path(segs)
        node: Node | None
        try:
            node = _resolve(root, segs)
            current = node.value
        except JsonPatchError as exc:
            if not p.get("create"):
                raise JsonPatchError(f"path {pname}: {exc}") from None
            node, current = None, _MISSING
        if current is not _MISSING and _same(current, p["value"]):
            changes.append({"path": pname, "before": current, "after": p["value"], "changed": False})
            continue
        if "expect" in p and p["expect"] is not None and (current is _MISSING or not _same(current, p["expect"])):
            found = "(missing)" if current is _MISSING else json.dumps(current)
            raise JsonPatchError(
                f"path {pname}: expected {json.dumps(p['expect'])} before setting {json.dumps(p['value'])}, "
                f"found {found}"
            )
        if node is not None:
            multiline = _spans_lines(text, _resolve(root, segs[:-1]))
            piece = render(p["value"], style, _line_prefix(text, node.start), multiline)
            text = text[:node.start] + piece + text[node.end:]
        else:
            try:
                parent = _resolve(root, segs[:-1])
                if parent.members is None:
                    _step(parent, segs[-1], segs[:-1])  # raises: a list index or a scalar
                    raise JsonPatchError(f"{format_path(segs[:-1])} is a list; only object keys can be created")
            except JsonPatchError as exc:
                raise JsonPatchError(f"path {pname}: {exc}") from None
            outer = _resolve(root, segs[:-2]) if len(segs) > 1 else None
            text = _insert_member(text, parent, outer, str(segs[-1]), p["value"], style)
        changes.append(
            {"path": pname, "before": None if current is _MISSING else current, "after": p["value"], "changed": True}
        )
        root = scan(text, name)  # offsets after the splice moved; the next patch sees this one
    return text, changes


def plan(doc: Any, patches: list[dict]) -> tuple[Any, list[dict]]:
    """``plan_text`` on a decoded document: (new_doc, changes); ``doc`` is not modified."""
    new_text, changes = plan_text(json.dumps(doc, indent=2), patches)
    return json.loads(new_text), changes


# ---------------------------------------------------------------------------------------------
# files


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind_of(mode: int) -> str:
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JsonPatchError(f"cannot stat {path}: {exc}") from None


def _link_target(path: str) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        return "?"
    full = os.path.join(os.path.dirname(path), target)
    return target + ("" if os.path.exists(full) else ", which does not exist")


def read_regular(path: str, what: str, fix: str, link_fix: str = "") -> tuple[bytes, os.stat_result]:
    """The bytes of ``path`` if it is a regular file (checked with lstat before any open, so a FIFO
    never blocks); JsonPatchError naming ``what`` and ``fix`` (``link_fix`` for a link) otherwise."""
    st = _lstat(path)
    if st is None:
        raise JsonPatchError(f"{path} does not exist")
    if stat.S_ISLNK(st.st_mode):
        raise JsonPatchError(f"{path} ({what}) is a symbolic link to {_link_target(path)}; json_patch does not "
                             f"follow links. {link_fix or fix}")
    if not stat.S_ISREG(st.st_mode):
        raise JsonPatchError(f"{path} ({what}) is {_kind_of(st.st_mode)}, not a regular file. {fix}")
    if st.st_size > MAX_BYTES:
        raise JsonPatchError(f"{path} ({what}) is {st.st_size} bytes, over the {MAX_BYTES} limit for a JSON "
                             f"config file. {fix}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise JsonPatchError(f"cannot read {path} ({what}): {exc}") from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise JsonPatchError(f"{path} ({what}) was replaced while it was being read; re-run")
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise JsonPatchError(f"{path} ({what}) grew past {MAX_BYTES} bytes while being read")
        return b"".join(chunks), fst
    except OSError as exc:
        raise JsonPatchError(f"cannot read {path} ({what}): {exc}") from None
    finally:
        os.close(fd)


def _decode(raw: bytes, name: str) -> tuple[str, Node]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonPatchError(f"{name} is not valid JSON (not UTF-8: {exc})") from None
    return text, scan(text, name)


def ancestry_problem(backup: Any, current: Any) -> str | None:
    """Why ``backup`` cannot be an earlier content of ``current`` under json_patch's edits, or None.

    json_patch replaces values below the top level and appends created keys at the end of an
    object, so an earlier copy has the same top-level kind, and for an object its keys are the
    current keys' leading run in the same order (for a list, the same length). Values may differ
    anywhere (earlier patches, possibly with other patch lists)."""
    if isinstance(backup, dict) and isinstance(current, dict):
        old, new = list(backup), list(current)
        if not old and new:
            return "it is an empty object"
        if new[:len(old)] != old:
            missing = [k for k in old if k not in current]
            if missing:
                return f"it has top-level keys the file lacks: {', '.join(map(json.dumps, missing[:5]))}"
            return "its top-level keys are in a different order"
        return None
    if isinstance(backup, list) and isinstance(current, list):
        return None if len(backup) == len(current) else (
            f"it is a list of {len(backup)} where the file is a list of {len(current)}")
    return f"it is a {_kind(backup)} where the file is a {_kind(current)}"


def check_backup(orig: str, path: str, current: Any) -> bool:
    """True when ``orig`` holds a true earlier copy of ``path``, False when there is none (it will be
    saved); JsonPatchError for anything else (a link, dangling or not; a directory, FIFO or
    device; invalid JSON; a document that is not an earlier copy), so no patch goes ahead
    without a real backup."""
    if _lstat(orig) is None:
        return False
    fix = (f"Move it away if {path} is still the pristine file (or restore {path} from the hub), then re-run; "
           f"json_patch saves the original there before its first change")
    raw, _ = read_regular(orig, f"the saved original of {path}", fix,
                          f"A backup must be a regular file that json_patch wrote. {fix}")
    try:
        _, node = _decode(raw, orig)
    except JsonPatchError as exc:
        raise JsonPatchError(f"{exc}; it cannot be the saved original of {path}. {fix}") from None
    why = ancestry_problem(node.value, current)
    if why:
        raise JsonPatchError(f"{orig} is not an earlier copy of {path}: {why}. {fix}")
    return True


def atomic_write(path: str, data: bytes, mode: int | None = None, exclusive: bool = False,
                 times_ns: tuple[int, int] | None = None, owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory (fsync, rename).

    ``exclusive``: fail with FileExistsError instead of replacing an existing file (os.link is the
    atomic no-overwrite rename). ``owner``: (uid, gid) for the new file (PermissionError when this
    user cannot give it away: nothing is replaced then)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if owner is not None:
            tst = os.stat(tmp)
            if (tst.st_uid, tst.st_gid) != owner:
                os.chown(tmp, owner[0], owner[1])
        if mode is not None:
            os.chmod(tmp, mode)  # after chown, which may clear setuid/setgid bits
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
    whether the original was (or in check mode would be) saved by this call. The file is never
    touched when this raises; check mode runs every check a real run does."""
    if keep_orig and (not isinstance(orig_suffix, str) or not orig_suffix or "/" in orig_suffix
                      or "\0" in orig_suffix or orig_suffix in (".", "..")):
        raise JsonPatchError(f"orig_suffix must be a non-empty file name suffix without '/' (like '.orig'), "
                             f"got {orig_suffix!r}")
    fix = f"json_patch edits a regular file in place; put the real file at {path} and re-run"
    link_fix = (f"Writing through the link would change a file other paths may share, replacing it would "
                f"detach it silently: replace the link by a copy of its target (cp --remove-destination "
                f"\"$(readlink -f {path})\" {path}) and re-run")
    raw, st = read_regular(path, "the file to patch", fix, link_fix)
    text, root = _decode(raw, path)
    after, changes = plan_text(text, patches, path)
    changed = any(c["changed"] for c in changes)
    orig = path + orig_suffix
    have_backup = check_backup(orig, path, root.value) if keep_orig else False
    result = {
        "path": path,
        "changed": changed,
        "changes": changes,
        "before": text,
        "after": after,
        "orig": orig if keep_orig else None,
        "orig_saved": bool(changed and keep_orig and not have_backup),
    }
    if not changed or check:
        return result
    mode, owner = stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)
    try:
        if result["orig_saved"]:
            # like cp -p: the copy keeps the original's mtime, so a verification record made for the
            # original (llmb.weights.verify) still describes it
            atomic_write(orig, raw, mode=mode, exclusive=True, times_ns=(st.st_atime_ns, st.st_mtime_ns),
                         owner=owner)
        now = _lstat(path)
        if now is None or (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
            raise JsonPatchError(f"{path} changed while it was being patched; re-run")
        atomic_write(path, after.encode("utf-8"), mode=mode, owner=owner)
    except FileExistsError:
        raise JsonPatchError(f"{orig} appeared while {path} was being patched; re-run") from None
    except OSError as exc:
        raise JsonPatchError(f"cannot write {path}: {exc}") from None
    return result
