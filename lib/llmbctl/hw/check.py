"""Checked parsing: a capture's facts together with what could not be read (stdlib only).

    from llmbctl.hw.check import parse_checked
    res = parse_checked(text)                 # or parse_checked(text, kind="nvidia-smi-q")
    res.facts                                 # the parser's dict (None when the capture was refused)
    res.findings                              # [Finding.capture(severity, line, text, message)], capture line numbers
    res.ok                                    # facts and no error finding

parse() (llmb.hw.kinds) keeps its contract: the facts of one tool output or ParseError. parse_checked
adds what a capture pasted from a terminal or an issue tracker needs before its facts can be trusted:

- a UTF-8 byte order mark is removed (warning); bytes that were not UTF-8 (U+FFFD) are errors;
- terminal residue (ANSI colour codes, OSC window titles, other control characters, carriage
  returns; a \\r inside a line keeps what the terminal showed: the text after it) is removed (warning);
- a kind that does not match the content is refused, naming what the content looks like (error);
- a ParseError becomes an error finding on the capture line it names;
- the parser's own warnings become warning findings;
- counts that disagree with the capture's own header and captures cut mid-way are errors
  (downgraded to warnings when the capture header says `[fidelity: EXCERPT ...]`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from llmb.finding import ERROR, WARNING, Finding
from llmb.hw._matrix import DEVICE_RE, read_first_matrix
from llmb.hw._text import ANSI_RE, BOM, ParseError, split_capture
from llmb.hw.kinds import KINDS, detect_content, detect_kind

_SHOWN = 120  # characters of a capture line quoted in a finding


@dataclass
class ParseResult:
    kind: str | None
    facts: dict | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def ok(self) -> bool:
        """Facts were read and nothing makes them incomplete or wrong (warnings allowed)."""
        return self.facts is not None and not self.errors

    @property
    def clean(self) -> bool:
        """ok, and not even a warning."""
        return self.ok and not self.findings


# Kinds the content alone cannot tell apart in every case (`nvidia-smi nvlink -c` and `-s` on GPUs with no
# NVLink print the same GPU lines); each parser refuses the other's link lines itself.
_SAME_LOOK = [{"nvidia-smi-nvlink", "nvidia-smi-nvlink-caps"}]


def _mismatch(kind: str, looks: str | None) -> bool:
    return looks is not None and looks != kind and not any({kind, looks} <= group for group in _SAME_LOOK)


def decode_capture(data: bytes) -> tuple[str, list[Finding]]:
    """Text of a capture file; bytes that are not UTF-8 are replaced and reported (error, with the line)."""
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        text = data.decode("utf-8", errors="replace")
        shown = text.split("\n")[line - 1][:_SHOWN]
        return text, [Finding.capture(ERROR, line, shown, f"bytes that are not UTF-8 ({data[exc.start:exc.end]!r}; damaged capture?)")]


class _Capture:
    """Line bookkeeping of one capture: body line numbers -> capture line numbers and their text."""

    def __init__(self, text: str, offset: int, body_lines: list[str], command: str):
        self.raw = text.split("\n")
        self.offset = offset
        self.lines = body_lines  # sanitized body lines (what the parser saw), without trailing blanks
        self.command = command
        self.excerpt = bool(re.search(r"\[fidelity:[^\]]*EXCERPT", command, re.I))
        self.elided = bool(re.search(r"\[fidelity:[^\]]*ELIDED", command, re.I))
        self.findings: list[Finding] = []

    def text_of(self, body_line: int | None) -> str:
        if not body_line or not 0 < body_line + self.offset <= len(self.raw):
            return ""
        return ANSI_RE.sub("", self.raw[body_line + self.offset - 1]).replace("\r", "").strip()[:_SHOWN]

    def add(self, severity: str, body_line: int | None, message: str) -> None:
        line = body_line + self.offset if body_line else None
        self.findings.append(Finding.capture(severity, line, self.text_of(body_line), message))

    def cut(self, body_line: int | None, message: str) -> None:
        """A capture cut short: an error, a warning when the capture says it is an excerpt."""
        self.add(WARNING if self.excerpt else ERROR, body_line, message + ("" if self.excerpt else " (capture truncated?)"))

    def last_line(self) -> int | None:
        return next((i + 1 for i in range(len(self.lines) - 1, -1, -1) if self.lines[i].strip()), None)

    def find(self, pattern: str, start: int = 1, end: int | None = None) -> int | None:
        rx = re.compile(pattern)
        for n in range(start, (end or len(self.lines)) + 1):
            if n - 1 < len(self.lines) and rx.search(self.lines[n - 1]):
                return n
        return None


def _sanitize(cap_text: str, findings: list[Finding]) -> str:
    """The capture without terminal residue, line for line (line numbers do not change)."""
    out = []
    residue_at = cr_at = None
    for n, ln in enumerate(cap_text.split("\n"), 1):
        if ln.endswith("\r"):
            ln = ln[:-1]
            cr_at = cr_at or n
        if "\r" in ln:
            ln = ln.rsplit("\r", 1)[1]  # what the terminal showed: the text after the last carriage return
            cr_at = cr_at or n
        if ANSI_RE.search(ln):
            ln = ANSI_RE.sub("", ln)
            residue_at = residue_at or n
        out.append(ln)
    for at, what in ((residue_at, "terminal escape sequences / control characters removed"),
                     (cr_at, "carriage returns removed")):
        if at:
            findings.append(Finding.capture(WARNING, at, out[at - 1].strip()[:_SHOWN], what + " (first on this line)"))
    return "\n".join(out)


def _replacement_chars(lines: list[str], offset: int, findings: list[Finding]) -> None:
    for n, ln in enumerate(lines, 1):
        if "\ufffd" in ln:
            findings.append(Finding.capture(ERROR, n + offset, ln.strip()[:_SHOWN],
                                    "U+FFFD replacement character: bytes that were not UTF-8 (damaged capture?)"))
            break


def _header_lines(text: str, body: str, meta: dict) -> int:
    return text.count("\n") - body.count("\n") if meta else 0


def parse_checked(text: str, kind: str | None = None, command: str | None = None, **kwargs) -> ParseResult:
    """Parse one capture; never raises on its content (findings say what is wrong)."""
    findings: list[Finding] = []
    if text.startswith(BOM):
        text = text[len(BOM):]
        findings.append(Finding.capture(WARNING, 1, text.split("\n", 1)[0].strip()[:_SHOWN], "UTF-8 byte order mark removed"))
    text = _sanitize(text, findings)
    meta, body = split_capture(text)
    offset = _header_lines(text, body, meta)
    _replacement_chars(body.split("\n"), offset, findings)
    header_cmd = meta.get("command", "")
    cap = _Capture(text, offset, body.split("\n"), command if command is not None else header_cmd)
    cap.findings = findings
    first = next((i + 1 for i, ln in enumerate(cap.lines) if ln.strip()), None)
    looks = detect_content(body)
    given = kind is not None
    if given:
        if kind not in KINDS:
            cap.add(ERROR, None, f"unknown kind {kind!r}; known kinds: {', '.join(sorted(KINDS))}")
            return ParseResult(kind, None, cap.findings)
    else:
        try:
            kind = detect_kind(text)
        except ParseError as exc:
            cap.add(ERROR, first, exc.reason)
            return ParseResult(None, None, cap.findings)
    if _mismatch(kind, looks):
        seen = f"{KINDS[looks][1]} ({looks})"
        why = (f"expected {kind} output, found what looks like {seen}; pass --kind {looks} or leave --kind out"
               if given else f"the capture header names `{header_cmd}` ({kind}) but the output looks like {seen}")
        cap.add(ERROR, first, why)
        return ParseResult(kind, None, cap.findings)
    try:
        facts = KINDS[kind][0](body, **kwargs)
    except ParseError as exc:
        cap.add(ERROR, exc.line, exc.reason)
        return ParseResult(kind, None, cap.findings)
    for w in facts.get("warnings") or []:
        m = re.match(r"^line (\d+): (.*)$", w)
        if m:
            cap.add(WARNING, int(m.group(1)), m.group(2))
        else:
            cap.add(WARNING, None, w)
    # Tool failures are findings: a line the tool printed when it failed (ibstat's `ibpanic:`, hccn_tool's
    # `... failed`) is an error, never a field of the record before it; an author's `...` is an elision:
    # an error (devices left out), a warning where the capture header says [fidelity: ELIDED/EXCERPT].
    for e in facts.get("tool_errors") or []:
        cap.add(ERROR, e.get("line"), f"the tool reported a failure: {e['text']}")
    for ln in facts.get("elisions") or []:
        sev = WARNING if (cap.elided or cap.excerpt) else ERROR
        cap.add(sev, ln, "'...' elision: the output was cut by hand here, what it left out is not checked")
    check = _CHECKS.get(kind)
    if check is not None:
        check(cap, facts)
    return ParseResult(kind, facts, cap.findings)


# --------------------------------------------------------------------------- per-kind consistency


def _opt(command: str, *flags: str) -> bool:
    return any(re.search(rf"(^|\s){re.escape(f)}(=|\s|$)", command) for f in flags)


def _check_smi_q(cap: _Capture, facts: dict) -> None:
    sections = [n for n, ln in enumerate(cap.lines, 1) if re.match(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", ln)]
    att = cap.find(r"^Attached GPUs\s*:")
    attached = facts.get("attached_gpus")
    selected = _opt(cap.command, "-i", "--id")
    if att is None or attached is None:
        cap.cut(att or cap.last_line(), "no 'Attached GPUs' count: the output ends before it")
    elif attached is not None and (len(sections) != attached if not selected else not sections and attached):
        cap.cut(att, f"'Attached GPUs : {attached}' but {len(sections)} GPU section(s) follow")
    if _opt(cap.command, "-d", "--display"):
        return
    for k, start in enumerate(sections):
        end = (sections[k + 1] - 1) if k + 1 < len(sections) else len(cap.lines)
        if cap.find(r"^ {2,8}Processes(\s*:|\s*$)", start, end) is None:
            last = next((n for n in range(end, start - 1, -1) if cap.lines[n - 1].strip()), start)
            cap.cut(last, f"{cap.lines[start - 1].strip()}: the section ends before its 'Processes' entry")


def _check_smi_xml(cap: _Capture, facts: dict) -> None:
    attached = facts.get("attached_gpus")
    if attached is not None and not _opt(cap.command, "-i", "--id") and attached != len(facts["gpus"]):
        cap.cut(cap.find(r"<attached_gpus>"), f"<attached_gpus>{attached}</attached_gpus> but {len(facts['gpus'])} <gpu> elements")


_BORDER = r"^\+[-=+]+\+$"


def _check_smi_table(cap: _Capture, facts: dict) -> None:
    if not facts.get("gpus"):
        return
    last = cap.last_line()
    if not re.match(_BORDER, cap.lines[last - 1].strip()):
        cap.cut(last, "the output ends inside a table (the last line is not a +---+ border)")
    elif cap.find(r"Processes:") is None:
        cap.cut(last, "the output ends before the Processes table")


def _check_npu_smi(cap: _Capture, facts: dict) -> None:
    last = cap.last_line()
    if not re.match(_BORDER, cap.lines[last - 1].strip()):
        cap.cut(last, "the output ends inside a table (the last line is not a +---+ border)")
        return
    counts = Counter(n["npu"] for n in facts["npus"])
    procs = cap.find(r"^\|\s*NPU\s+Chip\s*\|\s*Process id")
    if procs is None:
        # The output ends after the NPU table: a last NPU with fewer chips than the others was cut
        # (a chip missing in the middle is the machine's state, for device.count to report).
        last_card = facts["npus"][-1]["npu"]
        if counts[last_card] < max(counts.values()):
            row = max(n for n in range(1, len(cap.lines) + 1) if re.match(rf"^\|\s*{last_card}\s+\S", cap.lines[n - 1]))
            cap.cut(row, f"NPU {last_card} lists {counts[last_card]} chip(s), other NPUs {max(counts.values())}")
        cap.add(WARNING, last, "no process table after the NPU table (npu-smi info prints one: capture cut at a card"
                               " border, or pasted without it?)")
        return
    seen = {p["npu"] for p in facts["processes"]}
    seen |= {int(m.group(1)) for ln in cap.lines for m in [re.search(r"No running processes found in NPU (\d+)", ln)] if m}
    missing = sorted(set(counts) - seen)
    if missing:
        cap.cut(last, f"the process table ends before NPU {missing[0]} ({len(missing)} of {len(counts)} NPUs missing)")


def _check_matrix(cap: _Capture, facts: dict, label_ok) -> None:
    try:
        _lines, _start, columns, _aff, rows, _end = read_first_matrix("\n".join(cap.lines), facts["kind"], "", label_ok)
    except ParseError:
        return
    names = [r[0] for r in rows]
    last = rows[-1][3] if rows else None
    # Device rows carry the same number of values after the matrix; fewer in one row means two of its
    # cells were fused by a lost tab (a clipped terminal copy clips every row alike).
    dev_rows = [r for r in rows if re.match(r"^(GPU|NPU|Phy-ID)\d+$", r[0])]
    most = max((len(r[2]) for r in dev_rows), default=0)
    for name, _cells, extras, ln in dev_rows:
        if len(extras) < most:
            cap.add(ERROR, ln, f"row {name} has {len(extras)} values after the matrix, other rows {most}"
                               " (cells fused by a lost tab?)")
            break
    if last is not None and not any(re.match(r"^\s*Legend:?\s*$", ln) for ln in cap.lines[last:]):
        cap.add(WARNING, last, "no Legend after the matrix (pasted without it, or the capture was cut here)")
    for col in columns:
        if col not in names and DEVICE_RE.match(col):
            cap.cut(last, f"matrix column {col} has no row (header names {len(columns)} columns, {len(rows)} rows follow)")
            break


def _check_topo(cap: _Capture, facts: dict) -> None:
    from llmb.hw.nvidia import TOPO_LABEL_RE

    _check_matrix(cap, facts, lambda c: bool(TOPO_LABEL_RE.match(c)))


def _check_p2p(cap: _Capture, facts: dict) -> None:
    from llmb.hw.nvidia import P2P_LABEL_RE

    _check_matrix(cap, facts, lambda c: bool(P2P_LABEL_RE.match(c)))


def _check_links(cap: _Capture, facts: dict) -> None:
    gpus = facts.get("gpus") or []
    if len(gpus) < 2:
        return
    counts = [len(g["links"]) for g in gpus]
    if counts[-1] < max(counts[:-1]):
        g = gpus[-1]
        cap.cut(cap.last_line(), f"GPU {g['index']} lists {counts[-1]} links, GPU {gpus[0]['index']} {counts[0]}")
    if facts["kind"] == "nvidia-smi-nvlink-caps":
        caps = [len(link["caps"]) for g in gpus for link in g["links"]]
        if caps and caps[-1] < max(caps):
            cap.cut(cap.last_line(), f"the last link lists {caps[-1]} capabilities, others {max(caps)}")


def _check_npu_topo(cap: _Capture, facts: dict) -> None:
    from llmb.hw.ascend import NPU_TOPO_LABEL_RE

    _check_matrix(cap, facts, lambda c: bool(NPU_TOPO_LABEL_RE.match(c)))


def _check_numactl(cap: _Capture, facts: dict) -> None:
    # numactl prints 10 for a node's distance to itself; another value on the diagonal of the last row
    # is a number cut short at the end of the capture.
    for i, row in enumerate(facts.get("distances") or []):
        if i < len(row) and row[i] != 10:
            rows = [n for n in range(1, len(cap.lines) + 1) if re.match(rf"^\s*{i}:", cap.lines[n - 1])]
            cap.cut(rows[-1] if rows else None, f"distance of node {i} to itself is {row[i]}, numactl prints 10")
            break


_CHECKS = {
    "nvidia-smi-q": _check_smi_q,
    "nvidia-smi-q-xml": _check_smi_xml,
    "nvidia-smi": _check_smi_table,
    "npu-smi-info": _check_npu_smi,
    "nvidia-smi-topo": _check_topo,
    "nvidia-smi-topo-p2p": _check_p2p,
    "npu-smi-topo": _check_npu_topo,
    "numactl": _check_numactl,
    "nvidia-smi-nvlink": _check_links,
    "nvidia-smi-nvlink-caps": _check_links,
}
