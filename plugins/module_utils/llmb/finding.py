"""One finding: what was checked, on which host, what was expected, what was found, and the fix.

The planner's refusals (llmbctl.planner.model.Problem is this type), verify's checks (llmbctl.verify)
and the hardware parsers' findings in a capture (llmbctl.hw.check: ``Finding.capture``) are all
``Finding``; this module is also their one renderer:

    f = Finding("device.count", expected="8 devices", found="2 devices", fix="reseat the board", host="n1")
    f.render()          # 'n1: device.count: expected 8 devices, found 2 devices. reseat the board'
    f.block(1)          # the planner's numbered block: '1. [device.count] (host n1) ...' + found/expected/fix lines
    f.check_record()    # verify's JSON:   {"id", "ok", "expected", "found", "hint"} (+ "skipped" / "waived")
    f.problem_record()  # the planner's:   {"check", "message", "found", "expected", "fix", "host"}
    f.as_dict()         # a parser's:      {"severity", "line", "text", "message"}
    Finding.from_record(d, host=...)       # any of the three back (a report reading a JSON file)

The three records are the JSON contracts the report, the roles and deployment.json read (docs/verify.md,
docs/launch-plan.md): the same fields under the names their readers know ("hint" is the fix of a check,
"check" the id of a problem). Standard library only: parsers run on the nodes. Ansible tasks render a
finding through the filter ``llmb_finding_line`` (plugins/filter/llmb_finding.py).
"""

from __future__ import annotations

from typing import Any

ERROR = "error"
WARNING = "warning"


