"""Prefill/decode disaggregation on the simulated 2-node cluster: node1 the prefill group, node2 the
decode group, the REAL router package (sglang-router from the package index, the pin the engine
catalog names) on node1, the engine double in prefill/decode mode; then the decode group down,
reported by host and group.

Everything the services run comes from the engine stage (playbooks/engine.yml on a 1P1D inventory
of these two nodes): the packages each host needs are the deployment document's
(hosts.<h>.packages, from the launch plan), installed into the engine venv from the nodes'
wheelhouse, which holds the double as `sglang`, the real router with its dependencies for the
nodes' Python 3.11 (downloaded once on the controller), and a stand-in for the KV transfer
library. The engine stage's dry run on the fresh venv names the router's package first. The
services then run exactly the planner's argv, as transient systemd units. Shares the session's
cluster (tests/e2e/conftest.py).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import SIM, sim_inventory

ROOT = Path(__file__).resolve().parents[2]

from llmbctl.pdhealth import group_report  # noqa: E402

VERSION = "0.5.23"
NODE_DIR = "/opt/llmb/pdsim"
MODEL_DIR = f"{NODE_DIR}/model"
WHEELHOUSE = "/opt/llmb/wheelhouse"  # the sim cluster's (scripts/sim-cluster --engine-double)
PD_VARS = {
    "llmb_platform": "h800-hgx8", "llmb_model": "kimi-k2-sim", "llmb_engine": "sglang",
    "llmb_engine_version": VERSION, "llmb_install": "host", "llmb_model_dir": MODEL_DIR,
    "llmb_cluster_iface": "eth0", "llmb_api_port": 30000, "llmb_health_timeout_s": 60,
    "llmb_disaggregation": {
        "prefill": {"group": "prefill_nodes", "tensor_parallel": 8},
        "decode": {"group": "decode_nodes", "tensor_parallel": 8},
        "router": {"port": 8100}, "ib_device": "mlx5_0",
    },
    # the engine stage offline, from the nodes' wheelhouse, with their own Python (inventories/sim)
    "engine_host_wheelhouse": WHEELHOUSE, "engine_host_python": "3.11", "engine_host_torch_backend": "",
}


def pd_inventory(cluster, where: Path) -> Path:
    """The cluster's hosts with the 1P1D variables and groups: a directory inventory."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(cluster.inventory, where / "hosts.yml")
    (where / "pd.yml").write_text(json.dumps({"all": {"children": {
        "prefill_nodes": {"hosts": {"node1": {}}}, "decode_nodes": {"hosts": {"node2": {}}}}}}, indent=2) + "\n")
    (where / "group_vars").mkdir(exist_ok=True)
    (where / "group_vars" / "all.yml").write_text(json.dumps(PD_VARS, indent=2) + "\n")
    return where


