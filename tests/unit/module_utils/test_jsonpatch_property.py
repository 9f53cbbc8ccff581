"""Property tests for llmb.jsonpatch: random JSON documents written with random formatting (indent,
separators, ensure_ascii, float spellings, escaped slashes); patching a random existing path changes
only that value's characters, and the scanner agrees with json.loads on what is valid."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from llmb.jsonpatch import JsonPatchError, plan_text

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=6), kids, max_size=4)),
    max_leaves=20,
)
documents = st.one_of(st.dictionaries(st.text(max_size=6), values, min_size=1, max_size=5),
                      st.lists(values, min_size=1, max_size=4))


@dataclass
class Fmt:
    indent: str | None
    key_sep: str
    item_sep: str
    ensure_ascii: bool
    float_form: int
    slash_escape: bool
    final_newline: bool
    empty_ws: str


formats = st.builds(
    Fmt,
    indent=st.sampled_from([None, " ", "  ", "    ", "\t"]),
    key_sep=st.sampled_from([":", ": ", " : ", " :"]),
    item_sep=st.sampled_from([",", ", ", " ,", " , "]),
    ensure_ascii=st.booleans(),
    float_form=st.integers(0, 4),
    slash_escape=st.booleans(),
    final_newline=st.booleans(),
    empty_ws=st.sampled_from(["", " ", "\n"]),
)


def float_text(x: float, form: int) -> str:
    """The same float spelled several ways, each parsing back to exactly ``x``."""
    if form == 0:
        return repr(x)
    mant, exp = f"{x:.17e}".split("e")
    mant = mant.rstrip("0").rstrip(".") if form in (2, 4) else mant
    e = int(exp)
    if form == 1:
        return f"{mant}e{exp}"  # 1.00000000000000000e-06
    if form == 2:
        return f"{mant}E{'+' if e >= 0 else '-'}{abs(e)}"  # 1E-6, 5E+4
    if form == 3:
        return f"{mant}e{e}"
    return (mant if "." in mant else mant + ".0") + f"e{e}"  # 1.0e-6


class Emitter:
    """Serialises a document with ``fmt`` and records the character span of every value by path."""

    def __init__(self, fmt: Fmt) -> None:
        self.fmt = fmt
        self.parts: list[str] = []
        self.n = 0
        self.spans: dict[tuple, tuple[int, int]] = {}

    def w(self, s: str) -> None:
        self.parts.append(s)
        self.n += len(s)

    def nl(self, depth: int) -> str:
        return "" if self.fmt.indent is None else "\n" + self.fmt.indent * depth

    def string(self, s: str) -> str:
        out = json.dumps(s, ensure_ascii=self.fmt.ensure_ascii)
        return out.replace("/", "\\/") if self.fmt.slash_escape else out

    def value(self, v, path: tuple, depth: int) -> None:
        start = self.n
        if isinstance(v, (dict, list)):
            pairs = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
            self.w("{" if isinstance(v, dict) else "[")
            if not pairs:
                self.w(self.fmt.empty_ws)
            for i, (k, x) in enumerate(pairs):
                if i:
                    self.w(self.fmt.item_sep)
                self.w(self.nl(depth + 1))
                if isinstance(v, dict):
                    self.w(self.string(k) + self.fmt.key_sep)
                self.value(x, path + (k,), depth + 1)
            if pairs:
                self.w(self.nl(depth))
            self.w("}" if isinstance(v, dict) else "]")
        elif isinstance(v, float):
            self.w(float_text(v, self.fmt.float_form))
        elif isinstance(v, str):
            self.w(self.string(v))
        else:
            self.w(json.dumps(v))
        self.spans[path] = (start, self.n)

    def dump(self, doc) -> str:
        self.value(doc, (), 0)
        return "".join(self.parts) + ("\n" if self.fmt.final_newline else "")


def set_at(doc, path: tuple, value):
    node = doc
    for seg in path[:-1]:
        node = node[seg]
    node[path[-1]] = value


def same_json(a, b) -> bool:
    return json.dumps(a) == json.dumps(b)  # keeps 1 and true, key order and float values apart


def only_replaced(old: str, new: str, start: int, end: int) -> bool:
    tail = len(old) - end
    return new[:start] == old[:start] and new[len(new) - tail:] == old[end:]


def only_inserted(old: str, new: str) -> bool:
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    return len(new) >= len(old) and new[p + len(new) - len(old):] == old[p:]


@SETTINGS
@given(doc=documents, fmt=formats, data=st.data())
def test_patching_an_existing_path_changes_only_that_value(doc, fmt, data):
    em = Emitter(fmt)
    text = em.dump(doc)
    assert same_json(json.loads(text), doc)  # the emitter itself is right
    path = data.draw(st.sampled_from(sorted((p for p in em.spans if p), key=repr)), label="path")
    new_value = data.draw(values, label="value")
    new_text, changes = plan_text(text, [{"path": list(path), "value": new_value}])
    start, end = em.spans[path]
    if not changes[0]["changed"]:  # equal as JSON values (numbers by value: 0 and 0.0 are one number)
        old_value = json.loads(text[start:end])
        assert new_text == text
        assert old_value == new_value and isinstance(old_value, bool) == isinstance(new_value, bool)
        return
    expected = copy.deepcopy(doc)
    set_at(expected, path, new_value)
    assert same_json(json.loads(new_text), expected)
    assert only_replaced(text, new_text, start, end)
    assert same_json(json.loads(new_text[start:len(new_text) - (len(text) - end)]), new_value)


@SETTINGS
@given(doc=documents, fmt=formats, data=st.data())
def test_patching_with_the_current_value_changes_no_byte(doc, fmt, data):
    em = Emitter(fmt)
    text = em.dump(doc)
    path = data.draw(st.sampled_from(sorted((p for p in em.spans if p), key=repr)), label="path")
    current = json.loads(text[slice(*em.spans[path])])
    new_text, changes = plan_text(text, [{"path": list(path), "value": current, "expect": "never checked"}])
    assert new_text == text and changes[0]["changed"] is False


@SETTINGS
@given(doc=documents, fmt=formats, key=st.text(max_size=6), data=st.data())
def test_creating_a_key_only_inserts(doc, fmt, key, data):
    em = Emitter(fmt)
    text = em.dump(doc)
    objects = sorted((p for p in em.spans if isinstance(json.loads(text[slice(*em.spans[p])]), dict)), key=repr)
    assume(objects)
    parent = data.draw(st.sampled_from(objects), label="object")
    expected = copy.deepcopy(doc)
    node = expected
    for seg in parent:
        node = node[seg]
    assume(key not in node)
    new_value = data.draw(values, label="value")
    new_text, changes = plan_text(text, [{"path": [*parent, key], "value": new_value, "create": True}])
    node[key] = new_value
    assert same_json(json.loads(new_text), expected)
    if len(node) > 1:
        assert only_inserted(text, new_text)
    else:  # an empty object is rewritten whole (its inner layout is no sibling's); nothing around it
        assert only_replaced(text, new_text, *em.spans[parent])
    assert changes[0]["changed"]


def _pairs_without_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


json_ish = st.text(alphabet='{}[]",:0123456789.eE+-tfrulnsaNIy \n\\u/x\u00e9', max_size=40)


@SETTINGS
@given(text=st.one_of(json_ish, documents.map(json.dumps).flatmap(
    lambda s: st.integers(0, len(s)).map(lambda i: s[:i] + s[i + 1:]))))
def test_scanner_agrees_with_json_loads(text):
    try:
        json.loads(text, object_pairs_hook=_pairs_without_duplicates)
        valid = True
    except (ValueError, RecursionError):
        valid = False
    try:
        plan_text(text, [])
        accepted = True
    except JsonPatchError:
        accepted = False
    assert accepted == valid, text
