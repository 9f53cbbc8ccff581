"""The environment a console run gets, and how its secrets reach ansible-playbook without being written.

ansible-runner seeds a run's environment with the controller's whole ``os.environ`` and writes it
into ``runner/artifacts/<run>/command`` (and the envvars it is given into ``runner/env/envvars``):
a token, a cloud or registry credential of the operator's shell lands in the directory people
copy, attach and archive. So every console command:

- keeps only the variables a run needs (:func:`needed`: the shell basics, locale, proxies, CA
  bundles, ``LLMB_*``, ``ANSIBLE_*``, ``HF_*``, ``UV_*``, ``PIP_*``, Docker's client settings);
  everything else (``AWS_*``, ``GOOGLE_*``, ...) never reaches the run;
- of those, the secrets (llmb.secrets.is_secret_env: the one rule; ``HF_TOKEN`` above all, a
  proxy URL with a password) are not in the runner's environment: they go through a FIFO
  (:class:`SecretChannel`, nothing on disk) to ``scripts/llmb-playbook``, which the runner starts
  instead of ``ansible-playbook`` and which puts them into its own environment before exec'ing
  ``ansible-playbook``; the runner records only the FIFO's path;
- an ``-e NAME=value`` whose NAME is a secret's (``-e llmb_api_key=...``) goes the same way
  (:func:`split_extra`), instead of into the command line the runner records.

Pure functions except SecretChannel (a temp directory of mode 0700 outside the artifacts).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from ..secrets import is_secret_env, is_secret_name

FIFO_VAR = "LLMB_SECRETS_FIFO"
NAMES = frozenset(
    (
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
        "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "VIRTUAL_ENV",
        "http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
        "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG",
    )
)
PREFIXES = ("LLMB_", "ANSIBLE_", "LC_", "HF_", "UV_", "PIP_")


def needed(name: str) -> bool:
    """Whether a run needs the controller's variable ``name`` (the allow list)."""
    return name in NAMES or name.startswith(PREFIXES)


def split(environ: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain, secret): the variables a run needs, those that hold no secret and those that do.
    Everything not needed is in neither."""
    plain: dict[str, str] = {}
    secret: dict[str, str] = {}
    for name, value in environ.items():
        if name == FIFO_VAR or not needed(name):
            continue
        (secret if is_secret_env(name, value) else plain)[name] = value
    return plain, secret


def split_extra(extra: list[str]) -> tuple[list[str], dict[str, str]]:
    """(kept, secret) of the -e values: NAME=value with a secret's NAME go to ``secret``; the rest
    (other names, @file) stay as given."""
    kept: list[str] = []
    secret: dict[str, str] = {}
    for item in extra:
        name, sep, value = item.partition("=")
        if sep and not item.startswith("@") and is_secret_name(name):
            secret[name] = value
        else:
            kept.append(item)
    return kept, secret


def runner_env(runner_env_: Mapping[str, str], environ: Mapping[str, str], plain: Mapping[str, str],
               given: Mapping[str, str]) -> dict[str, str]:
    """The environment the runner keeps after it seeded itself from ``environ``: what it added or
    changed (its callback plugin, ...), the ``given`` envvars, and of the controller's variables
    only the ``plain`` ones."""
    out = {}
    for name, value in runner_env_.items():
        inherited = name in environ and environ[name] == value
        if name in given or not inherited or name in plain:
            out[name] = value
    return out


class SecretChannel:
    """A FIFO in a private temp directory; a daemon thread writes ``{"env": secrets, "extra_vars":
    extra_vars}`` into it once, when the wrapper opens it. ``env`` gives the variable naming it;
    ``close`` removes it."""

    def __init__(self, secrets: Mapping[str, str], extra_vars: Mapping[str, str] | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="llmb-secrets-"))
        os.chmod(self.dir, stat.S_IRWXU)
        self.path = self.dir / "env"
        os.mkfifo(self.path, 0o600)
        payload = json.dumps({"env": dict(secrets), "extra_vars": dict(extra_vars or {})}).encode()

        def feed() -> None:
            try:
                with open(self.path, "wb") as f:  # blocks until the wrapper opens it
                    f.write(payload)
            except OSError:
                pass

        self._thread = threading.Thread(target=feed, name="llmb-secrets", daemon=True)
        self._thread.start()

    @property
    def env(self) -> dict[str, str]:
        return {FIFO_VAR: str(self.path)}

    def close(self) -> None:
        if self._thread.is_alive():  # nobody read it (the run did not start): unblock the writer
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass
            self._thread.join(timeout=2)
        try:
            self.path.unlink()
            self.dir.rmdir()
        except OSError:
            pass


def read_channel(environ: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """In the wrapper: (environment, extra vars) the console sent, the FIFO variable removed from
    ``environ``; ({}, {}) without one."""
    path = environ.pop(FIFO_VAR, "")
    if not path:
        return {}, {}
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    doc = doc if isinstance(doc, dict) else {}
    env, extra = doc.get("env") or {}, doc.get("extra_vars") or {}
    return {str(k): str(v) for k, v in env.items()}, {str(k): str(v) for k, v in extra.items()}