def deployment(cluster, inv: Path) -> dict:
    """The deployment document stage 0 writes for the inventory (scripts/launch-plan --deployment)."""
    vault = ["--vault-password-file", cluster.vault_password_file] if cluster.vault_password_file else []
    out = subprocess.run([str(ROOT / "scripts/launch-plan"), "-i", str(inv), "--deployment", *vault],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def pd_wheels(packages: list[str]) -> Path:
    """The wheels the plan's packages need, for the nodes' Python 3.11 (built or downloaded once):
    the double as sglang==VERSION, the router with its dependencies from the index, and an empty
    stand-in for the KV transfer library (the double moves no KV: tests/enginesim/pd.py)."""
    target = ROOT / ".cache" / "wheelhouse-pd"
    target.mkdir(parents=True, exist_ok=True)
    build = ROOT / "tests" / "enginesim" / "build_wheel.py"
    py = str(ROOT / ".venv/bin/python")
    subprocess.run([py, str(build), str(target), "--name", "sglang", "--version", VERSION], check=True,
                   capture_output=True)
    for req in packages:
        name, version = req.split("==")
        wheel = f"{re.sub(r'[-.]+', '_', name.lower())}-{version}-"
        if any(p.name.lower().startswith(wheel) for p in target.glob("*.whl")):
            continue
        if name.startswith(("mooncake", "nixl")):
            subprocess.run([py, str(build), str(target), "--name", name, "--version", version, "--stub",
                            name.split("-")[0]], check=True, capture_output=True)
        else:  # the real package (the router): its wheels and its dependencies' for the nodes
            subprocess.run([py, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(target),
                            "--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
                            "--only-binary=:all:", req], check=True, timeout=600)
    return target


def pd_cluster(name: str, regroup, where: Path) -> tuple[Path, dict, Path]:
    """A 3-node simulated cluster ``name`` (reused as it is with LLMB_E2E_REUSE=1), its hosts regrouped by
    ``regroup(sim_hosts, where)`` into a prefill/decode inventory, the deployment document stage 0 writes
    for it, and the wheels its planned packages need (pd_wheels)."""
    if not (os.environ.get("LLMB_E2E_REUSE") == "1" and (ROOT / ".cache/sim" / name / "hosts.yml").exists()):
        subprocess.run([SIM, "up", "--name", name, "--nodes", "3", "--profile", "h800-hgx8", "--engine-double",
                        "--vars-from", str(ROOT / "inventories/sim"), "--login", "sudo"], check=True)
    inv = regroup(sim_inventory(name), where)
    out = subprocess.run([str(ROOT / "scripts/launch-plan"), "-i", str(inv), "--deployment"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    return inv, doc, pd_wheels(list(dict.fromkeys(p for h in doc["hosts"].values() for p in h["packages"])))


def would_install(out: str) -> list[tuple[str, str]]:
    """(host, what) of each "<host>: would install into <venv>: ..." message of a dry run (lines
    joined: the callback may fold a long message)."""
    text = " ".join(out.split())
    found = []
    for m in re.finditer(r"(node\d): would install into \S+: ", text):
        rest = text[m.end():]
        stop = re.search(r"would install into|TASK \[|ok: \[|changed: \[", rest)
        found.append((m.group(1), rest[: stop.start() if stop else 400]))
    return found


def plan_of(doc: dict) -> dict[str, dict]:
    return {name: h["plan"] for name, h in doc["hosts"].items()}


def start_unit(cluster, node: str, svc: dict) -> None:
    argv = svc["argv"]  # the planner's, run by the engine venv the engine stage installed
    env = {**svc["env"], "LLMB_ENGINESIM_LOAD_SECONDS": "0.2", "LLMB_ENGINESIM_DEVICES": "8"}
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
def pd(cluster, tmp_path_factory):
    t0 = time.monotonic()
    pdc = copy.copy(cluster)
    pdc.inventory = pd_inventory(cluster, tmp_path_factory.mktemp("pd-inventory"))
    doc = deployment(cluster, pdc.inventory)
    plans = plan_of(doc)
    packages = [p for h in doc["hosts"].values() for p in h["packages"]]
    wheels = pd_wheels(list(dict.fromkeys(packages)))
    venv = doc["engine"]["venv"]
    for node in ("node1", "node2"):
        for unit in ("llmb-sglang-prefill", "llmb-sglang-decode", "llmb-sglang-router"):
            cluster.node(node, "systemctl", "stop", unit, check=False)
        cluster.node(node, "rm", "-rf", NODE_DIR, venv)
        cluster.node(node, "mkdir", "-p", MODEL_DIR, WHEELHOUSE)
        # the nodes' wheelhouse gets the wheels; nothing is copied into the venv
        subprocess.run(["docker", "cp", f"{wheels}/.", f"{cluster_name(cluster)}-{node}:{WHEELHOUSE}"], check=True)
        config = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
                  "max_position_embeddings": 4096}
        cluster.node(node, "sh", "-c", f"echo {shlex.quote(json.dumps(config))} > {MODEL_DIR}/config.json")
    steps = {"wheels": time.monotonic() - t0}
    # the engine stage, dry run first on the fresh venv: it says what it would install, per host
    dry = pdc.playbook("playbooks/engine.yml", "--check", "--diff")
    assert dry.rc == 0, dry.out[-4000:]
    steps["engine dry run"] = time.monotonic() - t0 - sum(steps.values())
    run = pdc.playbook("playbooks/engine.yml")
    assert run.rc == 0, run.out[-4000:]
    steps["engine stage"] = time.monotonic() - t0 - sum(steps.values())
    prefill = next(s for s in plans["node1"]["services"] if s["role"] == "sglang-rank")
    decode = next(s for s in plans["node2"]["services"] if s["role"] == "sglang-rank")
    router = next(s for s in plans["node1"]["services"] if s["role"] == "router")
    start_unit(cluster, "node1", prefill)
    start_unit(cluster, "node2", decode)
    for gate in router["after_healthy"]:  # as the serve stage does: the router after both groups
        assert wait_http(gate["url"]) == 200, (gate, logs(cluster))
    steps["groups healthy"] = time.monotonic() - t0 - sum(steps.values())
    start_unit(cluster, "node1", router)
    assert wait_http(router["health"]["url"], 90) == 200, logs(cluster)
    # the router answers /health before it registered its workers: ready once it lists the served name
    models = router["health"]["url"].rsplit("/", 1)[0] + "/v1/models"
    assert wait_models(models, router["api"]["served_model_name"]), logs(cluster)
    steps["router healthy"] = time.monotonic() - t0 - sum(steps.values())
    print("\n[disagg e2e] " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))
    yield {"doc": doc, "plans": plans, "prefill": prefill, "decode": decode, "router": router, "dry": dry,
           "inventory": pdc.inventory,
           "run": run, "venv": venv, "setup_s": time.monotonic() - t0}
    for node, svc in (("node1", router), ("node1", prefill), ("node2", decode)):
        cluster.node(node, "systemctl", "kill", "--signal=KILL", svc["name"], check=False)
        cluster.node(node, "systemctl", "stop", svc["name"], check=False)
        cluster.node(node, "systemctl", "reset-failed", svc["name"], check=False)
    for node in ("node1", "node2"):
        cluster.node(node, "rm", "-rf", NODE_DIR, venv, check=False)


def cluster_name(cluster) -> str:
    return os.environ.get("LLMB_E2E_CLUSTER", "e2e")  # the session's cluster (tests/e2e/conftest.py)


def logs(cluster) -> str:
    out = []
    for node, unit in (("node1", "llmb-sglang-prefill"), ("node2", "llmb-sglang-decode"),
                       ("node1", "llmb-sglang-router")):
        res = cluster.node(node, "journalctl", "-u", unit, "-n", "15", "--no-pager", check=False)
        out.append(f"--- {node} {unit}\n{res.stdout[-2500:]}")
    return "\n".join(out)


def test_the_engine_stage_installs_what_each_host_runs(cluster, pd):
    """The router's package on the router host, from the engine stage: named by the dry run on the
    fresh venv, then installed at its pin in the engine venv (not on node2, which runs no router)."""
    router_pkg = pd["router"]["packages"][0]
    assert router_pkg.startswith("sglang-router==")
    assert pd["doc"]["hosts"]["node1"]["packages"][-1] == router_pkg
    assert router_pkg not in pd["doc"]["hosts"]["node2"]["packages"]
    would = would_install(pd["dry"].out)
    assert any(h == "node1" and router_pkg in line for h, line in would), would
    assert any(h == "node2" and router_pkg not in line for h, line in would), would
    name, version = router_pkg.split("==")
    py = f"{pd['venv']}/bin/python"
    probe = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
    assert cluster.node("node1", py, "-c", probe, name).stdout.strip() == version
    assert cluster.node("node2", py, "-c", probe, name, check=False).returncode != 0
    assert pd["router"]["argv"][0] == py  # the router runs from the engine venv


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


def test_llmb_stop_drains_the_decode_group_under_load(cluster, pd):
    """`llmb stop --group decode_nodes` (issue 27) while 8 clients send chat requests through the real
    router; the decode double's completions take 1 s, so requests are in flight when the stop comes.
    The router takes the decode worker out of rotation first (llmb_router_worker, delegated to the
    router's host) and its requests in flight finish: none of them fails. Requests sent after the
    group left rotation are refused by the router (503: 1P1D has no other decode group); both counts
    are printed. The decode group is then started again as the fixture started it and put back. The
    same stop without the drain, with two decode groups under the project's bench:
    tests/e2e/test_drain_bench.py."""
    import threading

    from llmb import router as R

    router, decode = pd["router"], pd["decode"]
    base, worker = router["health"]["url"].rsplit("/", 1)[0], decode["health"]["url"].rsplit("/", 1)[0]
    model = router["api"]["served_model_name"]

    def start_decode(request_s: str) -> None:
        env = {**decode["env"], "LLMB_ENGINESIM_LOAD_SECONDS": "0.2", "LLMB_ENGINESIM_DEVICES": "8",
               "LLMB_ENGINESIM_REQUEST_SECONDS": request_s}
        cluster.node("node2", "systemctl", "stop", decode["name"], check=False)
        cluster.node("node2", "systemctl", "reset-failed", decode["name"], check=False)
        cluster.node("node2", "systemd-run", f"--unit={decode['name']}", *(f"--setenv={k}={v}" for k, v in env.items()),
                     "--", *decode["argv"])
        assert wait_http(decode["health"]["url"]) == 200, logs(cluster)
        R.add(base, worker, "decode", timeout_s=60)
        deadline = time.monotonic() + 60
        while chat(router["api"]["base_url"], model)[0] != 200 and time.monotonic() < deadline:
            time.sleep(1)

    def refused_by_router(status: int, body: str) -> bool:
        """The router's own 503 when it has no prefill/decode pair to send a request to (sglang-router
        0.3.2: code server_selection_failed): a request refused, not one broken in flight."""
        return status == 503 and ("server_selection_failed" in body or "decode" in body.lower())

    start_decode("1")
    results: list[tuple[int, str]] = []
    done = threading.Event()

    def client() -> None:
        while not done.is_set():
            try:
                status, body = chat(router["api"]["base_url"], model)
            except (urllib.error.URLError, OSError) as exc:  # a connection broken in flight
                status, body = 0, {"error": str(exc)}
            results.append((status, json.dumps(body)[:600]))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(3)
    vault = {"ANSIBLE_VAULT_PASSWORD_FILE": cluster.vault_password_file} if cluster.vault_password_file else {}
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_RUN_ID", "LLMB_ARTIFACTS_DIR")} | vault
    run_id = f"pd-stop-{int(time.time() * 1000)}"
    inv = pd["inventory"]
    stop = subprocess.run([str(ROOT / ".venv/bin/llmb"), "stop", "-i", str(inv), "--group", "decode_nodes",
                           "-e", f"weights_hf_endpoint={cluster.hf_url}", "-e", "serve_drain_s=5", "--run-id", run_id],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    done.set()
    for t in threads:
        t.join(60)
    try:
        assert stop.returncode == 0, stop.stdout[-4000:] + stop.stderr[-2000:]
        rec = json.loads((ROOT / "artifacts" / run_id / "stop" / "node2.json").read_text())
        assert [d[0] for d in rec["drained"]] == [worker], rec
        assert cluster.node("node2", "systemctl", "is-active", decode["name"], check=False).stdout.strip() != "active"
        ok = sum(1 for st, _ in results if st == 200)
        refused = [b for st, b in results if refused_by_router(st, b)]
        broken = [(st, b) for st, b in results if st != 200 and not refused_by_router(st, b)]
        print(f"\n[pd stop under load] {len(results)} requests: {ok} ok, {len(broken)} failed in flight, "
              f"{len(refused)} refused after the decode group left rotation; drain {rec['drained']}")
        assert ok > 0 and broken == [], broken[:5]
    finally:
        start_decode("0")


def test_decode_group_down_is_reported_by_host_and_group(cluster, pd):
    cluster.node("node2", "systemctl", "stop", "llmb-sglang-decode", check=False)
    report = group_report(pd["router"]["after_healthy"])
    assert len(report) == 1, report
    assert report[0].startswith("the decode group 'decode_nodes' is down: node 0 node2 "
                                f"(http://{cluster.ip('node2')}:30000/health)"), report
    status, body = chat(pd["router"]["api"]["base_url"], pd["router"]["api"]["served_model_name"])
    assert status >= 500, (status, body)
