"""The double's prefill/decode protocol (enginesim/pd.py) as the real router drives it: both workers
get the request with the same bootstrap room; the decode worker answers once it has the prefill's KV."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from enginesim.api import ApiConfig, ApiServer
from enginesim.pd import Bootstrap, PdWorker
from enginesim.runtime import Log
from llmbctl.pdhealth import group_report


def worker(mode: str, bootstrap=None) -> ApiServer:
    cfg = ApiConfig(engine="sglang", version="0.5.23", served_names=["kimi-k2-sim"], model_path="/m")
    cfg.pd = PdWorker(mode, Log("sglang"), bootstrap, "mlx5_0")
    server = ApiServer(cfg, "127.0.0.1", 0, Log("sglang"))
    server.ready.set()
    return server


def post(server: ApiServer, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/chat/completions", method="POST",
                                 data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@pytest.fixture
def pair():
    boot = Bootstrap("127.0.0.1", 0, Log("sglang"))
    prefill, decode = worker("prefill", boot), worker("decode")
    yield boot, prefill, decode
    for srv in (prefill.httpd, decode.httpd, boot.httpd):
        srv.shutdown()
        srv.server_close()


def request(boot: Bootstrap, room: int) -> dict:
    return {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "hi"}], "bootstrap_host": "127.0.0.1",
            "bootstrap_port": boot.httpd.server_address[1], "bootstrap_room": room}


def test_decode_answers_after_the_prefill_kv_arrives(pair):
    boot, prefill, decode = pair
    got = {}
    t = threading.Thread(target=lambda: got.update(decode=post(decode, request(boot, 7))))
    t.start()  # the router sends both at once: decode waits on the bootstrap server
    assert post(prefill, request(boot, 7))[0] == 200
    t.join(20)
    status, body = got["decode"]
    assert status == 200 and body["choices"][0]["message"]["content"]


def test_decode_fails_without_the_prefill_and_refuses_direct_requests(pair, monkeypatch):
    boot, prefill, decode = pair
    monkeypatch.setattr("enginesim.pd.KV_WAIT_S", 0.3)
    status, body = post(decode, request(boot, 8))  # no prefill published room 8
    assert status == 500 and "KV" in json.dumps(body)
    status, body = post(decode, {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "router" in json.dumps(body)


def test_server_and_model_info_for_the_router(pair):
    _, prefill, _ = pair
    info = json.load(urllib.request.urlopen(f"http://127.0.0.1:{prefill.port}/server_info", timeout=5))
    assert info["disaggregation_mode"] == "prefill" and info["served_model_name"] == "kimi-k2-sim"
    assert json.load(urllib.request.urlopen(f"http://127.0.0.1:{prefill.port}/model_info", timeout=5))["model_path"]


def test_group_report_names_group_and_host():
    checks = [{"url": "http://p:30000/health", "role": "prefill", "group": "prefill_nodes", "node": "p0",
               "service": "llmb-sglang-prefill"},
              {"url": "http://d:30000/health", "role": "decode", "group": "decode_nodes", "node": "d0",
               "service": "llmb-sglang-decode"}]
    up = {"http://p:30000/health": (200, ""), "http://d:30000/health": (None, "connection refused")}
    (line,) = group_report(checks, probe=lambda url: up[url])
    assert line.startswith("the decode group 'decode_nodes' is down: node 0 d0 (http://d:30000/health): "
                           "connection refused")
    assert group_report(checks, probe=lambda url: (200, "")) == []
