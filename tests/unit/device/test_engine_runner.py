"""tests/device/engine-runner and its systemctl/journalctl stand-ins: what llmb_service_ready reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

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