class Finding:
    """One thing checked and found wrong (or, for a verify check, found right: ``ok``).

    id: what was checked ("device.count", "parallelism"; the planner calls it ``check``); host: where,
    None for the whole inventory or a capture file; expected / found: the two sides; fix: what to do;
    message: a sentence saying what is wrong where expected / found alone do not (the planner's and the
    parsers' findings). Parser findings add severity ("error": the facts are refused, "warning": usable),
    line (1-based line of the capture file, None for the whole capture) and text (that line, shortened).
    Verify checks add ok, skipped (not run, with the reason in found) and waived (failed, accepted).
    """

    __slots__ = ("id", "message", "found", "expected", "fix", "host", "ok", "severity", "line", "text",
                 "skipped", "waived")

    def __init__(self, id: str = "", message: str = "", found: Any = None, expected: Any = None,  # noqa: A002
                 fix: str = "", host: str | None = None, *, check: str | None = None, ok: bool = False,
                 severity: str = ERROR, line: int | None = None, text: str = "", skipped: bool = False,
                 waived: bool = False):
        self.id = check if check is not None else id
        self.message = message
        self.found = found
        self.expected = expected
        self.fix = fix
        self.host = host
        self.ok = bool(ok)
        self.severity = severity
        self.line = line
        self.text = text
        self.skipped = skipped
        self.waived = waived

    @classmethod
    def capture(cls, severity: str, line: int | None, text: str, message: str) -> Finding:
        """A parser's finding in a capture: severity, the capture line (None: the whole capture), that
        line's text ("" when none) and what is wrong."""
        return cls(message=message, severity=severity, line=line, text=text)

    @property
    def check(self) -> str:
        """The planner's name for id."""
        return self.id

    def _key(self) -> tuple:
        return tuple(getattr(self, s) for s in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Finding) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(tuple(str(v) for v in self._key()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__ if getattr(self, s) not in (None, "", False))
        return f"Finding({shown})"

    # ------------------------------------------------------------------ the one text form

    def render(self) -> str:
        """One line (the console, an Ansible task's msg, a capture's finding after its FILE:LINE):

        ``host: id: message; expected E, found F. fix``, each part only where the finding has it; a
        parser's finding reads ``line N: message: 'text'`` (its file or probe goes before it)."""
        head = "".join(f"{x}: " for x in (self.host, self.id) if x)
        if self.line:
            head += f"line {self.line}: "
        body = self.message + (f": {self.text!r}" if self.text else "")
        if self.expected is not None or self.found is not None:
            sides = f"expected {self.expected}, found {self.found}."
            body = f"{body}; {sides}" if body else sides
        if self.fix:
            body += (" " if body.endswith(".") else ". " if body else "") + self.fix
        return head + body

    __str__ = render

    def block(self, index: int | None = None) -> str:
        """The numbered block of a list of refusals (launch-plan, stage 0): a head line, then found,
        expected and fix each on its own line."""
        head = f"{index}. " if index is not None else ""
        pad = " " * len(head)
        return "\n".join([head + self.title()] + [f"{pad}   {k + ':':<9} {v}" for k, v in self.details()])

    def title(self) -> str:
        """The head line of the block: ``[id] (host H) message``."""
        where = f" (host {self.host})" if self.host else ""
        return f"[{self.id}]{where} {self.message}"

    def details(self) -> list[tuple[str, Any]]:
        """The block's other lines: (found / expected / fix, value), those the finding has."""
        return [(k, v) for k, v in (("found", self.found), ("expected", self.expected), ("fix", self.fix))
                if v is not None and v != ""]

    def format(self, index: int | None = None) -> str:
        """The block form (the planner's ``Problem.format``)."""
        return self.block(index)

    # ------------------------------------------------------------------ the JSON records

    def check_record(self) -> dict[str, Any]:
        """Verify's record of a check: {"id", "ok", "expected", "found", "hint"} ("hint": the fix of a
        failed check, "" for one that passed), "skipped": true for a check not run, "waived": true for a
        failed one accepted."""
        out: dict[str, Any] = {"id": self.id, "ok": self.ok}
        if self.skipped:
            out["skipped"] = True
        out.update({"expected": str(self.expected), "found": str(self.found), "hint": "" if self.ok else self.fix})
        if self.waived:
            out["waived"] = True
        return out

    def problem_record(self) -> dict[str, Any]:
        """The planner's record of a refusal (deployment.json's problems and pins.problems)."""
        return {"check": self.id, "message": self.message, "found": self.found, "expected": self.expected,
                "fix": self.fix, "host": self.host}

    to_dict = problem_record

    def as_dict(self) -> dict[str, Any]:
        """A parser's record of a capture finding."""
        return {"severity": self.severity, "line": self.line, "text": self.text, "message": self.message}

    @classmethod
    def from_record(cls, rec: dict, host: str | None = None) -> Finding:
        """A Finding from any of the three records (a check record carries no host: pass it)."""
        if "check" in rec:
            return cls(rec.get("check") or "", rec.get("message") or "", rec.get("found"), rec.get("expected"),
                       rec.get("fix") or "", rec.get("host", host))
        if "severity" in rec:
            return cls("", rec.get("message") or "", severity=rec["severity"], line=rec.get("line"),
                       text=rec.get("text") or "", host=host)
        return cls(rec.get("id") or "", rec.get("message") or "", rec.get("found"), rec.get("expected"), rec.get("hint") or rec.get("fix") or "",
                   rec.get("host", host), ok=bool(rec.get("ok")), skipped=bool(rec.get("skipped")),
                   waived=bool(rec.get("waived")))


def check(cid: str, ok: Any, expected: Any, found: Any, fix: str = "") -> dict[str, Any]:
    """Verify's record of a check that was run: passed when ``ok``."""
    return Finding(cid, expected=expected, found=found, fix=fix, ok=bool(ok)).check_record()


def skipped(cid: str, expected: Any, reason: str) -> dict[str, Any]:
    """Verify's record of a check that was not run, and why (it counts as passed)."""
    return Finding(cid, expected=expected, found=reason, ok=True, skipped=True).check_record()


def lines(records: list[dict], host: str | None = None) -> list[str]:
    """The line of every failed record (check, problem or parser records) of one host."""
    out = []
    for rec in records:
        f = rec if isinstance(rec, Finding) else Finding.from_record(rec, host)
        if not f.ok:
            out.append(f.render())
    return out
