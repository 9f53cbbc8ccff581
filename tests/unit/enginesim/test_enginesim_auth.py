"""The double enforces an API key as vLLM does (AuthenticationMiddleware, 0.19-0.23): with a key set,
every /v1/* request without "Authorization: Bearer <key>" is refused with 401 {"error": "Unauthorized"};
/health stays open. The smoke tests send the key; without it they fail on the refusal."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from enginesim import flagset
from enginesim.api import ApiConfig, ApiServer
from enginesim.runtime import Log
from enginesim.vllm_cli import _api_keys
from llmb.smoke import run_smoke

KEY = "sk-test-0123456789"


@pytest.fixture()
def server():
    cfg = ApiConfig(engine="vllm", version="0.19.1", served_names=["kimi-k2-sim"], model_path="/m",
                    api_keys=[KEY])
    srv = ApiServer(cfg, "127.0.0.1", 0, Log())
    srv.ready.set()
    yield f"http://127.0.0.1:{srv.port}"
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _get(url: str, token: str | None = None, scheme: str = "Bearer"):
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_v1_without_the_key_is_refused_with_401(server):
    for path in ("/v1/models", "/v1/chat/completions"):
        status, body = _get(server + path)
        assert status == 401 and json.loads(body) == {"error": "Unauthorized"}, path
    assert _get(server + "/v1/models", "wrong-key")[0] == 401
    assert _get(server + "/v1/models", KEY, scheme="Basic")[0] == 401


def test_v1_with_the_key_and_health_without_it_answer(server):
    assert _get(server + "/v1/models", KEY)[0] == 200
    assert _get(server + "/v1/models", KEY, scheme="bearer")[0] == 200  # the scheme is case-insensitive
    assert _get(server + "/health")[0] == 200


def test_an_unauthenticated_post_is_refused(server):
    req = urllib.request.Request(server + "/v1/chat/completions", method="POST",
                                 data=json.dumps({"model": "kimi-k2-sim", "messages": [
                                     {"role": "user", "content": "hi"}]}).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 401


def test_smoke_passes_with_the_key_and_fails_without(server):
    ok = run_smoke(server + "/v1", "kimi-k2-sim", False, False, 5, KEY)
    assert all(c["ok"] for c in ok), ok
    refused = run_smoke(server + "/v1", "kimi-k2-sim", False, False, 5, None)
    assert not any(c["ok"] for c in refused)
    assert {c["status"] for c in refused} == {401}


def test_the_key_comes_from_the_flag_else_the_catalogs_environment_variable(monkeypatch):
    fs = flagset.load("vllm", "0.19.1")
    assert fs["api_key_env"] == "VLLM_API_KEY"
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert _api_keys(fs, {}) == []
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert _api_keys(fs, {}) == [KEY]
    assert _api_keys(fs, {"--api-key": "flag-key"}) == ["flag-key"]  # the flag wins, as in vLLM
    assert _api_keys(fs, {"--api-key": ["a", "b"]}) == ["a", "b"]


def test_bench_sends_the_key(server):
    from llmb.bench import run_bench

    ok = run_bench(server + "/v1", "kimi-k2-sim", requests=2, concurrency=1, max_tokens=8, token=KEY)
    refused = run_bench(server + "/v1", "kimi-k2-sim", requests=2, concurrency=1, max_tokens=8)
    assert ok["succeeded"] == 2 and ok["failed"] == 0, ok
    assert refused["succeeded"] == 0 and refused["errors"] == ["HTTP Error 401: Unauthorized"], refused


def test_the_env_file_holds_the_key_the_plan_does_not():
    import sys
    from pathlib import Path

    from llmb.serve import environment_file

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "plugins" / "filter"))
    from llmb_serve import service_secret_env

    svc = {"name": "llmb-vllm", "env": {"VLLM_HOST_IP": "10.0.0.1"},
           "api": {"api_key": {"var": "llmb_api_key", "env": "VLLM_API_KEY"}}}
    text = environment_file(svc, service_secret_env(svc, KEY))
    assert f'VLLM_API_KEY="{KEY}"' in text and 'VLLM_HOST_IP="10.0.0.1"' in text
    assert service_secret_env({"name": "x", "api": {"base_url": "u"}}, KEY) == {}
    with pytest.raises(ValueError, match="llmb_api_key"):
        service_secret_env(svc, None)
