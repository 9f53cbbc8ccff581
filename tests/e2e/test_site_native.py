"""Issue 23 on the simulated cluster, after test_site.py (the converged cluster, Ray as the sample
says): the same TP8 x PP2 over 2 nodes with vLLM's own multi-node launch (`-e
llmb_vllm_multinode=native`): node rank 0 serving the API and a `--headless` node rank 1, the units
written from the plan, the API answering, and a lost headless node bringing the whole group back in
plan order without Ansible; then the sample's Ray launch again.

Switching a running cluster between the launches: the serve stage stops, disables and removes the
units the plan no longer has (the Ray head and worker here, node2's headless unit on the way back).

Run alone: LLMB_E2E_CLUSTER=multinode-e2e pytest tests/e2e/test_site.py::test_site_converges_all_stages \
    tests/e2e/test_site_native.py
"""

from __future__ import annotations

import time

import pytest
from test_site_group import KEY, _http, _unit


@pytest.fixture(scope="module")
def native(cluster):
    run = cluster.playbook("playbooks/serve.yml", "-e", "llmb_vllm_multinode=native")
    assert run.rc == 0, run.out[-4000:]
    yield f"http://{cluster.ip('node1')}:8000"
    back = cluster.playbook("playbooks/serve.yml")  # the sample's Ray launch again
    assert back.rc == 0, back.out[-4000:]
    # node2's headless unit is not in the Ray plan: gone; the Ray units are back
    assert not cluster.node("node2", "test", "-e", "/etc/systemd/system/llmb-vllm.service", check=False).returncode == 0
    assert _unit(cluster, "node2", "llmb-ray", "ActiveState")["ActiveState"] == "active"


def _execstart(cluster, node: str) -> str:
    return cluster.node(node, "systemctl", "show", "-p", "ExecStart", "--value", "llmb-vllm").stdout


def test_the_native_launch_runs_node_rank_0_and_a_headless_node(cluster, native):
    head, other = _execstart(cluster, "node1"), _execstart(cluster, "node2")
    head_ip = cluster.ip("node1")
    for argv in (head, other):
        assert "--nnodes 2" in argv and f"--master-addr {head_ip}" in argv and "--master-port 29501" in argv
        assert "--distributed-executor-backend" not in argv
    assert "--node-rank 0" in head and "--headless" not in head
    assert "--node-rank 1" in other and "--headless" in other
    # the Ray units of the sample's launch: stopped, disabled and removed by the serve stage
    for node in ("node1", "node2"):
        assert _unit(cluster, node, "llmb-ray", "ActiveState")["ActiveState"] != "active"
        assert cluster.node(node, "test", "-e", "/etc/systemd/system/llmb-ray.service", check=False).returncode != 0
    chat = {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "native?"}], "max_tokens": 8}
    assert _http(native + "/v1/chat/completions", token=KEY, body=chat, timeout=30)[0] == 200
    log = cluster.node("node1", "journalctl", "--no-pager", "-o", "cat", "-u", "llmb-vllm").stdout
    assert "All 2 nodes joined (TP 8 x PP 2 = 16 ranks)" in log


def test_a_lost_headless_node_restarts_the_group_in_plan_order_without_ansible(cluster, native):
    stamp = cluster.node("node1", "cat", "/run/llmb-group-restarted", check=False).stdout.strip()
    if stamp:  # a loss within 30 s of the last group restart is that restart's own start
        node_now = float(cluster.node("node1", "date", "+%s.%N").stdout)
        time.sleep(max(0.0, 31 - (node_now - float(stamp))))
    before = {n: _unit(cluster, n, "llmb-vllm", "InvocationID", "MainPID") for n in ("node1", "node2")}
    cluster.node("node2", "kill", "-9", before["node2"]["MainPID"])
    t0 = time.monotonic()
    while True:
        now = {n: _unit(cluster, n, "llmb-vllm", "InvocationID", "ActiveState") for n in ("node1", "node2")}
        status, _ = _http(native + "/v1/models", token=KEY)
        if status == 200 and all(now[n]["InvocationID"] != before[n]["InvocationID"]
                                 and now[n]["ActiveState"] == "active" for n in now):
            break
        if time.monotonic() - t0 > 240:
            journal = cluster.node("node1", "journalctl", "-n", "60", "--no-pager", "-u", "llmb-group-restart",
                                   "-u", "llmb-vllm", check=False).stdout
            pytest.fail(f"the group did not come back within 240 s: {now}, API {status}\n{journal}")
        time.sleep(2)
    # node rank 0 does not see its headless node go (the real vLLM 0.26.0 stayed up with /health 200,
    # docs/examples/serve-real-multinode/faults/kill-rank/; the double does the same): the lost unit's
    # ExecStopPost= (llmb-group stopped) had the head's restart unit bring both back
    log = cluster.node("node1", "journalctl", "--no-pager", "-o", "cat", "-u", "llmb-vllm").stdout
    assert "is gone" not in log
    restart = cluster.node("node1", "journalctl", "--no-pager", "-o", "cat", "-u", "llmb-group-restart").stdout
    assert "restarting llmb-group.target here, then on 1 member node(s)" in restart
    head_start = int(_unit(cluster, "node1", "llmb-vllm", "ExecMainStartTimestampMonotonic")[
        "ExecMainStartTimestampMonotonic"])
    assert head_start > 0
    print(f"group back in {time.monotonic() - t0:.1f} s")
