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
