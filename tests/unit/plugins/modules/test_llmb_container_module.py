"""plugins/modules/llmb_container.py run as Ansible runs it (arguments in, one JSON result out),
against a fake docker CLI on PATH (tests/fakedocker.py, its state in a JSON file)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import llmb
import llmb.container
import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

ROOT = Path(__file__).resolve().parents[4]
sys.modules.setdefault("ansible.module_utils.llmb", llmb)
sys.modules.setdefault("ansible.module_utils.llmb.container", llmb.container)

IMAGE = "lmsysorg/sglang:v0.5.5"
DIGEST = "sha256:" + "5" * 64


def run_module(args: dict, monkeypatch, capsys) -> dict:
    spec = importlib.util.spec_from_file_location("llmb_container", ROOT / "plugins" / "modules" / "llmb_container.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    with pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


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
