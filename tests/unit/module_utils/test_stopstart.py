"""llmb stop / start: the order and the drains from a deployment document (llmbctl.stopstart, on the
planner's own 1P1D sample), and the router's worker API as sglang-router 0.3.2 answered it
(llmb.router against tests/fixtures/captures/sglang-router/)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from llmb import router as R
from llmbctl import stopstart as ss

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = ROOT / "tests/fixtures/captures/sglang-router"


def capture(name: str) -> tuple[int, bytes]:
    """(status, body) of a capture: `# comment` lines, then either an HTTP response (curl -i) or a body."""
    lines = [ln for ln in (CAPTURES / name).read_text().splitlines() if not ln.startswith("#")]
    if lines and lines[0].startswith("HTTP/"):
        status = int(lines[0].split()[1])
        body = lines[lines.index("") + 1:] if "" in lines else []
        return status, "\n".join(body).strip().encode()
    return 200, "\n".join(lines).strip().encode()


@pytest.fixture(scope="module")
def pd_doc() -> dict:
    out = subprocess.run([str(ROOT / "scripts/launch-plan"), "-i", str(ROOT / "inventories/h200-1p1d"), "--deployment"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_levels_up_for_start_down_for_stop(pd_doc):
    assert ss.levels(pd_doc, "start") == sorted(pd_doc["start_levels"])
    assert ss.levels(pd_doc, "stop") == sorted(pd_doc["start_levels"], reverse=True)
    with pytest.raises(ValueError, match="action 'restart'"):
        ss.levels(pd_doc, "restart")


def test_the_decode_group_is_drained_at_the_prefill_nodes_router(pd_doc):
    prefill, decode = list(pd_doc["hosts"])
    got = ss.drains(pd_doc, [decode])
    assert got == [{"router_host": prefill, "router": f"http://{pd_doc['hosts'][prefill]['address']}:8000",
                    "url": f"http://{pd_doc['hosts'][decode]['address']}:30000", "worker_type": "decode", "host": decode}]
    # the router stops with its own group: nothing to drain; every host stopped: nothing either
    assert ss.drains(pd_doc, [prefill]) == [] and ss.drains(pd_doc, [prefill, decode]) == []


class FakeRouter:
    """The router's answers from the captures; a DELETE takes the worker out of the next listing."""

    def __init__(self, load: int = 0, get_load=None):
        self.doc = json.loads(capture("workers-get.txt")[1])
        for w in self.doc["workers"]:
            w["load"] = load if w["url"].endswith("31003") else 0
        self.calls: list[tuple[str, str]] = []
        self.get_load = get_load

    def __call__(self, method, url, body=None, timeout=10):
        self.calls.append((method, url))
        if url.endswith("/get_load"):
            return self.get_load() if self.get_load else (404, b'{"detail":"Not Found"}')
        if method == "GET":
            return 200, json.dumps(self.doc).encode()
        if method == "DELETE":
            wid = url.rsplit("/", 1)[1]
            known = [w for w in self.doc["workers"] if w["id"] == wid]
            self.doc["workers"] = [w for w in self.doc["workers"] if w["id"] != wid]
            return capture("workers-delete.txt") if known else capture("workers-delete-unknown.txt")
        if method == "POST":
            self.doc["workers"].append({"id": "new", "url": body["url"], "worker_type": body["worker_type"],
                                        "is_healthy": True, "load": 0})
            return capture("workers-post.txt")
        return 405, b""


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_remove_waits_for_the_requests_in_flight():
    router, clock = FakeRouter(load=3), Clock()
    got = R.remove("http://127.0.0.1:31100", "http://127.0.0.1:31003", drain_s=10, http=router, sleep=clock.sleep, clock=clock)
    assert got["changed"] is True and got["worker_type"] == "decode" and got["load"] == 3
    wid = next(w["id"] for w in json.loads(capture("workers-get.txt")[1])["workers"] if w["url"].endswith(":31003"))
    assert ("DELETE", f"http://127.0.0.1:31100/workers/{wid}") in router.calls
    assert got["drained_s"] >= 10 and "no /get_load" in got["how"]  # a worker without /get_load: drain_s
    assert got["running"] is None
    # a worker that reports its load: the stop goes on once it runs none
    loads = iter([(200, b'[{"num_reqs": 2, "num_waiting_reqs": 1}]'), (200, b'[{"num_reqs": 0, "num_waiting_reqs": 0}]')])
    router, clock = FakeRouter(load=3, get_load=lambda: next(loads)), Clock()
    got = R.remove("http://127.0.0.1:31100", "http://127.0.0.1:31003", drain_s=60, http=router, sleep=clock.sleep, clock=clock)
    assert got["how"] == "the worker's /get_load says none runs" and got["drained_s"] < 2 and got["running"] == 0
    # still busy when drain_s ran out: the requests the stop ends are counted
    router, clock = FakeRouter(load=3, get_load=lambda: (200, b'[{"num_reqs": 2, "num_waiting_reqs": 1}]')), Clock()
    got = R.remove("http://127.0.0.1:31100", "http://127.0.0.1:31003", drain_s=5, http=router, sleep=clock.sleep, clock=clock)
    assert got["running"] == 3 and got["how"] == "3 request(s) still running after 5s" and got["drained_s"] >= 5
    # idle at removal: no long wait
    router, clock = FakeRouter(load=0), Clock()
    got = R.remove("http://127.0.0.1:31100", "http://127.0.0.1:31003", drain_s=30, http=router, sleep=clock.sleep, clock=clock)
    assert got["how"] == "the router counted no request on it" and got["drained_s"] <= 2.5


