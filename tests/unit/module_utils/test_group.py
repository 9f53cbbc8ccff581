"""The serving group restarts as one: its view from the deployment document (llmb.serve.group_view),
the unit lines it adds, and the node-side tool (llmb.grouptool) with systemctl and ssh stubbed."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llmb import grouptool as G
from llmb.serve import group_restart_unit, group_target, group_view, systemd_unit
from llmbctl import deployment as D

sys.path.insert(0, str(Path(__file__).resolve().parent / "planner"))
from planner_helpers import load_inventory  # noqa: E402

TOOL = ["/usr/bin/python3", "/opt/llmb/bin/llmb-group"]
CFG = "/etc/llmb/ssh-mesh/ssh_config"


def _view(inv: str, host: str):
    return group_view(D.resolve(*load_inventory(inv)), host, TOOL, CFG)


def test_the_ray_group_head_restarts_its_members_and_a_worker_waits_for_the_gcs():
    head, worker = _view("sim", "node1"), _view("sim", "node2")
    assert head["is_head"] and head["members"] == ["172.30.0.12"] and head["units"] == ["llmb-ray", "llmb-vllm"]
    assert head["deps"] == {"llmb-vllm": ["llmb-ray"]} and head["waits"] == {}
    assert not worker["is_head"] and worker["members"] == [] and worker["head_address"] == "172.30.0.11"
    assert worker["waits"] == {"llmb-ray": [["172.30.0.11", 6379]]}


@pytest.mark.parametrize("inv,port", [("h800-dp-ep", 13345), ("h200-sglang", 50000)])
def test_a_headless_rank_waits_for_the_heads_readiness_port(inv, port):
    doc = D.resolve(*load_inventory(inv))
    head, member = sorted(doc["hosts"], key=lambda h: doc["hosts"][h]["rank"])
    view = group_view(doc, member, TOOL, CFG)
    (unit,) = view["units"]
    assert view["waits"] == {unit: [[doc["hosts"][head]["address"], port]]}
    assert group_view(doc, head, TOOL, CFG)["members"] == [doc["hosts"][member]["address"]]


def test_one_node_has_no_group_and_a_container_is_no_unit_to_bind_to():
    assert _view("h100", "gpu-h100-01") is None
    trt = _view("h200-trtllm", "gpu-h200-01")
    assert trt["units"] == ["llmb-trtllm-launcher"] and trt["deps"] == {} and trt["members"] == []
    assert _view("h200-trtllm", "gpu-h200-02") is None  # only the sshd container there


def test_units_of_a_group_carry_partof_bindsto_the_wait_and_the_loss_hook():
    doc = D.resolve(*load_inventory("sim"))
    svcs = {s["name"]: s for s in doc["hosts"]["node1"]["plan"]["services"]}
    text = systemd_unit(svcs["llmb-vllm"], "/etc/llmb", group_view(doc, "node1", TOOL, CFG))
    assert "PartOf=llmb-group.target\nBindsTo=llmb-ray.service\nAfter=llmb-ray.service\n" in text
    assert ("ExecStopPost=/usr/bin/python3 /opt/llmb/bin/llmb-group stopped llmb-vllm --head local "
            f"--ssh-config {CFG}\n") in text
    worker = doc["hosts"]["node2"]["plan"]["services"][0]
    text = systemd_unit(worker, "/etc/llmb", group_view(doc, "node2", TOOL, CFG))
    assert "ExecStartPre=/usr/bin/python3 /opt/llmb/bin/llmb-group wait 172.30.0.11 6379 600\n" in text
    assert "--head 172.30.0.11 " in text
    plain = systemd_unit(worker, "/etc/llmb")
    assert "PartOf" not in plain and "ExecStopPost" not in plain and "ExecStartPre" not in plain


def test_the_target_wants_the_nodes_units_and_the_restart_unit_names_the_members():
    view = _view("sim", "node1")
    assert "Wants=llmb-ray.service llmb-vllm.service\n" in group_target(view)
    assert ("ExecStart=/usr/bin/python3 /opt/llmb/bin/llmb-group restart --settle 30 --ssh-config "
            f"{CFG} 172.30.0.12\n") in group_restart_unit(view)


# --- the node-side tool -------------------------------------------------------------------------
@pytest.fixture()
def calls(monkeypatch):
    seen: list[list[str]] = []

    def fake_run(argv, **kw):
        seen.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(G.subprocess, "run", fake_run)
    return seen


def test_a_stop_asked_for_is_no_loss(calls):
    assert G.stopped("llmb-ray", "10.0.0.1", CFG, {"SERVICE_RESULT": "success"}, jobs=lambda: "") == 0
    assert calls == []


def test_rank_0_ending_with_status_0_by_itself_is_a_loss(calls):
    """vLLM 0.26.0 on the 4x H200 (faults/kill-rank): node 2 killed, the next request failed in NCCL
    ("remote process exited"), and node rank 0's API then exited with status 0 - $SERVICE_RESULT
    success. With no stop job of systemd for the unit that is a loss: the head restarts the group."""
    exited0 = {"SERVICE_RESULT": "success", "EXIT_CODE": "exited", "EXIT_STATUS": "0"}
    assert G.stopped("llmb-vllm", "local", CFG, exited0, jobs=lambda: "") == 0
    assert calls == [["systemctl", "--no-block", "start", "llmb-group-restart.service"]]
    calls.clear()
    # the same exit during `systemctl stop` / a group restart (a job for the unit) is no loss
    for job in ("stop", "restart"):
        jobs = f"1234 llmb-vllm.service {job} running\n1235 llmb-group.target {job} waiting\n"
        assert G.stopped("llmb-vllm", "local", CFG, exited0, jobs=lambda j=jobs: j) == 0
    # a SIGTERM'd process (EXIT_CODE killed) with success is a stop as before, whatever the jobs
    assert G.stopped("llmb-vllm", "local", CFG, {"SERVICE_RESULT": "success", "EXIT_CODE": "killed",
                                                 "EXIT_STATUS": "TERM"}, jobs=lambda: "") == 0
    assert calls == []
    assert G.stop_asked("llmb-vllm.service", "7 llmb-vllm.service stop running") is True
    assert G.stop_asked("llmb-vllm.service", "7 llmb-ray.service stop running") is False


def test_a_killed_member_asks_the_head_over_the_mesh(calls):
    assert G.stopped("llmb-ray", "10.0.0.1", CFG, {"SERVICE_RESULT": "signal", "EXIT_CODE": "killed"}) == 0
    assert calls == [["ssh", "-F", CFG, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "10.0.0.1", "--",
                      "systemctl", "--no-block", "start", "llmb-group-restart.service"]]


def test_a_lost_unit_on_the_head_starts_the_restart_there(calls):
    G.stopped("llmb-vllm", "local", CFG, {"SERVICE_RESULT": "exit-code"})
    assert calls == [["systemctl", "--no-block", "start", "llmb-group-restart.service"]]


def test_the_restart_is_head_first_then_every_member_and_settles(calls, tmp_path):
    stamp = str(tmp_path / "stamp")
    assert G.restart(["10.0.0.2", "10.0.0.3"], CFG, 30, stamp) == 0
    assert calls[0] == ["systemctl", "restart", "llmb-group.target"]
    assert sorted(c[7] for c in calls[1:]) == ["10.0.0.2", "10.0.0.3"]
    assert all(c[-4:] == ["systemctl", "--no-block", "restart", "llmb-group.target"] for c in calls[1:])
    calls.clear()
    assert G.restart(["10.0.0.2"], CFG, 30, stamp) == 0  # within 30 s: the restart's own start
    assert calls == []
    Path(stamp).write_text(f"{time.time() - 31}\n")
    G.restart(["10.0.0.2"], CFG, 30, stamp)
    assert calls and calls[0] == ["systemctl", "restart", "llmb-group.target"]


def test_wait_returns_once_the_port_answers_and_fails_after_the_timeout():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        assert G.wait("127.0.0.1", port, 5) == 0
    assert G.wait("127.0.0.1", port, 0.5) == 1


def test_the_command_line_is_checked():
    assert G.main(["bogus"]) == 2
    assert G.main(["stopped", "u", "--head"]) == 2
