"""Prefill/decode disaggregation on the simulated 2-node cluster: node1 the prefill group, node2 the
decode group, the REAL router package (sglang-router from the package index, the pin the engine
catalog names) on node1, the engine double in prefill/decode mode; then the decode group down,
reported by host and group.

The services run exactly the planner's argv for a 1P1D inventory of these two nodes (the engine's
interpreter replaced by the node's python3 with the double and the router on its path), as transient
systemd units. Shares the session's cluster (tests/e2e/conftest.py); costs a few seconds after it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from llmbctl.catalog import Catalog  # noqa: E402
from llmbctl.pdhealth import group_report  # noqa: E402
from llmbctl.planner import plan_inventory  # noqa: E402

VERSION = "0.5.23"
NODE_DIR = "/opt/llmb/pdsim"
MODEL_DIR = f"{NODE_DIR}/model"


def router_pin() -> str:
    rules = Catalog(ROOT / "data").engine_overlay("sglang")["pd_router"]
    return next(r["package"] for r in rules if r.get("package"))


@pytest.fixture(scope="module")
def router_site() -> Path:
    """The real router for the nodes' python 3.11 (Debian bookworm), installed once from the index."""
    pin = router_pin()
    target = ROOT / ".cache" / "disagg" / pin.replace("==", "-")
    if not (target / "sglang_router").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--target", str(target), "--python-version", "3.11", "--implementation", "cp",
                        "--platform", "manylinux2014_x86_64", "--only-binary=:all:", pin], check=True, timeout=600)
        py311 = shutil.which("python3.11")  # byte-compile for the nodes' 3.11: imports in seconds, not half a minute
        if py311:
            subprocess.run([py311, "-m", "compileall", "-q", str(target)], check=False, timeout=600)
    return target


def plan_1p1d(cluster) -> dict[str, dict]:
    ips = {n: cluster.ip(n) for n in ("node1", "node2")}
    shared = {
        "llmb_platform": "h800-hgx8", "llmb_model": "kimi-k2-sim", "llmb_engine": "sglang",
        "llmb_engine_version": VERSION, "llmb_install": "host", "llmb_model_dir": MODEL_DIR,
        "llmb_cluster_iface": "eth0", "llmb_api_port": 30000, "llmb_health_timeout_s": 60,
        "llmb_disaggregation": {
            "prefill": {"group": "prefill_nodes", "tensor_parallel": 8},
            "decode": {"group": "decode_nodes", "tensor_parallel": 8},
            "router": {"port": 8100}, "ib_device": "mlx5_0",
        },
    }
    hv = {n: dict(shared, ansible_host=ip, llmb_node_ip=ip) for n, ip in ips.items()}
    groups = {"all": ["node1", "node2"], "accel_nodes": ["node1", "node2"], "prefill_nodes": ["node1"],
              "decode_nodes": ["node2"]}
    return {h["host"]: h for h in plan_inventory(hv, groups, str(ROOT / "data")).to_list()}


def start_unit(cluster, node: str, svc: dict, pythonpath: str) -> None:
    argv = ["python3", *svc["argv"][1:]]  # the engine venv's interpreter -> the node's, with the double
    env = {**svc["env"], "PYTHONPATH": pythonpath, "LLMB_ENGINESIM_DATA": f"{NODE_DIR}/data",
           "LLMB_ENGINESIM_LOAD_SECONDS": "0.2", "LLMB_ENGINESIM_DEVICES": "8"}
    cluster.node(node, "systemctl", "stop", svc["name"], check=False)
    cluster.node(node, "systemctl", "reset-failed", svc["name"], check=False)
    cluster.node(node, "systemd-run", f"--unit={svc['name']}", *(f"--setenv={k}={v}" for k, v in env.items()),
                 "--", *argv)


def wait_http(url: str, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=3) as resp:
                status = resp.status
                if status == 200:
                    return status
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    return status or 0


def wait_models(url: str, name: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=3) as resp:
                if name in [m.get("id") for m in json.loads(resp.read()).get("data", [])]:
                    return True
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.3)
    return False


def chat(url: str, model: str) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/chat/completions", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": model, "max_tokens": 8,
                                                  "messages": [{"role": "user", "content": "ping"}]}).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read().decode(errors="replace")[:300]}


