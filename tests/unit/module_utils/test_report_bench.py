import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from llmb.bench import gate, percentile, run_bench
from llmb.report import write_report


def test_report_aggregates_stage_results(tmp_path):
    run = tmp_path / "20261122T000000Z"
    (run / "verify").mkdir(parents=True)
    (run / "serve").mkdir()
    (run / "verify" / "node1.json").write_text(json.dumps({"ok": True}))
    (run / "verify" / "node2.json").write_text(json.dumps({"ok": False, "checks": []}))
    smoke = [[{"check": "chat-completion", "ok": True, "request": "POST http://10.0.0.1:8000/v1/chat/completions",
               "found": "4"}]]
    (run / "serve" / "node1.json").write_text(json.dumps({"ok": True, "smoke": smoke}))
    rep = write_report(str(run))
    assert rep["ok"] is False
    # node2 failed verify and has no serve result at all: both count
    assert [(f["stage"], f["host"]) for f in rep["failed"]] == [("verify", "node2"), ("serve", "node2")]
    assert rep["endpoint"] == "http://10.0.0.1:8000/v1"
    assert rep["smoke_answer"] == "4"
    assert list(rep["stages"]) == ["verify", "serve"]
    md = (run / "report.md").read_text()
    assert "Verdict: **FAILED**" in md and "| verify | ok | FAILED |" in md and "| serve | ok | MISSING |" in md
    assert json.loads((run / "report.json").read_text()) == rep


def test_percentile():
    assert percentile([], 0.5) == 0.0
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert percentile([1.0, 3.0], 0.5) == 2.0


class _Chat(BaseHTTPRequestHandler):
    fail_every = 0
    count = 0
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802
        with self.lock:  # requests arrive on several threads: number each one exactly once
            type(self).count += 1
            n = type(self).count
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.fail_every and n % self.fail_every == 0:
            self.send_response(500)
            self.end_headers()
            return
        body = json.dumps({"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 7}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture()
def server():
    _Chat.count = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


def test_bench_counts_tokens_and_gates(server):
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    res = run_bench(base, "m", requests=12, concurrency=3)
    assert res["succeeded"] == 12 and res["failed"] == 0
    assert res["output_token_throughput"] > 0
    assert _Chat.count == 12
    assert gate(res) == []
    assert gate(res, min_output_tok_s=1e12)[0].startswith("output throughput")


def test_bench_failures_fail_the_gate(server):
    _Chat.fail_every = 4
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        res = run_bench(base, "m", requests=8, concurrency=2)
    finally:
        _Chat.fail_every = 0
    assert res["failed"] == 2
    assert "success rate" in gate(res)[0]


def test_bench_warmup_requests_go_first_and_are_not_counted(server):
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    res = run_bench(base, "m", requests=6, concurrency=2, warmup=2)
    assert res["succeeded"] == 6 and res["requests"] == 6
    assert _Chat.count == 8  # the server saw the two warm-up requests too


def test_bench_keeps_connections_alive_per_worker():
    """vllm bench serve reuses its connections; so does the bench (HTTP/1.1 keep-alive): a server
    that keeps connections open sees one connection per worker, not one per request."""
    peers: set = set()

    class KeepAlive(_Chat):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802
            peers.add(self.client_address)
            super().do_POST()

    _Chat.count = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), KeepAlive)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        res = run_bench(f"http://127.0.0.1:{srv.server_address[1]}/v1", "m", requests=12, concurrency=3)
    finally:
        srv.shutdown()
    assert res["succeeded"] == 12
    assert len(peers) == 3
