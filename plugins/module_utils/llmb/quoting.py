"""How a value is written into a file that systemd reads: the one place that quotes (stdlib, 3.9+).

Every renderer of a unit file or EnvironmentFile goes through here; a value that cannot be
written safely raises QuotingError (a ValueError) naming the service and the field, never an
output line that means something else.

- Exec lines (systemd.service(5) "Command lines", systemd.syntax(7) "Quoting"): an argument made
  only of [A-Za-z0-9-_./:=,+@] is written bare; any other is double-quoted with `\\` and `"`
  backslash-escaped. `%` is written `%%` (specifiers are expanded over the whole line before it
  is split) and `$` is written `$$` (no variable expansion at exec time), bare or quoted. A lone
  `;` is quoted, so it is an argument, not a command separator.
- EnvironmentFile lines (systemd.exec(5) "EnvironmentFile="): `NAME="value"`, NAME matching
  ^[A-Za-z_][A-Za-z0-9_]*$, the value double-quoted with `\\`, `"`, `$` and backtick
  backslash-escaped: systemd reads back exactly the value, and so would `sh` sourcing the file.
- Plain values (Description=, SyslogIdentifier=, EnvironmentFile= paths): `%` doubled; leading
  or trailing whitespace and a trailing backslash refused (systemd strips the first and reads
  the second as a line continuation).
- Everywhere: control characters (C0 incl. newline, CR, tab and NUL; DEL; C1), U+2028/U+2029
  (line breaks to Python's splitlines), U+FEFF, lone surrogates and Unicode noncharacters are
  refused: no quoting keeps a newline from ending a line of these files.

No shell quoting lives here on purpose: no shell string is built from a value (the TensorRT-LLM
container's `sh -c` script is constant and takes the mesh directory as "$1").
"""

from __future__ import annotations

import re
import string
from typing import Any

SAFE_BARE = frozenset(string.ascii_letters + string.digits + "-_./:=,+@")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# systemd unit names: [A-Za-z0-9:_.\\-] plus "@" for templates; we write neither "\\" nor "@".
UNIT_NAME = re.compile(r"[A-Za-z0-9_.:-]+\Z")
UNIT_NAME_MAX = 255 - len(".service")
_NAMED = {"\n": "newline", "\r": "carriage return", "\t": "tab", "\0": "NUL", "\x7f": "DEL"}


class QuotingError(ValueError):
    """A value that cannot be written into a unit or environment file."""


def bad_char(text: str) -> tuple[int, str] | None:
    """(offset, description) of the first character no line of a unit or env file may hold."""
    for i, c in enumerate(text):
        o = ord(c)
        if (
            o < 0x20
            or 0x7F <= o <= 0x9F
            or o in (0x2028, 0x2029, 0xFEFF)
            or 0xD800 <= o <= 0xDFFF
            or 0xFDD0 <= o <= 0xFDEF
            or (o & 0xFFFE) == 0xFFFE
        ):
            name = _NAMED.get(c, "control character" if o < 0xA0 else "character")
            return i, f"{name} U+{o:04X}"
    return None


def _text(value: Any, what: str) -> str:
    """value as text for `what`; numbers are written as numbers, other types refused."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuotingError(f"{what}: expected a string, found {type(value).__name__} {value!r}")
    text = str(value)
    bad = bad_char(text)
    if bad is not None:
        raise QuotingError(
            f"{what}: {bad[1]} at offset {bad[0]} of {text!r}; a unit or environment file line cannot "
            "hold it. Fix: remove it from the inventory value this came from"
        )
    return text


def systemd_word(arg: Any, what: str = "argument") -> str:
    """One argument of an Exec line, read back by systemd as exactly `arg`."""
    s = _text(arg, what).replace("%", "%%").replace("$", "$$")
    if s and all(c in SAFE_BARE for c in s):
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _normalized_absolute(path: str) -> bool:
    if not path.startswith("/") or path == "/" or path.endswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in path[1:].split("/"))


def systemd_exec(argv: Any, service: str = "?", field: str = "ExecStart") -> str:
    """The value of an Exec*= line that systemd splits back into exactly argv."""
    where = f"service {service}: {field}"
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)) or not argv:
        raise QuotingError(f"{where}: expected a non-empty argv list, found {argv!r}")
    words = [systemd_word(a, f"{where} argument {i}") for i, a in enumerate(argv)]
    if not _normalized_absolute(str(argv[0])):
        raise QuotingError(
            f"{where} argument 0: needs an absolute path to the program (normalized: no '//', '.', '..' "
            f"or trailing '/'), found {argv[0]!r}"
        )
    return " ".join(words)


def unit_value(value: Any, what: str) -> str:
    """A plain (unquoted) unit setting value: specifiers escaped, nothing systemd would strip."""
    s = _text(value, what)
    if s != s.strip(" ") or s.endswith("\\"):
        raise QuotingError(f"{what}: leading/trailing space or trailing backslash in {s!r}")
    return s.replace("%", "%%")


def unit_name(name: Any, what: str = "service name") -> str:
    """A unit name we write as <name>.service (also a file name under /etc)."""
    s = _text(name, what)
    if not UNIT_NAME.match(s) or s.startswith(".") or len(s) > UNIT_NAME_MAX:
        raise QuotingError(
            f"{what}: {s!r} is not a systemd unit name (expected 1-{UNIT_NAME_MAX} of A-Z a-z 0-9 _ . : -, "
            "not starting with '.')"
        )
    return s


def absolute_path(path: Any, what: str) -> str:
    s = unit_value(path, what)
    if not _normalized_absolute(s):
        raise QuotingError(f"{what}: expected a normalized absolute path, found {s!r}")
    return s


def env_assignment(key: Any, value: Any, service: str = "?") -> str:
    """One EnvironmentFile line NAME="value" that systemd (and sh) read back as exactly value."""
    where = f"service {service}: environment"
    k = _text(key, f"{where} variable name")
    if not ENV_NAME.match(k):
        raise QuotingError(
            f"{where} variable name {k!r}: expected ^[A-Za-z_][A-Za-z0-9_]*$ (letters, digits, '_', "
            "not starting with a digit)"
        )
    v = _text(value, f"{where} variable {k}")
    for c in '\\"$`':
        v = v.replace(c, "\\" + c)
    return f'{k}="{v}"'