@pytest.fixture(scope="module")
def pd(cluster, router_site):
    t0 = time.monotonic()
    plans = plan_1p1d(cluster)
    for node in ("node1", "node2"):
        cluster.node(node, "rm", "-rf", NODE_DIR)
        cluster.node(node, "mkdir", "-p", f"{NODE_DIR}/data", MODEL_DIR)
        for src, dst in ((ROOT / "tests" / "enginesim", f"{NODE_DIR}/enginesim"),
                         (ROOT / "data" / "engines", f"{NODE_DIR}/data/engines")):
            subprocess.run(["docker", "cp", str(src), f"{cluster_name(cluster)}-{node}:{dst}"], check=True)
        config = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
                  "max_position_embeddings": 4096}
        cluster.node(node, "sh", "-c", f"echo {shlex.quote(json.dumps(config))} > {MODEL_DIR}/config.json")
    subprocess.run(["docker", "cp", str(router_site), f"{cluster_name(cluster)}-node1:{NODE_DIR}/router"], check=True)
    double_path = f"{NODE_DIR}:{NODE_DIR}/enginesim"
    prefill = next(s for s in plans["node1"]["services"] if s["role"] == "sglang-rank")
    decode = next(s for s in plans["node2"]["services"] if s["role"] == "sglang-rank")
    router = next(s for s in plans["node1"]["services"] if s["role"] == "router")
    steps = {"copy": time.monotonic() - t0}
    start_unit(cluster, "node1", prefill, double_path)
    start_unit(cluster, "node2", decode, double_path)
    for gate in router["after_healthy"]:  # as the serve stage does: the router after both groups
        assert wait_http(gate["url"]) == 200, (gate, logs(cluster))
    steps["groups healthy"] = time.monotonic() - t0 - sum(steps.values())
    start_unit(cluster, "node1", router, f"{NODE_DIR}/router")
    assert wait_http(router["health"]["url"], 90) == 200, logs(cluster)
    # the router answers /health before it registered its workers: ready once it lists the served name
    models = router["health"]["url"].rsplit("/", 1)[0] + "/v1/models"
    assert wait_models(models, router["api"]["served_model_name"]), logs(cluster)
    steps["router healthy"] = time.monotonic() - t0 - sum(steps.values())
    print("\n[disagg e2e] " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))
    yield {"plans": plans, "prefill": prefill, "decode": decode, "router": router, "setup_s": time.monotonic() - t0}
    for node, svc in (("node1", router), ("node1", prefill), ("node2", decode)):
        cluster.node(node, "systemctl", "kill", "--signal=KILL", svc["name"], check=False)
        cluster.node(node, "systemctl", "stop", svc["name"], check=False)
        cluster.node(node, "systemctl", "reset-failed", svc["name"], check=False)
    for node in ("node1", "node2"):
        cluster.node(node, "rm", "-rf", NODE_DIR, check=False)


def cluster_name(cluster) -> str:
    return os.environ.get("LLMB_E2E_CLUSTER", "e2e")  # the session's cluster (tests/e2e/conftest.py)


def logs(cluster) -> str:
    out = []
    for node, unit in (("node1", "llmb-sglang-prefill"), ("node2", "llmb-sglang-decode"),
                       ("node1", "llmb-sglang-router")):
        res = cluster.node(node, "journalctl", "-u", unit, "-n", "15", "--no-pager", check=False)
        out.append(f"--- {node} {unit}\n{res.stdout[-2500:]}")
    return "\n".join(out)


def test_1p1d_answers_through_the_real_router(cluster, pd):
    t0 = time.monotonic()
    router = pd["router"]
    assert router["argv"][1:4] == ["-m", "sglang_router.launch_router", "--pd-disaggregation"]
    status, body = chat(router["api"]["base_url"], router["api"]["served_model_name"])
    assert status == 200, (body, logs(cluster))
    assert body["choices"][0]["message"]["content"], body
    # the answer came from the decode worker after it fetched the prefill's KV over the bootstrap server
    decode_log = cluster.node("node2", "journalctl", "-u", "llmb-sglang-decode", "--no-pager").stdout
    assert f"received from {cluster.ip('node1')}:8998 over mlx5_0" in decode_log, decode_log[-2000:]
    prefill_log = cluster.node("node1", "journalctl", "-u", "llmb-sglang-prefill", "--no-pager").stdout
    assert "POST /v1/chat/completions" in prefill_log
    assert group_report(router["after_healthy"]) == []
    print(f"\n[disagg e2e] setup {pd['setup_s']:.1f} s, request {time.monotonic() - t0:.1f} s")


def test_decode_group_down_is_reported_by_host_and_group(cluster, pd):
    cluster.node("node2", "systemctl", "stop", "llmb-sglang-decode", check=False)
    report = group_report(pd["router"]["after_healthy"])
    assert len(report) == 1, report
    assert report[0].startswith("the decode group 'decode_nodes' is down: node 0 node2 "
                                f"(http://{cluster.ip('node2')}:30000/health)"), report
    status, body = chat(pd["router"]["api"]["base_url"], pd["router"]["api"]["served_model_name"])
    assert status >= 500, (status, body)
