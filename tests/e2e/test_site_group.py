"""Issue 18 items 3-5 on the simulated cluster, after test_site.py (file order: the converged cluster):
the API is closed (the sim inventory sets llmb_api_key), the port check names a blocked port between
the two nodes before any service is touched, and a lost worker brings the whole group back in plan
order without Ansible.

Run alone: pytest tests/e2e/test_site.py::test_site_converges_all_stages tests/e2e/test_site_group.py
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

KEY = "sim-e2e-api-key-not-secret"  # inventories/sim/group_vars/all/serve.yml


def _http(url: str, token: str | None = None, body: dict | None = None, timeout: float = 5):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw or b"null")
        except ValueError:
            return err.code, raw
    except (urllib.error.URLError, OSError) as err:
        return None, str(err)


def _unit(cluster, node: str, unit: str, *props: str) -> dict:
    out = cluster.node(node, "systemctl", "show", "-p", ",".join(props), unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.fixture(scope="module")
def api(cluster):
    base = f"http://{cluster.ip('node1')}:8000"
    deadline = time.monotonic() + 120
    while _http(base + "/health")[0] != 200:
        if time.monotonic() > deadline:
            pytest.fail("the API of the converged cluster does not answer /health (run test_site.py first)")
        time.sleep(2)
    return base


def test_the_api_refuses_a_request_without_the_key(api):
    status, body = _http(api + "/v1/models")
    assert status == 401 and body == {"error": "Unauthorized"}, (status, body)
    chat = {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    assert _http(api + "/v1/chat/completions", body=chat)[0] == 401
    assert _http(api + "/v1/models", token="wrong")[0] == 401
    status, body = _http(api + "/v1/models", token=KEY)
    assert status == 200 and [m["id"] for m in body["data"]] == ["kimi-k2-sim"]
    assert _http(api + "/v1/chat/completions", token=KEY, body=chat)[0] == 200
    assert _http(api + "/health")[0] == 200  # open, as vLLM keeps it


def test_the_key_is_in_the_0600_env_file_and_nowhere_else_on_the_node(cluster, api):
    env = cluster.node("node1", "stat", "-c", "%a %U", "/etc/llmb/llmb-vllm.env").stdout.split()
    assert env == ["600", "root"]
    assert f'VLLM_API_KEY="{KEY}"' in cluster.node("node1", "cat", "/etc/llmb/llmb-vllm.env").stdout
    unit = cluster.node("node1", "cat", "/etc/systemd/system/llmb-vllm.service").stdout
    assert KEY not in unit
    pid = _unit(cluster, "node1", "llmb-vllm", "MainPID")["MainPID"]
    assert KEY not in cluster.node("node1", "cat", f"/proc/{pid}/cmdline").stdout


def test_the_port_check_names_a_blocked_port_before_any_service_is_touched(cluster, api):
    head = cluster.ip("node1")
    before = _unit(cluster, "node1", "llmb-vllm", "InvocationID")["InvocationID"]
    # the Ray GCS port, held by the running head: a firewall that drops (test_site.py rejects)
    rule = ["OUTPUT", "-p", "tcp", "-d", head, "--dport", "6379", "-j", "DROP"]
    cluster.node("node2", "iptables", "-A", *rule)
    try:
        t0 = time.monotonic()
        run = cluster.playbook("playbooks/serve.yml", "-e", '{"serve_smoke": false}')
        seconds = time.monotonic() - t0
    finally:
        cluster.node("node2", "iptables", "-D", *rule, check=False)
    assert run.rc != 0
    assert f"node2 -> node1 {head}:6379 (llmb-ray ray-gcs): no answer within 3 s" in run.out, run.out[-3000:]
    assert "no service was started" in run.out
    assert "Systemd services of level" not in run.out  # failed before the first start level
    assert _unit(cluster, "node1", "llmb-vllm", "InvocationID")["InvocationID"] == before
    print(f"port-check fault run: {seconds:.1f} s")


def test_a_lost_worker_restarts_the_group_in_plan_order_without_ansible(cluster, api):
    # a loss within 30 s of the last group restart is that restart's own start (llmb.grouptool settle):
    # let the fault tests' restarts settle first
    stamp = cluster.node("node1", "cat", "/run/llmb-group-restarted", check=False).stdout.strip()
    if stamp:
        node_now = float(cluster.node("node1", "date", "+%s.%N").stdout)
        time.sleep(max(0.0, 31 - (node_now - float(stamp))))
    before = {n: _unit(cluster, n, "llmb-ray", "InvocationID", "MainPID") for n in ("node1", "node2")}
    api_before = _unit(cluster, "node1", "llmb-vllm", "InvocationID")["InvocationID"]
    cluster.node("node2", "kill", "-9", before["node2"]["MainPID"])
    t0 = time.monotonic()
    deadline = t0 + 240
    while True:
        now = {n: _unit(cluster, n, "llmb-ray", "InvocationID", "ActiveState") for n in ("node1", "node2")}
        vllm = _unit(cluster, "node1", "llmb-vllm", "InvocationID", "ActiveState")
        status, body = _http(api + "/v1/models", token=KEY)
        if (status == 200 and vllm["InvocationID"] != api_before and vllm["ActiveState"] == "active"
                and all(now[n]["InvocationID"] != before[n]["InvocationID"] for n in now)
                and all(now[n]["ActiveState"] == "active" for n in now)):
            break
        if time.monotonic() > deadline:
            journal = cluster.node("node1", "journalctl", "-n", "60", "--no-pager", "-u", "llmb-group-restart",
                                   "-u", "llmb-ray", "-u", "llmb-vllm", check=False).stdout
            pytest.fail(f"the group did not come back within 240 s: ray {now}, vllm {vllm}, API {status}\n{journal}")
        time.sleep(2)
    seconds = time.monotonic() - t0
    # the head restarted it: its restart unit ran, the head's Ray before its API (plan order)
    log = cluster.node("node1", "journalctl", "--no-pager", "-o", "cat", "-u", "llmb-group-restart").stdout
    assert "restarting llmb-group.target here, then on 1 member node(s)" in log
    ray_start = int(_unit(cluster, "node1", "llmb-ray", "ExecMainStartTimestampMonotonic")[
        "ExecMainStartTimestampMonotonic"])
    api_start = int(_unit(cluster, "node1", "llmb-vllm", "ExecMainStartTimestampMonotonic")[
        "ExecMainStartTimestampMonotonic"])
    assert ray_start <= api_start
    chat = {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "back?"}], "max_tokens": 8}
    assert _http(api + "/v1/chat/completions", token=KEY, body=chat, timeout=30)[0] == 200
    print(f"group back in {seconds:.1f} s")
