"""Which names hold secrets: environment variables, container env keys, docker run -e arguments.

The serve role (no_log of container tasks), the llmb_container module (masked argv in its
result) and the console (what a run's environment may write into its artifacts: llmb.console.runenv)
decide with this one pattern. Stdlib only; runs on the nodes (python3 >= 3.9).
"""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"(?i)token|secret|password|key")
# a URL carrying a password (a proxy's http://user:pass@host): a secret whatever its name
URL_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*:[^/@\s]*@")
MASK = "********"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(str(name)))


def is_secret_env(name: str, value: str) -> bool:
    """An environment variable that holds a secret: its name says so, or its value is a URL with a
    password in it."""
    return is_secret_name(name) or bool(URL_PASSWORD.match(str(value or "")))


def secret_keys(mapping) -> list[str]:
    """The keys of a mapping (an env) whose names look like secrets, in order."""
    return [str(k) for k in (mapping or {}) if is_secret_name(k)]


def masked_argv(argv: list[str]) -> list[str]:
    """argv with the value of every NAME=value argument whose NAME looks like a secret masked."""
    out = []
    for a in argv:
        k, sep, _ = a.partition("=")
        out.append(f"{k}={MASK}" if sep and is_secret_name(k) and not a.startswith("-") else a)
    return out


# text (logs, journals, unit files, tool outputs) as a support bundle carries it: NAME=value,
# NAME: value, "NAME": "value", --flag value / --flag=value, whose NAME or flag is a secret's by the
# rule above; a URL's password; an HTTP Authorization header
_ASSIGN = re.compile(r"""(?P<q>["']?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)(?P<sep>\s*[=:]\s*)(?P<vq>["']?)(?P<val>[^\s"',;}\]]+)""")
_FLAG = re.compile(r"(?P<flag>--?[A-Za-z0-9][A-Za-z0-9_-]*)(?P<sep>=|\s+)(?P<val>[^\s\"',;]+)")
_URL_PASSWORD_ANY = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:)(?P<val>[^/@\s]+)(?=@)")
_AUTH_HEADER = re.compile(r"(?i)(?P<head>\bauthorization\b[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)?\s*)(?P<val>[^\s\"',;]+)")


def redact_text(text: str, values=()) -> str:
    """``text`` with every secret masked: the known secret ``values`` (4 characters or more)
    wherever they appear, then every value the rule names a secret's (see above)."""
    for v in sorted({str(v) for v in values or () if v and len(str(v)) >= 4}, key=len, reverse=True):
        text = text.replace(v, MASK)
    text = _URL_PASSWORD_ANY.sub(lambda m: m.group("head") + MASK, text)
    text = _AUTH_HEADER.sub(lambda m: m.group("head") + MASK, text)

    def assign(m: re.Match) -> str:
        if not is_secret_name(m.group("name")) or m.group("val") == MASK:
            return m.group(0)
        return f"{m.group('q')}{m.group('name')}{m.group('q')}{m.group('sep')}{m.group('vq')}{MASK}"

    def flag(m: re.Match) -> str:
        if not is_secret_name(m.group("flag")) or m.group("val").startswith("-") or m.group("val") == MASK:
            return m.group(0)
        return f"{m.group('flag')}{m.group('sep')}{MASK}"

    return _FLAG.sub(flag, _ASSIGN.sub(assign, text))
