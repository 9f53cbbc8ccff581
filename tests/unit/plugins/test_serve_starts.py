"""The serve record's start history (llmbctl.serveresult.record_serve) through its two writers: llmb_record
(roles/serve/tasks/report.yml, each run that started something) carries the previous record's ``starts``
over and appends the run's health waits; llmb_serve_converged (the converged fast path) starts nothing and
carries the history over unchanged; a previous record that cannot be used starts a fresh history with a
warning naming the host and the file."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from llmb.starthistory import CAP
from llmbctl.serveresult import record_serve

REPO = Path(__file__).resolve().parents[3]
CLOCK = {"localhost": {"llmb_stage_started": "2026-11-27T09:00:00.000000Z"}}


def _load(name):
    spec = importlib.util.spec_from_file_location(f"{name}_action", REPO / "plugins" / "action" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    act = object.__new__(mod.ActionModule)  # act() needs no Ansible task around it
    act._task = SimpleNamespace(check_mode=False)
    return act


def _report_yml_run(tmp_path, host, healthy, cache, started=("llmb-vllm",), since=None):
    """What roles/serve/tasks/report.yml hands llmb_record."""
    args = {"artifacts_dir": str(tmp_path), "stage": "serve", "host": None, "hosts": [],
            "data": {"services": ["llmb-vllm"], "restarted": [], "smoke": [], "healthy": healthy,
                     "compile_cache": cache, "started_services": list(started), "since_start_s": since or {}}}
    return _load("llmb_record").act(args, {"inventory_hostname": host, "hostvars": CLOCK}, {})


def _starts(tmp_path, host):
    return json.loads((tmp_path / "serve" / f"{host}.json").read_text())["starts"]


def test_each_run_appends_its_health_waits_to_the_previous_history(tmp_path):
    _report_yml_run(tmp_path, "node1", [["llmb-vllm", 250.5]], {"llmb-vllm": "cold"})
    got = _report_yml_run(tmp_path, "node1", [["llmb-vllm", 160.0]], {"llmb-vllm": "warm"}, since={"llmb-vllm": 171.5})
    assert "warnings" not in got
    # a per-host run that started nothing here (another host changed): healthy at once, no start
    _report_yml_run(tmp_path, "node1", [["llmb-vllm", 0.1]], {"llmb-vllm": "warm"}, started=())
    starts = _starts(tmp_path, "node1")
    assert [(s["service"], s["compile_cache"], s["waited_s"], s["since_start_s"]) for s in starts] == \
        [("llmb-vllm", "cold", 250.5, None), ("llmb-vllm", "warm", 160.0, 171.5)]
    assert all(s["at"].endswith("Z") for s in starts)
    # the record is still the run's own: its healthy is this run's wait alone
    assert json.loads((tmp_path / "serve" / "node1.json").read_text())["healthy"] == [["llmb-vllm", 0.1]]
    assert not (tmp_path / "serve" / "node2.json").exists()  # one host's history is its own


def test_the_history_keeps_the_last_cap_starts_of_a_service(tmp_path):
    for i in range(CAP + 3):
        record_serve(str(tmp_path), "node1", {"healthy": [["llmb-vllm", float(i)]], "compile_cache": {},
                                              "started_services": ["llmb-vllm"]})
    assert [s["waited_s"] for s in _starts(tmp_path, "node1")] == [float(i) for i in range(3, CAP + 3)]


def test_the_converged_fast_path_carries_the_history_over(tmp_path):
    _report_yml_run(tmp_path, "n1", [["llmb-vllm", 250.5]], {"llmb-vllm": "cold"})
    before = _starts(tmp_path, "n1")
    # n1 serves no API here: the fast path records it without a smoke test
    hosts = {"n1": {"plan": {"services": [{"name": "llmb-vllm", "api": None}]}}, "n2": {"plan": None}}
    got = _load("llmb_serve_converged").act(
        {"artifacts_dir": str(tmp_path), "document_hosts": hosts, "hosts": ["n1", "n2"], "smoke": True,
         "tool_choice": "auto", "timeout_s": 10}, {"hostvars": CLOCK}, {})
    assert got["recorded"] is True and "warnings" not in got
    doc = json.loads((tmp_path / "serve" / "n1.json").read_text())
    assert doc["healthy"] == [] and doc["starts"] == before  # nothing started, nothing lost
    assert _starts(tmp_path, "n2") == []
    # the llmb_record hosts form (every host's result in one task) carries it over too
    _load("llmb_record").act({"artifacts_dir": str(tmp_path), "stage": "serve", "host": None, "hosts": ["n1"],
                              "data": {"services": ["llmb-vllm"], "restarted": [], "healthy": [], "compile_cache": {}}},
                             {"hostvars": CLOCK}, {})
    assert _starts(tmp_path, "n1") == before


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object, found list"),
    ('{"starts": "all of them"}', "starts: expected a list"),
    ('{"starts": [{"service": "llmb-vllm", "compile_cache": "cold", "waited_s": -5, "at": "t"}]}', r"starts\[0\].waited_s"),
    ("[" * 100000 + "]" * 100000, "not JSON"),
])
def test_a_corrupt_previous_record_starts_a_fresh_history_and_says_so(tmp_path, content, why):
    (tmp_path / "serve").mkdir()
    (tmp_path / "serve" / "node1.json").write_text(content)
    got = _report_yml_run(tmp_path, "node1", [["llmb-vllm", 12.5]], {"llmb-vllm": "warm"})
    (warning,) = got["warnings"]
    assert warning.startswith(f"node1: serve record {tmp_path / 'serve' / 'node1.json'}: ")
    assert "starting a fresh one" in warning
    assert re.search(why, warning), warning
    assert [(s["compile_cache"], s["waited_s"]) for s in _starts(tmp_path, "node1")] == [("warm", 12.5)]


def test_a_previous_record_that_is_a_link_is_not_followed(tmp_path):
    (tmp_path / "serve").mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"starts": [{"service": "x", "compile_cache": None, "waited_s": 1, "at": "t"}]}))
    os.symlink(elsewhere, tmp_path / "serve" / "node1.json")
    path, warning = record_serve(str(tmp_path), "node1", {"healthy": [], "compile_cache": {}})
    assert warning and "node1" in warning and _starts(tmp_path, "node1") == []
    assert not Path(path).is_symlink()  # the record replaced the link (atomic rename)


def test_an_older_record_without_a_history_starts_one_quietly(tmp_path):
    (tmp_path / "serve").mkdir()
    (tmp_path / "serve" / "node1.json").write_text(json.dumps({"host": "node1", "healthy": [["llmb-vllm", 9.0]]}))
    path, warning = record_serve(str(tmp_path), "node1", {"healthy": [["llmb-vllm", 8.0]], "compile_cache": {},
                                                          "started_services": ["llmb-vllm"]})
    assert warning is None and [s["waited_s"] for s in _starts(tmp_path, "node1")] == [8.0]


def test_health_waits_that_are_not_report_ymls_fail_naming_the_host(tmp_path):
    with pytest.raises(AnsibleActionFail, match=r"node1: .*healthy\[0\]"):
        _report_yml_run(tmp_path, "node1", [["llmb-vllm"]], {})


def test_a_start_is_filed_under_its_groups_state_not_rank_0s_own(tmp_path):
    """roles/serve/tasks/report.yml hands the group's state (llmb_compile_cache_group): rank 0's own cache was
    warm, its group's rebuilt node took a peer's copy: the start history files a peer start; the record's own
    compile_cache still says what rank 0's cache held."""
    args = {"artifacts_dir": str(tmp_path), "stage": "serve", "host": None, "hosts": [],
            "data": {"services": ["llmb-vllm"], "restarted": [], "smoke": [], "healthy": [["llmb-vllm", 150.0]],
                     "compile_cache": {"llmb-vllm": "warm"}, "group_compile_cache": {"llmb-vllm": "peer"},
                     "started_services": ["llmb-vllm"], "since_start_s": {"llmb-vllm": 233.5}}}
    _load("llmb_record").act(args, {"inventory_hostname": "node1", "hostvars": CLOCK}, {})
    (start,) = _starts(tmp_path, "node1")
    assert (start["compile_cache"], start["since_start_s"]) == ("peer", 233.5)
    assert json.loads((tmp_path / "serve" / "node1.json").read_text())["compile_cache"] == {"llmb-vllm": "warm"}
