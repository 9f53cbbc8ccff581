"""One inventory variable's value checked against its knob: the ``Knob`` type, the formats of string
values, ``check_value`` (type, range, format, control characters) and the helpers that show a value
(``shown``, ``type_name``) or read it plainly (``plain``, ``Vaulted``)."""

from __future__ import annotations

import datetime
import ipaddress
import math
import posixpath
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from .model import Problem

PARALLEL_MAX = 65536  # devices in one deployment: 8,192 nodes of 8
TIMEOUT_MAX = 7 * 86400
VAULT_FIX = (
    "give the vault password: scripts/launch-plan --vault-password-file FILE (or --vault-id ID@FILE, "
    "or ANSIBLE_VAULT_PASSWORD_FILE), ansible-playbook --vault-password-file FILE"
)


@dataclass(frozen=True)
class Knob:
    name: str
    type: str  # str | int | float | bool | list | dict | any
    default: Any
    doc: str
    choices: tuple[str, ...] | Any = None  # or a function returning them (read through .allowed)
    required: bool = False
    nullable: bool = True
    per_host: bool = False
    min: float | None = None
    max: float | None = None
    format: str | None = None  # a key of FORMATS, for str values
    elements: str | None = None  # list: "str" | "scalar" | "int" | "dict" | a key of FORMATS
    keys: str | None = None  # dict: a key of FORMATS its keys must match
    values: str | None = None  # dict: "scalar" (str, number, bool or null)
    stage: str = "serve"  # serve (the planner's), run (toolkit-wide), or the role that declares it
    needs_plain: bool = True  # the planner reads the plain value (a vaulted one needs the password)
    schema: Any = None  # a function(name, value) -> problems of a nested value (after the type check)

    @property
    def allowed(self) -> tuple[str, ...] | None:
        return tuple(self.choices()) if callable(self.choices) else self.choices


class Vaulted:
    """A vault-encrypted value whose secret was not given (or did not open it): opaque, never shown.

    ``token`` tells equal ciphertexts apart from different ones (for the cross-host comparison);
    ``error`` is set when a secret was given but could not decrypt the value.
    """

    __slots__ = ("error", "token")

    def __init__(self, token: str = "", error: str | None = None):
        self.token = token
        self.error = error

    def __repr__(self) -> str:
        return "<vaulted>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vaulted) and bool(self.token) and self.token == other.token

    def __hash__(self) -> int:
        return hash(self.token)


