"""plugins/modules/llmb_container.py run as Ansible runs it (arguments in, one JSON result out),
against a fake docker CLI on PATH (tests/fakedocker.py, its state in a JSON file)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import llmb
import llmb.container
import pytest
from module_runner import run_module as _run_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
sys.modules.setdefault("ansible.module_utils.llmb", llmb)
sys.modules.setdefault("ansible.module_utils.llmb.container", llmb.container)

IMAGE = "lmsysorg/sglang:v0.5.5"
DIGEST = "sha256:" + "5" * 64


def run_module(args: dict, monkeypatch, capsys) -> dict:
    return _run_module("llmb_container", args, monkeypatch, capsys)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    docker = bindir / "docker"
    docker.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                      "from fakedocker import main\nsys.exit(main())\n")
    docker.chmod(0o755)
    state = tmp_path / "docker.json"
    state.write_text(json.dumps({"images": {IMAGE: {"Id": "sha256:" + "e" * 64, "RepoDigests": [f"lmsysorg/sglang@{DIGEST}"]}}}))
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(state))
    return state


ARGS = {
    "name": "llmb-sglang",
    "image": IMAGE,
    "digest": DIGEST,
    "argv": ["-m", "sglang.launch_server", "--model-path", "/m"],
    "env": {"NCCL_SOCKET_IFNAME": "eth0"},
    "secret_env": {"HF_TOKEN": "hf_secret_token_value"},
    "options": {"network": "host", "entrypoint": "python3"},
    "host": "node1",
    "settle_s": 0,
}


def test_module_creates_then_leaves_alone_and_check_mode_is_true(fake, monkeypatch, capsys):
    out = run_module({**ARGS, "_ansible_check_mode": True}, monkeypatch, capsys)
    assert out["changed"] and out["action"] == "create"
    assert json.loads(fake.read_text())["containers"] == {}
    out = run_module(ARGS, monkeypatch, capsys)
    assert out["changed"] and out["action"] == "create" and "<env-file>" in out["cmd"]
    assert "hf_secret_token_value" not in json.dumps(out)
    assert json.loads(fake.read_text())["env_files"] == ["HF_TOKEN=hf_secret_token_value\nNCCL_SOCKET_IFNAME=eth0\n"]
    assert out["diff"]["after"]["spec_hash"] == out["spec_hash"]
    out = run_module(ARGS, monkeypatch, capsys)
    assert out["changed"] is False and out["action"] == "none"
    out = run_module({**ARGS, "argv": ["-m", "sglang.launch_server", "--model-path", "/m2"], "_ansible_check_mode": True},
                     monkeypatch, capsys)
    assert out["changed"] and out["action"] == "replace"
    state = json.loads(fake.read_text())
    assert not [c for c in state["calls"][-3:] if c[1] in ("run", "rm")]


def test_module_fault_carries_host_container_and_cause(fake, monkeypatch, capsys):
    out = run_module({**ARGS, "devices": ["/dev/llmb-no-such-device"]}, monkeypatch, capsys)
    assert out["failed"] and out["cause"] == "device-missing"
    assert out["host"] == "node1" and out["container"] == "llmb-sglang"
    assert out["msg"].startswith("node1: container llmb-sglang: device /dev/llmb-no-such-device is missing")


def test_module_without_docker_names_the_engine_stage(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    out = run_module(ARGS, monkeypatch, capsys)
    assert out["failed"] and out["cause"] == "no-docker" and "engine stage" in out["msg"]


# ------------------------------------------------------------------------------ llmb_service_ready
def run_ready(args: dict, monkeypatch, capsys) -> dict:
    import llmb.ready
    import llmb.serve

    sys.modules.setdefault("ansible.module_utils.llmb.serve", llmb.serve)
    sys.modules.setdefault("ansible.module_utils.llmb.ready", llmb.ready)
    return _run_module("llmb_service_ready", args, monkeypatch, capsys)


def test_ray_worker_container_that_cannot_reach_the_head_is_not_joined(fake, monkeypatch, capsys):
    import socket

    doc = json.loads(fake.read_text())
    doc["containers"] = {"kimi-K2": {"State": {"Status": "running", "Running": True, "Pid": os.getpid()},
                                     "_logs": "ray start: waiting for the GCS at 127.0.0.1"}}
    fake.write_text(json.dumps(doc))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: the head is unreachable
    out = run_ready({"name": "kimi-K2", "kind": "container", "host": "mi300x-02", "role": "ray-worker",
                     "ready": {"type": "connected", "host": "127.0.0.1", "port": port, "timeout_s": 1},
                     "interval_s": 1, "log_lines": 5}, monkeypatch, capsys)
    assert out["failed"] and out["cause"] == "not-joined"
    assert out["msg"].startswith("mi300x-02: kimi-K2 (container): not ready within 1s: the ray-worker holds no "
                                 f"established TCP connection to the Ray head's GCS at 127.0.0.1:{port}")
    assert "does not accept TCP from this node" in out["msg"] and "waiting for the GCS" in out["msg"]


def test_exec_unit_fails_at_once_when_its_container_is_gone(fake, tmp_path, monkeypatch, capsys):
    bindir = Path(os.environ["PATH"].split(":")[0])
    (bindir / "systemctl").write_text("#!/bin/sh\necho ActiveState=active; echo SubState=running; echo NRestarts=0\n")
    (bindir / "systemctl").chmod(0o755)
    (bindir / "journalctl").write_text("#!/bin/sh\necho 'vllm serve: lost the Ray cluster'\n")
    (bindir / "journalctl").chmod(0o755)
    out = run_ready({"name": "kimi-K2-serve", "kind": "exec", "exec_in": "kimi-K2", "host": "mi300x-01",
                     "health": {"url": "http://127.0.0.1:9/health", "timeout_s": 30}}, monkeypatch, capsys)
    assert out["failed"] and out["cause"] == "gone" and out["waited_s"] < 5
    assert out["msg"].startswith("mi300x-01: kimi-K2-serve (exec): its container kimi-K2 is gone after")
    assert "lost the Ray cluster" in out["msg"]
