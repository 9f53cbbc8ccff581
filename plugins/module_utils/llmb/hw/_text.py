"""Text helpers shared by the hardware parsers (stdlib only, Python 3.11+).

What a parser finds wrong in a capture is a llmb.finding.Finding (Finding.capture: severity, line, text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# CSI sequences (colours, cursor moves), OSC sequences (window titles, ended by BEL or ESC \\) and the
# other C0 controls a terminal copy may carry (tab and newline are kept; \r is handled by clean_lines).
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
BOM = "\ufeff"
HEADER_RE = re.compile(r"^# (source|machine|command|exit status|stderr|note):", re.IGNORECASE)


class ParseError(ValueError):
    """A capture that cannot be read. The message names the kind and what is wrong."""

    def __init__(self, kind: str, message: str, line: int | None = None):
        self.kind = kind
        self.reason = message
        self.line = line
        where = f" (line {line})" if line else ""
        super().__init__(f"{kind}: {message}{where}")


def load_json(text: str, kind: str):
    """json.loads, or a ParseError naming the line where the JSON stops (the refusal format of every kind)."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.split("\n")
        line = exc.lineno if text.strip() else None
        while line and line > 1 and (line > len(lines) or not lines[line - 1].strip()):
            line -= 1  # the JSON ends early: name the last line it has
        shown = lines[line - 1].strip()[:60] if line else ""
        hint = ("; the text form of the command? pass its kind without -json" if re.match(r"^GPU:\s*\d+", shown)
                else "; capture truncated or damaged?")
        raise ParseError(kind, f"expected JSON ({exc.msg} at column {exc.colno}){hint}", line) from None


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def split_capture(text: str) -> tuple[dict, str]:
    """Split a capture file into its `# key: value` header and the command output.

    Capture files (../shared/fixtures, bundles written by playbooks/collect.yml) begin with
    `# source:`, `# machine:`, `# command:`, `# exit status:` lines and one blank line. Raw
    output (no such header) is returned unchanged with an empty header.
    """
    lines = text.split("\n")
    meta: dict = {}
    i = 0
    while i < len(lines) and HEADER_RE.match(lines[i]):
        key, _, value = lines[i][2:].partition(":")
        meta[key.strip().lower().replace(" ", "_")] = value.strip()
        i += 1
    if i == 0:
        return {}, text
    if i < len(lines) and lines[i].strip() == "":
        i += 1
    if "exit_status" in meta:
        try:
            meta["exit_status"] = int(meta["exit_status"])
        except ValueError:
            pass
    return meta, "\n".join(lines[i:])


def strip_capture_header(text: str) -> str:
    return split_capture(text)[1]


def clean_lines(text: str) -> list[str]:
    """Lines without ANSI escapes, carriage returns or trailing blanks."""
    return [ln.rstrip() for ln in strip_ansi(text).replace("\r", "").split("\n")]


def nonblank_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, the line stripped) of every line of a capture that is not blank."""
    for n, raw in enumerate(clean_lines(text), 1):
        line = raw.strip()
        if line:
            yield n, line


def parse_cpulist(value: str, kind: str = "cpulist") -> list[int]:
    """'0-31,64-95' -> [0..31, 64..95]. Raises ParseError on anything else."""
    value = value.strip()
    if not value:
        return []
    cpus: list[int] = []
    for part in value.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ParseError(kind, f"bad CPU list {value!r} (part {part!r})")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise ParseError(kind, f"bad CPU range {part!r} in {value!r}")
        cpus.extend(range(lo, hi + 1))
    return cpus


def format_cpulist(cpus: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5'."""
    out: list[str] = []
    cpus = sorted(set(cpus))
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def grab(pattern: str, line: str) -> str | None:
    """The first group of ``pattern`` searched in ``line`` (a tool's banner), None where it is absent."""
    m = re.search(pattern, line)
    return m.group(1) if m else None


def na(value):
    """None for the many ways tools print 'no value'."""
    if value is None:
        return None
    v = str(value).strip()
    if v in ("", "N/A", "[N/A]", "n/a", "NA", "-", "[Not Supported]", "Not Supported", "[Unknown Error]"):
        return None
    return v


def _leading_number(value, kind: str, pattern: str, what: str, convert):
    """The number a value starts with ('350 W' -> 350), None for a 'no value' spelling (see na)."""
    v = na(value)
    if v is None:
        return None
    m = re.match(pattern, v)
    if not m:
        raise ParseError(kind, f"expected {what}, found {value!r}")
    return convert(m.group(1))


def to_int(value, kind: str = "value"):
    return _leading_number(value, kind, r"^(-?\d+)", "an integer", int)


def to_float(value, kind: str = "value"):
    return _leading_number(value, kind, r"^(-?\d+(?:\.\d+)?)", "a number", float)


def first_nonblank(lines: list[str]) -> int | None:
    for i, ln in enumerate(lines):
        if ln.strip():
            return i
    return None
