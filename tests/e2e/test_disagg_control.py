"""The PD router on a control node, on a simulated 3-node cluster of its own: node1 the prefill group,
node2 the decode group (accel_nodes), node3 a host outside accel_nodes (group control_nodes) named by
llmb_disaggregation.router.host. The engine stage installs the router's package alone on node3 (its
dry run says so), the serve stage starts the groups and then the router on node3, whose smoke test
answers through the REAL router; the report expects of node3 only what runs there.

Its own cluster (not the session's 2-node one): LLMB_E2E_CTL_CLUSTER names it (default e2e-ctl);
LLMB_E2E_REUSE=1 reuses one that is up, LLMB_E2E_KEEP=1 leaves it up.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import KEEP, SIM
from perf_common import run_playbook
from test_disagg import MODEL_DIR, NODE_DIR, PD_VARS, WHEELHOUSE, chat, pd_cluster

ROOT = Path(__file__).resolve().parents[2]
NAME = os.environ.get("LLMB_E2E_CTL_CLUSTER", "e2e-ctl")
ROUTER = "llmb-sglang-router"
UNITS = {"node1": "llmb-sglang-prefill", "node2": "llmb-sglang-decode", "node3": ROUTER}


def node(name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", f"{NAME}-{name}", *cmd], capture_output=True, text=True, check=check)


def control_inventory(sim_hosts: Path, where: Path) -> Path:
    """The cluster's hosts regrouped: node1 prefill, node2 decode under accel_nodes, node3 in control_nodes;
    the connection variables of the cluster for all of them; the router on node3."""
    src = yaml.safe_load(sim_hosts.read_text())["all"]["children"]["accel_nodes"]
    hosts = src["hosts"]
    where.mkdir(parents=True, exist_ok=True)
    (where / "hosts.yml").write_text(json.dumps({"all": {"vars": src["vars"], "children": {
        "accel_nodes": {"children": {"prefill_nodes": {"hosts": {"node1": hosts["node1"]}},
                                     "decode_nodes": {"hosts": {"node2": hosts["node2"]}}}},
        "control_nodes": {"hosts": {"node3": hosts["node3"]}}}}}, indent=2) + "\n")
    pd = dict(PD_VARS["llmb_disaggregation"], router={"port": 8100, "host": "node3"})
    (where / "group_vars").mkdir(exist_ok=True)
    (where / "group_vars" / "all.yml").write_text(json.dumps({**PD_VARS, "llmb_disaggregation": pd}, indent=2) + "\n")
    return where


def playbook(inv: Path, log_dir: Path, run_id: str, name: str, *args: str):
    return run_playbook(inv, name, *args, run_id=run_id, log_dir=log_dir, log_name=Path(name).stem)


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    t0 = time.monotonic()
    inv, doc, wheels = pd_cluster(NAME, control_inventory, tmp_path_factory.mktemp("ctl-inventory"))
    venv = doc["engine"]["venv"]
    for n in UNITS:
        node(n, "rm", "-rf", NODE_DIR, venv)
        node(n, "mkdir", "-p", MODEL_DIR, WHEELHOUSE)
        subprocess.run(["docker", "cp", f"{wheels}/.", f"{NAME}-{n}:{WHEELHOUSE}"], check=True)
    config = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "max_position_embeddings": 4096}
    for n in ("node1", "node2"):  # the control node holds no weights
        node(n, "sh", "-c", f"echo {shlex.quote(json.dumps(config))} > {MODEL_DIR}/config.json")
    run_id = f"ctl-{int(time.time())}"
    logs = tmp_path_factory.mktemp("ctl-logs")
    env_off = ("-e", '{"serve_health_timeout_s": 90}')
    pre = playbook(inv, logs, run_id, "playbooks/preflight.yml")
    dry = playbook(inv, logs, run_id + "-dry", "playbooks/engine.yml", "--check", "--diff")
    engine = playbook(inv, logs, run_id, "playbooks/engine.yml")
    serve = playbook(inv, logs, run_id, "playbooks/serve.yml", *env_off) if engine.rc == 0 else None
    print(f"\n[control-node e2e] setup and stages {time.monotonic() - t0:.1f} s")
    yield {"doc": doc, "inv": inv, "venv": venv, "pre": pre, "dry": dry, "engine": engine, "serve": serve, "logs": logs,
           "run_id": run_id,
           "artifacts": ROOT / "artifacts" / run_id}
    for n, unit in UNITS.items():
        node(n, "systemctl", "stop", unit, check=False)
        node(n, "rm", "-rf", NODE_DIR, venv, check=False)
    if not KEEP:
        subprocess.run([SIM, "down", "--name", NAME], capture_output=True)


def test_the_deployment_puts_the_router_on_the_control_node(ctl):
    hosts = ctl["doc"]["hosts"]
    assert list(hosts) == ["node1", "node2", "node3"]
    assert hosts["node3"]["control"] is True and [s["name"] for s in hosts["node3"]["plan"]["services"]] == [ROUTER]
    assert hosts["node3"]["packages"] == ["sglang-router==0.3.2"]
    assert ROUTER not in [s["name"] for h in ("node1", "node2") for s in hosts[h]["plan"]["services"]]


def test_preflight_reaches_the_control_node_and_skips_its_driver_check(ctl):
    pre = ctl["pre"]
    assert pre.rc == 0, pre.out[-3000:]
    # one round per node (llmb_preflight); the control node has no nvidia-smi, so its driver check (which
    # would find "not reported") is not asked of it, and it passes
    task = pre.out.split("TASK [Node answers", 1)[1].split("TASK [", 1)[0]
    assert "ok: [node1]" in task and "ok: [node3]" in task and "engine.driver" not in task, task
    assert re.search(r"node3\s+: ok=\d+ .*failed=0", pre.out), pre.out[-1500:]


def test_the_engine_stage_installs_the_routers_package_alone_on_the_control_node(ctl):
    assert ctl["dry"].rc == 0, ctl["dry"].out[-4000:]
    text = " ".join(ctl["dry"].out.split())
    m = re.search(r"node3: would install into \S+: (.*?)(?:\(control node: no engine\))", text)
    assert m and m.group(1).split() == ["sglang-router==0.3.2"], text[-3000:]
    assert re.search(r"node1: would install into \S+: sglang\[all\]==", text) or "node1: would install" in text
    assert ctl["engine"].rc == 0, ctl["engine"].out[-4000:]
    py = f"{ctl['venv']}/bin/python"
    probe = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
    assert node("node3", py, "-c", probe, "sglang-router").stdout.strip() == "0.3.2"
    assert node("node3", py, "-c", probe, "sglang", check=False).returncode != 0  # no engine there
    assert node("node1", py, "-c", probe, "sglang").stdout.strip() == PD_VARS["llmb_engine_version"]
    assert node("node1", py, "-c", probe, "sglang-router", check=False).returncode != 0
    # a second run changes nothing on the control node (the probe of its packages, no engine probe)
    again = playbook(ctl["inv"], ctl["logs"], ctl["run_id"] + "-again", "playbooks/engine.yml")
    assert again.rc == 0, again.out[-2500:]
    assert "node3: installs into" not in " ".join(again.out.split()), again.out[-2500:]


def test_the_serve_stage_starts_the_router_on_the_control_node_and_answers_through_it(ctl):
    serve = ctl["serve"]
    assert serve is not None and serve.rc == 0, (serve.out[-5000:] if serve else "engine stage failed")
    assert node("node3", "systemctl", "is-active", ROUTER).stdout.strip() == "active"
    assert node("node1", "systemctl", "is-active", ROUTER, check=False).stdout.strip() != "active"
    api = ctl["doc"]["hosts"]["node3"]["plan"]["services"][0]["api"]
    status, body = chat(api["base_url"], api["served_model_name"])
    assert status == 200 and body["choices"][0]["message"]["content"], body
    with urllib.request.urlopen(api["base_url"].rsplit("/v1", 1)[0] + "/health", timeout=5) as resp:
        assert resp.status == 200
    record = json.loads((ctl["artifacts"] / "serve" / "node3.json").read_text())
    assert record["ok"] is True


def test_the_report_expects_of_the_control_node_what_ran_there(ctl):
    from llmb.report import write_report

    rep = write_report(str(ctl["artifacts"]), ["engine", "serve"])
    assert rep["verdict"] == "OK", rep["failed"]
    assert rep["control"] == ["node3"] and rep["expected"] == 6  # engine and serve on all three
    assert "<th>node3 (control node: router)</th>" in (ctl["artifacts"] / "report.html").read_text()
