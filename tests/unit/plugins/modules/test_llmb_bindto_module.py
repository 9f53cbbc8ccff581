"""plugins/modules/llmb_bindto.py run as Ansible runs it, with llmb.bindto served as ansible.module_utils.llmb."""

from __future__ import annotations

import sys
from pathlib import Path

import llmb
import llmb.bindto
import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.modules.setdefault("ansible.module_utils.llmb", llmb)
sys.modules.setdefault("ansible.module_utils.llmb.bindto", llmb.bindto)

from module_runner import run_module  # noqa: E402

SOURCE = (ROOT / "roles" / "serve" / "files" / "llmb-bindto.c").read_text()
needs_cc = pytest.mark.skipif(not any(llmb.bindto.shutil.which(c) for c in llmb.bindto.COMPILERS),
                              reason="no C compiler")


@needs_cc
def test_builds_then_reports_no_change(tmp_path, monkeypatch, capsys):
    args = {"source": SOURCE, "dest": str(tmp_path / "lib" / "llmb-bindto.so"), "host": "node1"}
    first = run_module("llmb_bindto", args, monkeypatch, capsys)
    assert first["changed"] is True and first["stamp"] == llmb.bindto.stamp_of(SOURCE)
    again = run_module("llmb_bindto", args, monkeypatch, capsys)
    assert again["changed"] is False and again["compiler"] is None


def test_a_node_without_a_compiler_fails_naming_the_host_and_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(llmb.bindto.shutil, "which", lambda name: None)
    out = run_module("llmb_bindto", {"source": SOURCE, "dest": str(tmp_path / "x.so"), "host": "node7"},
                     monkeypatch, capsys)
    assert out["failed"] and out["msg"].startswith("node7: no C compiler")
    assert "llmb_confine_listeners: false" in out["msg"]
