"""llmb_stage_gate as Ansible runs it: check before any record, record, check again, drift, check mode."""

from __future__ import annotations

import json
import sys

import llmb
import llmb.fsutil
import llmb.stagegate

sys.modules.setdefault("ansible.module_utils.llmb", llmb)
sys.modules.setdefault("ansible.module_utils.llmb.fsutil", llmb.fsutil)
sys.modules.setdefault("ansible.module_utils.llmb.stagegate", llmb.stagegate)

from module_runner import run_module  # noqa: E402


def _args(tmp_path, action, digest="sha256:d1", **more):
    (tmp_path / "etc").mkdir(exist_ok=True)
    return {"action": action, "stage": "ssh_mesh", "digest": digest, "state_dir": str(tmp_path / "state"),
            "watch": {"hash": [f"{tmp_path}/etc/*"]}, **more}


def test_record_then_converged_then_drift_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/known_hosts").write_text("a\n")
    first = run_module("llmb_stage_gate", _args(tmp_path, "check"), monkeypatch, capsys)
    assert first["converged"] is False and first["changed"] is False
    assert first["differs"] == ["no record of a converged run of this stage on the node"]
    rec = run_module("llmb_stage_gate", _args(tmp_path, "record"), monkeypatch, capsys)
    assert rec["changed"] is False  # the toolkit's bookkeeping, never a change
    saved = json.loads((tmp_path / "state/stages/ssh_mesh.json").read_text())
    assert saved["digest"] == "sha256:d1" and saved["stage"] == "ssh_mesh"
    assert run_module("llmb_stage_gate", _args(tmp_path, "check"), monkeypatch, capsys)["converged"] is True
    (tmp_path / "etc/known_hosts").write_text("b\n")
    drift = run_module("llmb_stage_gate", _args(tmp_path, "check"), monkeypatch, capsys)
    assert drift["converged"] is False and any("known_hosts" in d for d in drift["differs"]), drift


def test_check_mode_writes_no_record(tmp_path, monkeypatch, capsys):
    out = run_module("llmb_stage_gate", _args(tmp_path, "record", _ansible_check_mode=True), monkeypatch, capsys)
    assert out["changed"] is False
    assert not (tmp_path / "state").exists()


def test_bad_watch_fails_naming_the_key(tmp_path, monkeypatch, capsys):
    args = _args(tmp_path, "check")
    args["watch"] = {"files": ["/x"]}
    out = run_module("llmb_stage_gate", args, monkeypatch, capsys)
    assert out["failed"] is True and "llmb_stage_gate ssh_mesh: watch: unknown key(s) files" in out["msg"]


def test_check_all_answers_every_stage_in_one_call(tmp_path, monkeypatch, capsys):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/known_hosts").write_text("a\n")
    run_module("llmb_stage_gate", _args(tmp_path, "record"), monkeypatch, capsys)
    w = {"hash": [f"{tmp_path}/etc/*"]}
    out = run_module("llmb_stage_gate", {"action": "check_all", "state_dir": str(tmp_path / "state"),
                                         "stages": {"ssh_mesh": {"digest": "sha256:d1", "watch": w},
                                                    "serve": {"digest": "sha256:s", "watch": w}}},
                     monkeypatch, capsys)
    assert out["changed"] is False
    assert out["verdicts"]["ssh_mesh"]["converged"] is True and out["verdicts"]["ssh_mesh"]["digest"] == "sha256:d1"
    assert out["verdicts"]["serve"]["converged"] is False


def test_check_all_needs_stages_and_check_needs_a_digest(tmp_path, monkeypatch, capsys):
    out = run_module("llmb_stage_gate", {"action": "check_all", "state_dir": str(tmp_path)}, monkeypatch, capsys)
    assert out["failed"] is True and "stages" in out["msg"]
    out = run_module("llmb_stage_gate", {"action": "check", "stage": "serve", "watch": {}, "state_dir": str(tmp_path)},
                     monkeypatch, capsys)
    assert out["failed"] is True and "digest" in out["msg"]
