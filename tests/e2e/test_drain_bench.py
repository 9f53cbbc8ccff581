"""`llmb stop` of one decode group under the project's bench (issue 27), on a simulated 3-node
cluster of its own: the prefill/decode sample (inventories/h200-1p1d) with two decode instances,
each its own inventory group (node1 prefill and the REAL sglang-router 0.3.2, node2 decode_a, node3
decode_b), started by the engine and serve stages. The decode doubles take 1 s per answer and stop
as SGLang 0.5.x does (SIGTERM: /health 503, exit once no request runs; tests/enginesim/api.py).

While the bench (llmb.bench.run_bench, streamed, 8 clients, through the router) runs:
- `llmb stop --group decode_a`: the router takes decode_a out of rotation, its requests finish, the
  router sends the rest to decode_b: no request fails;
- after `llmb start --group decode_a` (back in rotation), `llmb stop --group decode_a --no-drain`:
  the router goes on sending decode_a requests during its graceful exit, which therefore never ends;
  systemd's stop timeout (TimeoutStopSec) kills it and the streams in flight break off: failed > 0.

Its own cluster: LLMB_E2E_DRAIN_CLUSTER names it (default e2e-drain); LLMB_E2E_REUSE=1 reuses one
that is up, LLMB_E2E_KEEP=1 leaves it up.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import KEEP, SIM
from perf_common import run_playbook
from test_disagg import MODEL_DIR, NODE_DIR, PD_VARS, WHEELHOUSE, pd_cluster

ROOT = Path(__file__).resolve().parents[2]
NAME = os.environ.get("LLMB_E2E_DRAIN_CLUSTER", "e2e-drain")
SAMPLE = ROOT / "inventories" / "h200-1p1d"
UNITS = {"node1": ("llmb-sglang-prefill", "llmb-sglang-router"), "node2": ("llmb-sglang-decode",),
         "node3": ("llmb-sglang-decode",)}
REQUEST_S = "1"  # each answer of the decode doubles takes this long: requests are in flight at the stop


def node(name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", f"{NAME}-{name}", *cmd], capture_output=True, text=True, check=check)


def drain_inventory(sim_hosts: Path, where: Path) -> Path:
    """The 1P1D sample with the simulated hosts in place of its own and its keys replaced for the
    simulated nodes: the decode group (decode_nodes) holds node2 and node3, two decode instances, each
    a child group of its own (decode_a, decode_b) that `llmb stop --group` takes."""
    sim = yaml.safe_load(sim_hosts.read_text())["all"]["children"]["accel_nodes"]
    hosts = yaml.safe_load((SAMPLE / "hosts.yml").read_text())
    accel = hosts["all"]["children"]["accel_nodes"]
    (pvars,) = accel["children"]["prefill_nodes"]["hosts"].values()
    (dvars,) = accel["children"]["decode_nodes"]["hosts"].values()
    accel["vars"] = sim["vars"]
    accel["children"]["prefill_nodes"]["hosts"] = {"node1": {**pvars, **sim["hosts"]["node1"]}}
    accel["children"]["decode_nodes"] = {"children": {
        "decode_a": {"hosts": {"node2": {**dvars, **sim["hosts"]["node2"]}}},
        "decode_b": {"hosts": {"node3": {**dvars, **sim["hosts"]["node3"]}}}}}
    values: dict = {}
    for f in sorted((SAMPLE / "group_vars" / "all").glob("*.yml")):
        values.update(yaml.safe_load(f.read_text()) or {})
    pd = values["llmb_disaggregation"]
    values.update({k: PD_VARS[k] for k in ("llmb_platform", "llmb_model", "llmb_model_dir", "llmb_cluster_iface",
                                           "llmb_health_timeout_s", "engine_host_wheelhouse", "engine_host_python",
                                           "engine_host_torch_backend")})
    values["llmb_disaggregation"] = {
        **pd,
        # the simulated model's context; two decode instances; the doubles' answer time
        "decode": {**pd["decode"], "context_length": 4096, "instances": 2,
                   "engine_env": {"LLMB_ENGINESIM_REQUEST_SECONDS": REQUEST_S}},
        # both decode instances carry the bench (cache_aware would send its one prompt to one of them)
        "router": {**pd["router"], "policy": "round_robin"},
    }
    where.mkdir(parents=True, exist_ok=True)
    (where / "hosts.yml").write_text(json.dumps(hosts, indent=2) + "\n")
    (where / "group_vars").mkdir(exist_ok=True)
    (where / "group_vars" / "all.yml").write_text(json.dumps(values, indent=2) + "\n")
    return where


@pytest.fixture(scope="module")
def drain(tmp_path_factory):
    t0 = time.monotonic()
    inv, doc, wheels = pd_cluster(NAME, drain_inventory, tmp_path_factory.mktemp("drain-inventory"))
    venv = doc["engine"]["venv"]
    config = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "max_position_embeddings": 4096}
    for n, units in UNITS.items():
        for unit in units:
            node(n, "systemctl", "stop", unit, check=False)
        node(n, "rm", "-rf", NODE_DIR, venv)
        node(n, "mkdir", "-p", MODEL_DIR, WHEELHOUSE)
        subprocess.run(["docker", "cp", f"{wheels}/.", f"{NAME}-{n}:{WHEELHOUSE}"], check=True)
        node(n, "sh", "-c", f"echo {shlex.quote(json.dumps(config))} > {MODEL_DIR}/config.json")
    run_id = f"drain-{int(time.time())}"
    logs = tmp_path_factory.mktemp("drain-logs")
    engine = run_playbook(inv, "playbooks/engine.yml", run_id=run_id, log_dir=logs, log_name="engine")
    assert engine.rc == 0, engine.out[-4000:]
    serve = run_playbook(inv, "playbooks/serve.yml", "-e", '{"serve_health_timeout_s": 90}', run_id=run_id,
                         log_dir=logs, log_name="serve")
    assert serve.rc == 0, serve.out[-5000:]
    router = next(s for s in doc["hosts"]["node1"]["plan"]["services"] if s["role"] == "router")
    print(f"\n[drain e2e] setup and stages {time.monotonic() - t0:.1f} s")
    yield {"doc": doc, "inv": inv, "router": router}
    for n, units in UNITS.items():
        for unit in units:
            node(n, "systemctl", "kill", "--signal=KILL", unit, check=False)
            node(n, "systemctl", "stop", unit, check=False)
        node(n, "rm", "-rf", NODE_DIR, venv, check=False)
    if not KEEP:
        subprocess.run([SIM, "down", "--name", NAME], capture_output=True)


def llmb(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_RUN_ID", "LLMB_ARTIFACTS_DIR")}
    return subprocess.run([str(ROOT / ".venv/bin/llmb"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)


class Bench:
    """The project's bench (llmb.bench.run_bench: streamed, 8 clients, through the router) in rounds
    of 64 requests until stopped (the gaps between rounds are rare and short: a gap is a moment the
    stopped worker may run nothing): the totals of every round."""

    def __init__(self, api: dict):
        self.api, self.rounds, self.done = api, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from llmb.bench import run_bench

        while not self.done.is_set():
            self.rounds.append(run_bench(self.api["base_url"], self.api["served_model_name"], requests=64,
                                         concurrency=8, max_tokens=16, stream=True, timeout=120))

    def __enter__(self):
        self.thread.start()
        time.sleep(4)  # the bench runs when the stop comes
        return self

    def __exit__(self, *exc):
        time.sleep(3)
        self.done.set()
        self.thread.join(300)

    def totals(self) -> dict:
        r = self.rounds
        wall = sum(x["duration_s"] for x in r)
        ok = sum(x["succeeded"] for x in r)
        return {"requests": sum(x["requests"] for x in r), "succeeded": ok, "failed": sum(x["failed"] for x in r),
                "errors": sorted({e for x in r for e in x["errors"]})[:3], "duration_s": round(wall, 1),
                "request_throughput": round(ok / wall, 2) if wall else 0.0,
                "latency_p99_s_max": max((x["latency_p99_s"] or 0) for x in r) if r else None}


def router_decodes(router: dict) -> list[str]:
    from llmb import router as R

    base = router["health"]["url"].rsplit("/", 1)[0]
    return sorted(w["url"] for w in R.workers(base) if w.get("worker_type") == "decode")


def test_stopping_a_decode_group_under_the_bench_fails_no_request_with_the_drain_and_some_without(drain):
    router, inv = drain["router"], str(drain["inv"])
    doc = drain["doc"]
    worker_a = f"http://{doc['hosts']['node2']['address']}:30000"
    assert len(router_decodes(router)) == 2, router_decodes(router)
    # with the drain
    run_id = f"drain-stop-{int(time.time() * 1000)}"
    with Bench(router["api"]) as bench:
        t0 = time.monotonic()
        stop = llmb("stop", "-i", inv, "--group", "decode_a", "-e", "serve_drain_s=20", "--run-id", run_id)
        stop_s = time.monotonic() - t0
    drained = bench.totals()
    assert stop.returncode == 0, stop.stdout[-4000:] + stop.stderr[-2000:]
    rec = json.loads((ROOT / "artifacts" / run_id / "stop" / "node2.json").read_text())
    assert [d[0] for d in rec["drained"]] == [worker_a] and rec["drained"][0][3] == 0, rec
    assert f"drained:        node2 {worker_a} out of rotation" in stop.stdout, stop.stdout[-3000:]
    assert "requests still running at its stop: 0" in stop.stdout
    report = (ROOT / "artifacts" / run_id / "report.md").read_text()
    assert f"drained:        node2 {worker_a}" in report and "requests still running at its stop: 0" in report, report
    assert node("node2", "systemctl", "is-active", "llmb-sglang-decode", check=False).stdout.strip() != "active"
    assert node("node3", "systemctl", "is-active", "llmb-sglang-decode", check=False).stdout.strip() == "active"
    print(f"\n[drain e2e] llmb stop --group decode_a ({stop_s:.1f} s) under the bench: {drained}; drain {rec['drained']}")
    assert drained["succeeded"] > 0 and drained["failed"] == 0, drained
    # back in rotation
    start = llmb("start", "-i", inv, "--group", "decode_a")
    assert start.returncode == 0, start.stdout[-4000:] + start.stderr[-2000:]
    assert len(router_decodes(router)) == 2, router_decodes(router)
    # without the drain
    run_id = f"drain-nodrain-{int(time.time() * 1000)}"
    with Bench(router["api"]) as bench:
        t0 = time.monotonic()
        stop = llmb("stop", "-i", inv, "--group", "decode_a", "--no-drain", "--run-id", run_id)
        stop_s = time.monotonic() - t0
    plain = bench.totals()
    assert stop.returncode == 0, stop.stdout[-4000:] + stop.stderr[-2000:]
    rec = json.loads((ROOT / "artifacts" / run_id / "stop" / "node2.json").read_text())
    assert rec["drained"] == [] and rec["not_drained"] == [worker_a] and rec["drain"] is False, rec
    assert f"not drained:    node2 {worker_a}" in stop.stdout, stop.stdout[-3000:]
    assert f"not drained:    node2 {worker_a}" in (ROOT / "artifacts" / run_id / "report.md").read_text()
    log = node("node2", "journalctl", "-u", "llmb-sglang-decode", "--since", "-5min", "--no-pager").stdout
    print(f"[drain e2e] llmb stop --group decode_a --no-drain ({stop_s:.1f} s) under the bench: {plain}")
    assert "Gracefully exiting... Remaining number of requests" in log, log[-2000:]
    assert plain["failed"] > 0, (plain, log[-2000:])
