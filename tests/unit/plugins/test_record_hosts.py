"""llmb_record (plugins/action/llmb_record.py) with ``hosts``: a stage the fast path found converged on
every host writes each host's result in one task (playbooks/tasks/stage_result_converged.yml), the same
file a per-host run writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail

REPO = Path(__file__).resolve().parents[3]


def _action():
    spec = importlib.util.spec_from_file_location("llmb_record_action", REPO / "plugins" / "action" / "llmb_record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return object.__new__(mod.ActionModule)  # act() needs no Ansible task around it


CLOCK = {"hostvars": {"localhost": {"llmb_stage_started": "2026-11-27T09:00:00.000000Z"}}}


def test_hosts_writes_each_hosts_result_as_a_per_host_run_does(tmp_path):
    args = {"artifacts_dir": str(tmp_path), "stage": "weights", "host": None, "hosts": ["n1", "n2"],
            "data": {"source": None, "action": None, "fetch": {}}}
    got = _action().act(args, {"inventory_hostname": "n1", **CLOCK}, {})
    assert got["changed"] is False and [Path(p).name for p in got["paths"]] == ["n1.json", "n2.json"]
    one = _action().act({**args, "hosts": [], "host": None}, {"inventory_hostname": "n3", **CLOCK}, {})
    per_host = json.loads(Path(one["path"]).read_text())
    for host in ("n1", "n2"):
        doc = json.loads((tmp_path / "weights" / f"{host}.json").read_text())
        assert doc["host"] == host and doc["started"] == per_host["started"] and doc["started"].startswith("2026-11-27T09:00")
        assert {k: v for k, v in doc.items() if k not in ("host", "finished", "duration_s")} == \
            {k: v for k, v in per_host.items() if k not in ("host", "finished", "duration_s")}


def test_host_and_hosts_together_are_refused(tmp_path):
    args = {"artifacts_dir": str(tmp_path), "stage": "engine", "host": "n1", "hosts": ["n2"], "data": {}}
    with pytest.raises(AnsibleActionFail, match="host or hosts, not both"):
        _action().act(args, {}, {})