# formats of string values ------------------------------------------------------------------
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*\Z")
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/+@%=,~-]+\Z")
_IFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}\Z")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
_CONTAINER = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*\Z")
_FLAG_NAME = re.compile(r"-{0,2}[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN = re.compile(r"\S+\Z")
_IB_DEVICE = re.compile(r"[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64}){0,63}\Z")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")


def is_path(value: str) -> bool:
    """Absolute, normalized (no '.', '..' or empty segments), of safe characters."""
    if not value.startswith("/") or not _PATH_CHARS.match(value):
        return False
    body = value.rstrip("/") or "/"
    return posixpath.normpath(body) == body and ".." not in body.split("/") and "." not in body.split("/")


def is_address(value: str) -> bool:
    """An IPv4/IPv6 literal or an RFC 1123 host name."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    if not value or len(value) > 253:
        return False
    labels = value[:-1].split(".") if value.endswith(".") else value.split(".")
    return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()


def is_served_name(value: str) -> bool:
    if not value or value.startswith("/") or any(c.isspace() for c in value):
        return False
    return not any(seg in ("", ".", "..") for seg in value.split("/"))


FORMATS: dict[str, tuple[Any, str]] = {
    "name": (
        lambda v: bool(_NAME.match(v)) and ".." not in v,
        "a name of letters, digits, '.', '_' and '-' (a file name under data/)",
    ),
    "version": (
        lambda v: bool(_VERSION.match(v)),
        "a release like 0.19.1 (letters, digits, '.', '+', '_', '-')",
    ),
    "path": (
        is_path,
        "an absolute, normalized path (no '.' or '..' segments, no '//') of letters, digits and ._/+@%=,~-",
    ),
    "address": (is_address, "an IP address or an RFC 1123 host name"),
    "iface": (lambda v: bool(_IFACE.match(v)), "a network interface name (1-15 of letters, digits, ._:@-)"),
    "image": (lambda v: bool(_IMAGE.match(v)), "an image reference like registry/repo:tag (no spaces)"),
    "container_name": (
        lambda v: bool(_CONTAINER.match(v)),
        "a Docker container name: [a-zA-Z0-9][a-zA-Z0-9_.-]*",
    ),
    "served_name": (
        is_served_name,
        "a model name without whitespace, leading '/' or '.'/'..' segments (e.g. kimi-k2 or org/model)",
    ),
    "flag_name": (lambda v: bool(_FLAG_NAME.match(v)), "a flag name like max-model-len or --max-model-len"),
    "env_key": (lambda v: bool(_ENV_KEY.match(v)), "an environment variable name: ^[A-Za-z_][A-Za-z0-9_]*$"),
    "token": (lambda v: bool(_TOKEN.match(v)), "one word without spaces"),
    "ib_device": (lambda v: bool(_IB_DEVICE.match(v)), "RDMA device names like mlx5_0 or mlx5_0,mlx5_1"),
}

_ARTICLE = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "a mapping",
    "any": "a value",
    "scalar": "a string or a number",
}


def _article(kind: str) -> str:
    return _ARTICLE.get(kind, "a string")


def _expected(knob: Knob) -> str:
    if knob.allowed:
        return " | ".join(knob.allowed)
    text = _article(knob.type)
    if knob.min is not None or knob.max is not None:
        text += f" from {_num(knob.min)} to {_num(knob.max)}" if knob.max is not None else f" >= {knob.min}"
    if knob.format:
        text += ": " + FORMATS[knob.format][1]
    return text


def _num(x: float | None) -> str:
    return "" if x is None else (str(int(x)) if float(x).is_integer() else str(x))


def type_name(value: Any) -> str:
    """The plain YAML type of a value, for messages (never an internal class name)."""
    if value is None:
        return "null"
    if isinstance(value, Vaulted):
        return "vaulted"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "date"
    return "unsupported value"


def shown(value: Any, limit: int = 80) -> str:
    """A value as a message shows it: repr (control characters escaped), shortened, vault opaque."""
    if isinstance(value, Vaulted):
        return "<vaulted>"
    try:
        text = repr(plain(value))
    except Exception:  # a value that cannot even be shown is named by its type
        text = f"<{type_name(value)}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plain(value: Any, vault: Any = None) -> Any:
    """Ansible hands over tagged str/int/float and lazy containers; turn them into plain Python.

    The one converter of inventory values (the planner, the deployment and scripts/launch-plan).
    ``vault``: what to make of a vault-encrypted value (scripts/launch-plan passes its own, which
    decrypts it when a secret was given, else gives a ``Vaulted``); without it the value is left to
    Ansible (stage 0 reads decrypted values)."""
    if value is None or isinstance(value, Vaulted):
        return value
    if vault is not None and (
        type(value).__name__ == "EncryptedString" or (isinstance(value, dict) and set(value) == {"__ansible_vault"})
    ):
        return vault(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {(k if isinstance(k, Vaulted) else str(k)): plain(v, vault) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, vault) for v in value]
    return value




def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _bad_char(text: str) -> str | None:
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return ch
    return None


_CHAR_NAMES = {"\n": "line feed", "\r": "carriage return", "\t": "tab", "\x1b": "escape", "\x7f": "delete",
               "\x00": "NUL", "\u2028": "line separator", "\u2029": "paragraph separator"}


def _char_name(ch: str) -> str:
    return f"{_CHAR_NAMES.get(ch, 'control character')}, U+{ord(ch):04X}"


def _walk_strings(value: Any, where: str) -> list[tuple[str, str, Any]]:
    """(where, problem kind, offending value) for control characters and non-finite numbers, nested."""
    out: list[tuple[str, str, Any]] = []
    if isinstance(value, str):
        if _bad_char(value) is not None:
            out.append((where, "control", value))
    elif isinstance(value, float) and not math.isfinite(value):
        out.append((where, "finite", value))
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and _bad_char(k) is not None:
                out.append((f"{where} key {k!r}", "control", k))
            out.extend(_walk_strings(v, f"{where}[{k!r}]"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_walk_strings(v, f"{where}[{i}]"))
    return out


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "any":
        return True
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "scalar":
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


_TRUE = ("true", "yes", "on", "y", "t", "1")
_FALSE = ("false", "no", "off", "n", "f", "0")


def _role_coerce(kind: str, value: Any) -> Any:
    """A variable's string as a role's argument_spec takes it: Ansible converts '20' to an int,
    '0.5' to a float and 'yes' to a bool (what `-e key=value` always gives, for the llmb_* knobs as
    for the stage variables); anything else is left for the type check to refuse, naming the
    variable."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if kind == "int" and re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if kind == "float":
        try:
            number = float(text)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    if kind == "bool" and text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    return value


def check_value(knob: Knob, value: Any) -> list[Problem]:
    """Every problem of one plain value of one variable (type, finiteness, range, choices, format)."""
    name = knob.name
    if isinstance(value, Vaulted):
        if value.error:
            return [
                Problem(
                    check="vault",
                    message=f"{name} is vaulted and the vault secret given does not open it ({value.error})",
                    found="<vaulted>",
                    expected="the vault password the value was encrypted with",
                    fix=VAULT_FIX,
                )
            ]
        if knob.needs_plain and knob.stage == "serve":
            return [
                Problem(
                    check="vault",
                    message=f"{name} is vaulted and no vault secret was given; "
                    "the planner needs its plain value",
                    found="<vaulted>",
                    expected="a vault secret, or the value unencrypted",
                    fix=VAULT_FIX,
                )
            ]
        return []  # opaque: a vaulted string is a string
    if is_template(value) and knob.stage != "serve":
        return []  # Ansible templates stage variables at run time; the role's argument_spec checks them
    problems: list[Problem] = []
    for where, kind, bad in _walk_strings(value, name):
        if kind == "control":
            ch = _bad_char(bad) or ""
            problems.append(
                Problem(
                    check="characters",
                    message=f"{where} contains the control character {ch!r} "
                    f"({_char_name(ch)}); a line break would start a new line in a "
                    "systemd unit, EnvironmentFile or shell command",
                    found=shown(bad),
                    expected="text without control characters (no newline, tab, carriage return, escape...)",
                    fix=f"remove the control character from {where}",
                )
            )
        else:
            problems.append(
                Problem(
                    check="range",
                    message=f"{where} is {bad}, not a finite number",
                    found=shown(bad),
                    expected="a finite number",
                    fix=f"give {where} a plain number",
                )
            )
    if problems:
        return problems
    if "." not in name:  # `-e key=value` gives a top-level variable as text: converted as the roles' specs do
        value = _role_coerce(knob.type, value)
    if not _type_ok(knob.type, value):
        hint = ""
        if knob.type in ("int", "float") and isinstance(value, str):
            hint = f" ({shown(value)} does not convert to {_article(knob.type)}"
            hint += "; scripts/launch-plan reads literal values, no Jinja)" if is_template(value) else ")"
        return [_wrong_type(f"{name} must be {_article(knob.type)} ({knob.doc})", value, _expected(knob),
                            f"give {name} {_article(knob.type)} value{hint}")]
    if knob.type == "float" and not math.isfinite(value):
        return [Problem("range", f"{name} must be a finite number", found=shown(value), fix=f"set {name}")]
    if knob.type in ("int", "float") and (
        (knob.min is not None and value < knob.min) or (knob.max is not None and value > knob.max)
    ):
        unset = ""
        if value == 0 and knob.default is None:
            unset = f"; 0 is not 'unset': leave {name} out for the default"
        return [
            Problem(
                check="range",
                message=f"{name} is {value}, out of range{unset} ({knob.doc})",
                found=value,
                expected=_expected(knob),
                fix=f"set {name} to {_expected(knob)}",
            )
        ]
    if knob.allowed and value not in knob.allowed:
        return [
            Problem(
                check="choice",
                message=f"{name} has an unknown value",
                found=shown(value),
                expected=" | ".join(knob.allowed),
                fix=f"set {name} to one of {', '.join(knob.allowed)}",
            )
        ]
    if knob.format and isinstance(value, str):
        ok, text = FORMATS[knob.format]
        if not ok(value):
            problems.append(_bad_format(f"{name} is not {text}", shown(value), text, f"set {name} to {text}"))
    if knob.type == "list" and knob.elements:
        for i, item in enumerate(value):
            problems.extend(_check_item(f"{name}[{i}]", knob.elements, item))
    if knob.type == "dict":
        for key, item in value.items():
            if knob.keys and not (isinstance(key, str) and FORMATS[knob.keys][0](key)):
                text = FORMATS[knob.keys][1]
                problems.append(_bad_format(f"{name} has the key {shown(key)}, which is not {text}", shown(key),
                                            text, f"rename the key {shown(key)} of {name}"))
            if knob.values == "scalar" and item is not None and not _type_ok("scalar", item):
                if not isinstance(item, bool):
                    problems.append(_wrong_type(
                        f"{name}[{key!r}] must be a string or a number", item,
                        "a string, a number, true/false, or null (removes a default)",
                        f"write {name}[{key!r}] as one value, e.g. quoted text"))
    if knob.schema is not None and not problems:
        problems.extend(knob.schema(name, value))
    return problems


def _check_item(where: str, kind: str, item: Any) -> list[Problem]:
    if kind in FORMATS:
        ok, text = FORMATS[kind]
        if not isinstance(item, str):
            return [_wrong_type(f"{where} must be a string", item, text, f"write {where} as one string")]
        if not ok(item):
            return [_bad_format(f"{where} is not {text}", shown(item), text, f"write {where} as {text}")]
        return []
    if not _type_ok(kind, item):
        argv = " (one argv token; a list or mapping would reach argv as Python text)" if kind == "scalar" else ""
        return [_wrong_type(f"{where} must be {_article(kind)}", item, _article(kind),
                            f"write {where} as {_article(kind)}{argv}")]
    return []


def _wrong_type(message: str, value: Any, expected: Any, fix: str) -> Problem:
    """check ``type``: ``value`` (found: shown with its YAML type) is not what the knob takes."""
    return Problem("type", message, found=f"{shown(value)} ({type_name(value)})", expected=expected, fix=fix)


def _bad_format(message: str, found: str, text: str, fix: str) -> Problem:
    """check ``format``: a string (or a key) that is not ``text`` (the format's words, also what is expected)."""
    return Problem("format", message, found=found, expected=text, fix=fix)


# llmb_disaggregation's nested keys (planner/disagg.py plans with them) ----------------------------
