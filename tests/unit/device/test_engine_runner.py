"""tests/device/engine-runner and its systemctl/journalctl stand-ins: what llmb_service_ready reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llmb.serve import engine_error_line, parse_systemctl_show, unit_verdict

ROOT = Path(__file__).resolve().parents[3]
RUNNER = ROOT / "tests" / "device" / "engine-runner"
BIN = ROOT / "tests" / "device" / "bin"


def _plan(tmp: Path, argv: list[str], env: dict) -> Path:
    p = tmp / "plan.json"
    p.write_text(json.dumps([{"host": "h1", "services": [{"name": "svc", "argv": argv, "env": env}]}]))
    return p


def _sh(*args: str, state: Path) -> str:
    env = dict(os.environ, LLMB_RUNNER_STATE=str(state), PATH=f"{BIN}:{os.environ['PATH']}")
    return subprocess.run(list(args), env=env, capture_output=True, text=True, check=True).stdout


def _wait(state: Path, pred, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        props = parse_systemctl_show(_sh("systemctl", "show", "svc", "-p",
                                         "ActiveState,SubState,NRestarts,ExecMainStatus,Result", state=state))
        if pred(props) or time.monotonic() > deadline:
            return props
        time.sleep(0.1)


def test_runs_the_plans_argv_and_env_and_reports_a_running_then_stopped_unit(tmp_path):
    st = tmp_path / "st"
    argv = [sys.executable, "-c", "import os, time; print('up', os.environ['X_PLAN'], flush=True); time.sleep(60)"]
    _sh(sys.executable, str(RUNNER), "start", "--plan", str(_plan(tmp_path, argv, {"X_PLAN": "a b"})),
        "--host", "h1", "--service", "svc", state=st)
    props = _wait(st, lambda p: p.get("ActiveState") == "active")
    assert props["SubState"] == "running" and unit_verdict(props, 0) is None
    pid = int(_sh("systemctl", "show", "svc", "-p", "MainPID", "--value", state=st))
    assert pid > 0 and Path(f"/proc/{pid}").exists()
    for _ in range(50):
        if "up a b" in _sh("journalctl", "-u", "svc", "-n", "5", "--no-pager", "-o", "cat", state=st):
            break
        time.sleep(0.1)
    assert "up a b" in _sh("journalctl", "-u", "svc", "-n", "5", "--no-pager", "-o", "cat", state=st)
    _sh(sys.executable, str(RUNNER), "stop", "--service", "svc", state=st)
    props = _wait(st, lambda p: p.get("ActiveState") != "active")
    assert props["ActiveState"] == "inactive" and unit_verdict(props, 0) == "unit is not running (inactive)"


def test_an_engine_that_dies_is_a_failed_unit_with_its_error_in_the_log(tmp_path):
    st = tmp_path / "st"
    argv = [sys.executable, "-c", "import sys; print('vllm: error: unrecognized arguments: --x 1', file=sys.stderr); "
            "sys.exit(2)"]
    _sh(sys.executable, str(RUNNER), "start", "--plan", str(_plan(tmp_path, argv, {})), "--host", "h1",
        "--service", "svc", state=st)
    props = _wait(st, lambda p: p.get("ActiveState") == "failed")
    assert unit_verdict(props, 0) == "unit failed (exit status 2, exit-code)"
    log = _sh("journalctl", "-u", "svc", "-n", "40", state=st)
    assert engine_error_line(log) == "vllm: error: unrecognized arguments: --x 1"


def _group_state(tmp: Path, argv: list[str], group: dict) -> Path:
    st = tmp / "st"
    st.mkdir()
    (st / "plan.json").write_text(json.dumps([{"host": "h1", "address": "127.0.0.1",
                                                "services": [{"name": "svc", "argv": argv, "env": {}, "order": 10}]}]))
    (st / "group.json").write_text(json.dumps(group))
    return st


def _starts(st: Path) -> int:
    f = st / "svc.starts"
    return len(f.read_text().split()) if f.exists() else 0


def _until(pred, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_group_unit_that_ends_by_itself_has_the_head_restart_the_group_and_a_stop_ends_it(tmp_path, monkeypatch):
    """The units' machinery on the emulated nodes, without Ansible: status 0 by itself (vLLM's rank 0 after a
    lost node) -> ExecStopPost= `llmb-group stopped` (the project's tool, $SERVICE_RESULT success, $EXIT_STATUS 0,
    no stop job) -> llmb-group-restart.service on the head -> llmb-group.target restarted here in plan order;
    a stop asked for restarts nothing."""
    argv = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(1.5)"]
    st = _group_state(tmp_path, argv, {"is_head": True, "units": ["svc"], "members": [], "waits": {},
                                       "ssh_config": "/nonexistent", "settle_s": 0})
    if not os.access("/run", os.W_OK):  # the group tool's stamp of its last restart (/run/llmb-group-restarted)
        pytest.skip("/run is not writable here")
    monkeypatch.setenv("LLMB_RUNNER_RESTART_SEC", "30")  # Restart= later than the group's restart
    _sh(sys.executable, str(RUNNER), "start", "--plan", str(st / "plan.json"), "--host", "h1", "--service", "svc",
        state=st)
    assert _until(lambda: _starts(st) >= 2), (st / "svc.log").read_text()
    log = (st / "svc.log").read_text()
    assert "ExecStopPost: " in log and "stopped svc --head local" in log
    assert "SERVICE_RESULT=success EXIT_CODE=exited EXIT_STATUS=0" in log
    assert "restarting the group from the head (local)" in log
    assert "restart --settle 0" in (st / "llmb-group-restart.log").read_text()
    _sh(sys.executable, str(RUNNER), "stop", "--service", "svc", state=st)
    n = _starts(st)
    time.sleep(2.5)
    assert _starts(st) == n and not (st / "svc.restarts").exists()


def test_a_member_waits_for_the_heads_port_and_restart_applies_without_a_head(tmp_path, monkeypatch):
    """ExecStartPre= `llmb-group wait` holds a member's engine until the head's port listens; Restart= (with
    RestartForceExitStatus=0) starts a unit again that the group tool could not hand to a head."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    argv = [sys.executable, "-c", "print('member up', flush=True)"]
    st = _group_state(tmp_path, argv, {"is_head": False, "head_address": "127.0.0.1", "units": ["svc"],
                                       "waits": {"svc": [["127.0.0.1", port]]}, "wait_s": 60,
                                       "ssh_config": "/nonexistent"})
    monkeypatch.setenv("LLMB_RUNNER_RESTART_SEC", "0.5")
    _sh(sys.executable, str(RUNNER), "start", "--plan", str(st / "plan.json"), "--host", "h1", "--service", "svc",
        state=st)
    time.sleep(1.5)
    assert _starts(st) == 0 and (st / "svc.waiting").read_text().strip() == f"127.0.0.1:{port}"
    srv.listen()
    try:
        assert _until(lambda: _starts(st) >= 2), (st / "svc.log").read_text()
        assert "restarted by Restart=" in (st / "svc.log").read_text()
    finally:
        _sh(sys.executable, str(RUNNER), "stop", "--service", "svc", state=st)
        srv.close()


def test_the_relay_unit_starts_and_stops_through_the_systemd_run_and_systemctl_stand_ins(tmp_path, monkeypatch):
    """The compile cache peer copy on the emulated nodes: the weights relay's own start/stop (systemd-run
    --unit=..., systemctl stop UNIT.service) answered by tests/device/bin without systemd."""
    import socket
    import urllib.request

    from llmb.weights import relay

    monkeypatch.setenv("PATH", f"{ROOT / 'tests/device/bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LLMB_RUNNER_STATE", str(tmp_path / "st"))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.bin").write_bytes(b"cache")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    got = relay.start(port, "127.0.0.1", str(tmp_path / "d"), "llmb-cache-relay-t", timeout=20)
    assert got["stale_rc"] == 5  # nothing left before: "not loaded", which the relay takes as stopped
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/f.bin", timeout=5).read() == b"cache"
    assert relay.stop("llmb-cache-relay-t") == {"rc": 0}
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/f.bin", timeout=2)
    assert relay.stop("llmb-cache-relay-t") == {"rc": 5}
