"""plugins/modules/json_patch.py run as Ansible runs it (arguments in, one JSON result out), with
llmb.jsonpatch served as ansible.module_utils.llmb.jsonpatch: results, check mode, diff, failures."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from pathlib import Path

import llmb
import llmb.jsonpatch
import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

ROOT = Path(__file__).resolve().parents[3]
TEXT = '{\n    "model_type": "kimi_k2",\n    "rms_norm_eps": 1.0e-6,\n    "name": "caf\\u00e9"\n}'
TRTLLM = {"path": "model_type", "value": "deepseek_v3", "expect": "kimi_k2", "key": "trtllm"}


@pytest.fixture
def run_module(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ansible.module_utils.llmb", llmb)
    monkeypatch.setitem(sys.modules, "ansible.module_utils.llmb.jsonpatch", llmb.jsonpatch)

    def run(args: dict, check: bool = False, diff: bool = False) -> dict:
        spec = importlib.util.spec_from_file_location("json_patch", ROOT / "plugins" / "modules" / "json_patch.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        full = {**args, "_ansible_check_mode": check, "_ansible_diff": diff}
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": full})))
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
        with pytest.raises(SystemExit):
            mod.main()
        return json.loads(capsys.readouterr().out)

    return run


@pytest.fixture
def cfg(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(TEXT)
    return p


def test_module_patches_only_the_value_and_keeps_the_original(run_module, cfg):
    out = run_module({"path": str(cfg), "patches": [TRTLLM]})
    assert not out.get("failed"), out
    assert out["changed"] is True and out["orig_saved"] is True and out["orig"] == f"{cfg}.orig"
    assert out["changes"] == [{"path": "model_type", "before": "kimi_k2", "after": "deepseek_v3", "changed": True}]
    assert cfg.read_text() == TEXT.replace("kimi_k2", "deepseek_v3")
    assert Path(f"{cfg}.orig").read_text() == TEXT
    again = run_module({"path": str(cfg), "patches": [TRTLLM]})
    assert again["changed"] is False and again["orig_saved"] is False


def test_module_check_mode_with_diff_tells_the_truth(run_module, cfg):
    out = run_module({"path": str(cfg), "patches": [TRTLLM]}, check=True, diff=True)
    assert out["changed"] is True and out["orig_saved"] is True
    assert out["diff"]["before"] == TEXT
    assert out["diff"]["after"] == TEXT.replace('"kimi_k2"', '"deepseek_v3"')
    assert cfg.read_text() == TEXT and sorted(os.listdir(cfg.parent)) == ["config.json"]


def test_module_fails_on_a_duplicate_key_naming_file_key_and_place(run_module, cfg):
    cfg.write_text('{"model_type": "kimi_k2",\n "model_type": "x"}')
    out = run_module({"path": str(cfg), "patches": [TRTLLM]})
    assert out["failed"] is True
    assert out["msg"].startswith(f'json_patch {cfg}: {cfg} at line 2 column 2: duplicate key "model_type" at '
                                 "the top level (first at line 1 column 2)")
    assert out["msg"].endswith("the file was left untouched")
    assert "Traceback" not in out["msg"]
    assert sorted(os.listdir(cfg.parent)) == ["config.json"]


def test_module_fails_on_a_dangling_backup_link(run_module, cfg):
    os.symlink(cfg.parent / "missing", f"{cfg}.orig")
    out = run_module({"path": str(cfg), "patches": [TRTLLM]}, check=True)
    assert out["failed"] is True and "is a symbolic link to" in out["msg"] and "which does not exist" in out["msg"]
    assert cfg.read_text() == TEXT


def test_module_fails_on_a_fifo_without_hanging(run_module, tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    box = {}
    t = threading.Thread(target=lambda: box.update(run_module({"path": str(fifo), "patches": [TRTLLM]})),
                         daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "json_patch blocked on a FIFO"
    assert box["failed"] is True and "is a named pipe (FIFO), not a regular file" in box["msg"]


def test_module_fails_on_an_unexpected_value(run_module, cfg):
    out = run_module({"path": str(cfg), "patches": [{**TRTLLM, "expect": "llama"}]})
    assert out["failed"] is True
    assert 'path model_type: expected "llama" before setting "deepseek_v3", found "kimi_k2"' in out["msg"]
    assert cfg.read_text() == TEXT
