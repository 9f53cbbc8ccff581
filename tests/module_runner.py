"""Run a module of plugins/modules/ as Ansible runs it: arguments in, one JSON result out (unit tests)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

ROOT = Path(__file__).resolve().parents[1]


def run_module(name: str, args: dict, monkeypatch, capsys, *, last_line: bool = False) -> dict:
    """The module's JSON result; `last_line` where the module's run also prints other lines first."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "plugins" / "modules" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    with pytest.raises(SystemExit):
        mod.main()
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1] if last_line else out)
