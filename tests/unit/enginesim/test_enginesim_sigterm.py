"""The SGLang double stops as SGLang 0.5.x does (TokenizerManager.sigterm_watchdog): on SIGTERM its
/health answers 503, requests are still taken, and it exits once a check finds none running; a
process that ends meanwhile (systemd's stop timeout) breaks the streams in flight. The project's
bench counts such a stream as failed; /get_load says how many requests run (what `llmb stop` waits on)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from enginesim.api import ApiConfig, serving
from enginesim_helpers import free_port, http
from llmb.bench import run_bench

ROOT = Path(__file__).resolve().parents[3]


def test_get_load_counts_the_requests_running_and_streams_finish(monkeypatch):
    monkeypatch.setenv("LLMB_ENGINESIM_REQUEST_SECONDS", "0.6")
    with serving(ApiConfig(engine="sglang", version="0.5.23", served_names=["m"], model_path="/m")) as v1:
        base = v1.removesuffix("/v1")
        got: dict = {}
        t = threading.Thread(target=lambda: got.update(run_bench(base + "/v1", "m", requests=4, concurrency=4,
                                                                 stream=True)))
        t.start()
        time.sleep(0.3)
        load = http(base + "/get_load")[1]
        t.join(10)
        assert load[0]["num_reqs"] == 4 and load[0]["num_waiting_reqs"] == 0, load
        assert got["succeeded"] == 4 and got["failed"] == 0 and got["output_token_throughput"] > 0, got
        assert got["latency_mean_s"] >= 0.6  # the stream lasted the request's time
        # the handler leaves the count once it has written the stream's end, a moment after the client
        # read [DONE]: the drain polls /get_load the same way until it reads 0
        deadline = time.monotonic() + 5
        while http(base + "/get_load")[1][0]["num_reqs"] != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert http(base + "/get_load")[1][0]["num_reqs"] == 0


def _serve(tmp_path, port: int, request_s: str) -> subprocess.Popen:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k2", "max_position_embeddings": 4096}))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LLMB_ENGINESIM_LOAD_SECONDS": "0",
           "LLMB_ENGINESIM_REQUEST_SECONDS": request_s, "LLMB_ENGINESIM_EXIT_POLL_S": "0.5",
           "LLMB_ENGINESIM_STATE": str(tmp_path / "state"), "LLMB_ENGINESIM_DEVICES": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "enginesim.sglang_cli", "--model-path", str(tmp_path),
                             "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "m"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if http(f"http://127.0.0.1:{port}/health")[0] == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(proc.communicate()[0][-2000:])


def test_sigterm_finishes_the_requests_in_flight_and_a_kill_breaks_them(tmp_path):
    port = free_port()
    proc = _serve(tmp_path, port, "1.5")
    base = f"http://127.0.0.1:{port}"
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(run_bench(base + "/v1", "m", requests=2, concurrency=2,
                                                             stream=True)))
    t.start()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert http(base + "/health")[0] == 503  # SGLang's health during its graceful exit
    t.join(15)
    out = proc.communicate(timeout=15)[0]
    assert proc.returncode == 0, out[-2000:]
    assert got["succeeded"] == 2 and got["failed"] == 0, got  # the graceful exit waited for them
    assert "Gracefully exiting... Remaining number of requests 2." in out, out[-2000:]
    assert "Gracefully exiting... Remaining number of requests 0." in out, out[-2000:]
    # killed while streaming (systemd's TimeoutStopSec): the streams break off, the bench counts them
    proc = _serve(tmp_path, port, "3")
    got.clear()
    t = threading.Thread(target=lambda: got.update(run_bench(base + "/v1", "m", requests=3, concurrency=3,
                                                             stream=True)))
    t.start()
    time.sleep(0.8)
    proc.kill()
    proc.communicate(timeout=15)
    t.join(15)
    assert got["failed"] == 3 and got["succeeded"] == 0, got
    assert any("before data: [DONE]" in e or "Connection" in e or "closed" in e for e in got["errors"]), got
