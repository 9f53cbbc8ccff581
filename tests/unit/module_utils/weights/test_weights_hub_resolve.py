"""A hub whose host name does not resolve fails at once with the fix (issue 25, point 7); a refused or
reset connection and a temporary DNS failure are left to the hub client and its retries."""

from __future__ import annotations

import socket
import time

import pytest
from llmb.weights import fetch


def _params(tmp_path, endpoint):
    return fetch.FetchParams(dest=str(tmp_path / "m"), repo_id="org/model", revision="a" * 40, endpoint=endpoint,
                             python=str(tmp_path / "no-venv" / "bin" / "python"))


def _no_proxy(monkeypatch):
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "all_proxy",
              "ALL_PROXY"):
        monkeypatch.delenv(k, raising=False)


def test_a_name_that_does_not_resolve_fails_at_once_naming_the_fix(tmp_path, monkeypatch):
    _no_proxy(monkeypatch)
    calls = []

    def nxdomain(name, *args, **kwargs):
        calls.append(name)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", nxdomain)
    (tmp_path / "no-venv" / "bin").mkdir(parents=True)
    python = tmp_path / "no-venv" / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 99\n")  # must never run: the check comes first
    python.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(fetch.FetchError) as err:
        fetch.call_hub(_params(tmp_path, "http://hub.demo.invalid:8080"), {"op": "manifest"}, timeout=60)
    assert time.monotonic() - t0 < 2
    assert calls == ["hub.demo.invalid"]
    assert err.value.check == "hub-resolve" and err.value.details["kind"] == "dns"
    text = str(err.value)
    assert "'hub.demo.invalid'" in text and "does not resolve" in text and "Name or service not known" in text
    assert "weights_hf_endpoint" in text and "HF_ENDPOINT" in text


def test_the_default_hub_is_checked_too(monkeypatch):
    _no_proxy(monkeypatch)
    seen = []
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda name, port, **kw: seen.append((name, port)) or [])
    fetch.check_resolves(None)
    assert seen == [("huggingface.co", 443)]


@pytest.mark.parametrize("code", [socket.EAI_AGAIN, socket.EAI_FAIL])
def test_a_temporary_dns_failure_keeps_the_clients_retries(tmp_path, monkeypatch, code):
    _no_proxy(monkeypatch)

    def flaky(*args, **kwargs):
        raise socket.gaierror(code, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", flaky)
    fetch.check_resolves("http://hub.example:8080")  # no refusal: the client runs and retries


def test_a_refused_connection_is_not_taken_for_a_missing_name(tmp_path, monkeypatch):
    """An address literal resolves; the call goes on to the hub client (absent here: its own error)."""
    _no_proxy(monkeypatch)
    with pytest.raises(fetch.FetchError) as err:
        fetch.call_hub(_params(tmp_path, "http://127.0.0.1:9"), {"op": "manifest"}, timeout=60)
    assert err.value.check == "hub-client"


def test_a_hub_behind_a_proxy_is_left_to_the_proxy(monkeypatch):
    _no_proxy(monkeypatch)
    monkeypatch.setenv("https_proxy", "http://proxy.site:3128")

    def boom(*args, **kwargs):
        raise AssertionError("resolved on the node although a proxy reaches the hub")

    monkeypatch.setattr(socket, "getaddrinfo", boom)
    fetch.check_resolves("https://hub.internal.example")
