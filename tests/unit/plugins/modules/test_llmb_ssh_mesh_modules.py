"""plugins/modules/llmb_ssh_mesh_probe.py and llmb_ssh_mesh_check.py run as Ansible runs them
(arguments in, one JSON result out), with llmb.sshmesh served as ansible.module_utils.llmb."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import llmb
import llmb.sshmesh
import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.modules.setdefault("ansible.module_utils.llmb", llmb)
sys.modules.setdefault("ansible.module_utils.llmb.sshmesh", llmb.sshmesh)


from module_runner import run_module  # noqa: E402


@pytest.fixture
def host_key(tmp_path: Path) -> Path:
    key = tmp_path / "ssh_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key.with_suffix(".pub")


def test_probe_reads_keys_and_listeners(host_key, tmp_path, monkeypatch, capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        out = run_module("llmb_ssh_mesh_probe", {
            "user": "root", "host_keys": [str(host_key)],
            "optional_host_keys": [str(tmp_path / "absent.pub")], "ports": [port]}, monkeypatch, capsys)
    finally:
        s.close()
    assert not out.get("failed") and out["changed"] is False
    assert out["host_keys"][str(host_key)] == " ".join(host_key.read_text().split()[:2])
    assert out["missing_host_keys"] == [str(tmp_path / "absent.pub")]
    assert out["listeners"][str(port)][0]["pid"] is not None
    assert out["home"] == "/root" and out["hostname"] == socket.gethostname()


def test_probe_missing_host_key_names_host_and_file(tmp_path, monkeypatch, capsys):
    out = run_module("llmb_ssh_mesh_probe", {"host_keys": [str(tmp_path / "nokey.pub")]}, monkeypatch, capsys)
    assert out["failed"] and f"{socket.gethostname()}: host key {tmp_path / 'nokey.pub'}" in out["msg"]


def test_check_reports_pairs_and_fails_on_request(monkeypatch, capsys):
    args = {"targets": [{"name": "nobody", "address": "127.0.0.1"}], "port": 1, "timeout": 2, "attempts": 1,
            "config": "/dev/null", "me": "n1", "order": ["n1", "nobody"]}
    out = run_module("llmb_ssh_mesh_check", args, monkeypatch, capsys)
    assert not out.get("failed") and out["failed_pairs"] == 1 and out["pairs"][0]["target"] == "nobody"
    out = run_module("llmb_ssh_mesh_check", {**args, "fail_on_error": True}, monkeypatch, capsys)
    assert out["failed"] and out["msg"].startswith("n1 -> nobody (127.0.0.1:1): SSH with BatchMode failed")
    assert out["pairs"][0]["ok"] is False  # the row is still returned for the matrix


def test_check_refuses_targets_without_address(monkeypatch, capsys):
    out = run_module("llmb_ssh_mesh_check", {"targets": [{"name": "x"}]}, monkeypatch, capsys)
    assert out["failed"] and "need name and address" in out["msg"]