def test_remove_twice_and_add_back():
    router, clock = FakeRouter(), Clock()
    kw = dict(http=router, sleep=clock.sleep, clock=clock)
    R.remove("http://127.0.0.1:31100", "http://127.0.0.1:31003", 1, **kw)
    assert R.remove("http://127.0.0.1:31100", "http://127.0.0.1:31003", 1, **kw)["changed"] is False
    assert R.add("http://127.0.0.1:31100", "http://127.0.0.1:31003", "decode", **kw)["changed"] is True
    assert router.calls[-2][0] == "POST" or ("POST", "http://127.0.0.1:31100/workers") in router.calls
    assert R.add("http://127.0.0.1:31100", "http://127.0.0.1:31003", "decode", **kw)["changed"] is False


def test_router_errors_name_what_it_answered():
    with pytest.raises(R.RouterError, match="GET http://r/workers -> no answer"):
        R.workers("http://r", http=lambda *a, **k: (None, b"connection refused"))
    with pytest.raises(R.RouterError, match="still lists"):
        stuck = FakeRouter()
        stuck_doc = json.dumps(stuck.doc).encode()
        clock = Clock()
        R.remove("http://r", "http://127.0.0.1:31003", 1, timeout_s=3, sleep=clock.sleep, clock=clock,
                 http=lambda m, u, b=None, timeout=10: (200, stuck_doc) if m == "GET" else (202, b"{}"))


def test_the_stops_drains_are_in_its_output_and_its_report(tmp_path):
    """The records `llmb stop` wrote on the simulated cluster (tests/e2e/test_drain_bench.py), drained
    and --no-drain: the report's section and the command's lines name each worker and the requests it
    still ran at its stop."""
    from llmb.report import write_report
    from llmbctl.console.daytwo import drain_lines

    run = tmp_path / "drain-stop-1"
    (run / "stop").mkdir(parents=True)
    drained = {"host": "node2", "stage": "stop", "ok": True, "duration_s": 4.177, "services": ["llmb-sglang-decode"],
               "drained": [["http://172.19.0.4:30000", 0.5, "the worker's /get_load says none runs", 0]],
               "drain": True, "not_drained": []}
    (run / "stop" / "node2.json").write_text(json.dumps(drained))
    (run / "stop" / "node3.json").write_text(json.dumps(
        {"host": "node3", "stage": "stop", "ok": True, "duration_s": 62.3, "services": ["llmb-sglang-decode"],
         "drained": [], "drain": False, "not_drained": ["http://172.19.0.3:30000"]}))
    want = ["drained:        node2 http://172.19.0.4:30000 out of rotation in 0.5 s (the worker's /get_load says "
            "none runs); requests still running at its stop: 0",
            "not drained:    node3 http://172.19.0.3:30000 stopped with the requests it ran (--no-drain)"]
    assert drain_lines(run / "stop") == want
    rep = write_report(str(run), ["stop"])
    assert rep["drains"] == want
    md = (run / "report.md").read_text()
    assert "## Workers a router routes to (llmb stop)" in md and want[0] in md and want[1] in md
    assert 'id="drains"' in (run / "report.html").read_text()
    # a stop without routers: no such section
    (run / "stop" / "node2.json").write_text(json.dumps({**drained, "drained": []}))
    (run / "stop" / "node3.json").unlink()
    assert "drains" not in write_report(str(run), ["stop"])
