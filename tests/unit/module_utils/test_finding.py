"""One finding type (llmb.finding) for the planner, verify and the parsers, and its one renderer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from llmb.finding import Finding, check, lines, skipped
from llmbctl import verify as V
from llmbctl.hw.check import decode_capture, parse_checked
from llmbctl.planner.model import PlanError, Problem

REPO = Path(__file__).resolve().parents[3]


def test_the_planner_verify_and_the_parsers_share_the_type():
    assert Problem is Finding
    _text, found = decode_capture(b"GPU 0\n\xff\xfe oops\n")
    assert found and all(isinstance(f, Finding) for f in found)
    res = parse_checked("garbage that no parser reads\n", "nvidia-smi-topo")
    assert res.findings and all(isinstance(f, Finding) for f in res.findings)
    engine = {"release": "vllm 0.23.0", "requirements": {"cuda_major": 13}}
    from llmbctl.enginecat.requirements import driver_finding

    f = driver_finding(engine["release"], engine["requirements"], "570.148.08")
    assert isinstance(f, Finding) and f.id == "engine.driver" and not f.ok


def test_a_failed_check_renders_host_id_expected_found_and_fix():
    rec = check("device.count", False, "8 devices", "2 devices", "reseat the board")
    assert rec == {"id": "device.count", "ok": False, "expected": "8 devices", "found": "2 devices",
                   "hint": "reseat the board"}
    f = Finding.from_record(rec, host="n1")
    assert f.render() == "n1: device.count: expected 8 devices, found 2 devices. reseat the board"
    assert f.check_record() == rec  # the record reads back to itself
    assert V.report_lines([{"host": "n1", "checks": [rec]}]) == [f.render()]
    no_fix = Finding("driver.version", expected=">= 550", found="535", host="n2")
    assert no_fix.render() == "n2: driver.version: expected >= 550, found 535."


def test_a_passed_or_skipped_check_has_no_line_and_no_hint():
    ok = check("vendor", True, "nvidia", "nvidia", "install the driver")
    assert ok["hint"] == "" and lines([ok], "n1") == []
    sk = skipped("cuda.init", "cuInit 0", "not probed")
    assert sk == {"id": "cuda.init", "ok": True, "skipped": True, "expected": "cuInit 0", "found": "not probed",
                  "hint": ""}
    assert lines([sk], "n1") == []


def test_a_parser_finding_keeps_its_capture_form():
    f = Finding.capture("error", 7, "GPU0  X  NV8", "expected 8 columns")
    assert str(f) == "line 7: expected 8 columns: 'GPU0  X  NV8'"
    assert f.as_dict() == {"severity": "error", "line": 7, "text": "GPU0  X  NV8", "message": "expected 8 columns"}
    assert Finding.from_record(f.as_dict()) == f
    assert str(Finding.capture("warning", None, "", "UTF-8 byte order mark removed")) == "UTF-8 byte order mark removed"


def test_a_problem_renders_as_the_planners_numbered_block_and_record():
    p = Problem("parallelism", "TP x PP = 16 devices, the group has 8", found="llmb_tensor_parallel=16",
                expected="TP x PP <= 8", fix="lower llmb_tensor_parallel", host="gpu-1")
    assert p.check == "parallelism"
    assert p.block(2) == ("2. [parallelism] (host gpu-1) TP x PP = 16 devices, the group has 8\n"
                          "      found:    llmb_tensor_parallel=16\n"
                          "      expected: TP x PP <= 8\n"
                          "      fix:      lower llmb_tensor_parallel")
    assert p.format(2) == p.block(2)
    rec = p.problem_record()
    assert rec == {"check": "parallelism", "message": "TP x PP = 16 devices, the group has 8",
                   "found": "llmb_tensor_parallel=16", "expected": "TP x PP <= 8", "fix": "lower llmb_tensor_parallel",
                   "host": "gpu-1"}
    assert Finding.from_record(rec) == p
    assert p.render() == ("gpu-1: parallelism: TP x PP = 16 devices, the group has 8; expected TP x PP <= 8, "
                          "found llmb_tensor_parallel=16. lower llmb_tensor_parallel")
    assert PlanError([p]).report().endswith(p.block(1))
    assert Problem(check="scope", message="m") == Problem("scope", "m")


def test_the_report_prints_a_refusal_through_the_same_renderer():
    from llmb.report import problem_lines

    p = Problem("vault", "a vaulted value", found="llmb_hf_token", fix="pass --vault-password-file")
    assert problem_lines(p.problem_record()) == [p.title(), "found: llmb_hf_token", "fix: pass --vault-password-file"]


def _filter():
    spec = importlib.util.spec_from_file_location("llmb_finding_filter", REPO / "plugins" / "filter" / "llmb_finding.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()["llmb_finding_line"]


@pytest.mark.parametrize("record, want", [
    ({"id": "engine.driver", "ok": False, "expected": "driver >= 580", "found": "570", "hint": "upgrade"},
     "n1: preflight engine.driver: expected driver >= 580, found 570. upgrade"),
    ({"id": "x", "expected": "a C compiler", "found": "none", "fix": "install gcc"},
     "n1: preflight engine.driver: expected a C compiler, found none. install gcc"),
    ({"id": "engine.driver", "ok": True, "expected": "e", "found": "f"}, ""),
])
def test_the_filter_gives_tasks_the_same_line(record, want):
    assert _filter()(record, "n1", "preflight engine.driver") == want


def test_preflight_builds_no_finding_line_by_hand():
    """playbooks/preflight.yml's engine.driver and bindto.compiler messages come from one module call
    (llmb_preflight, judged by llmbctl.nodeos through llmb.finding), none written in the playbook."""
    text = (REPO / "playbooks" / "preflight.yml").read_text()
    assert "llmb_preflight:" in text
    from llmbctl import nodeos
    line = nodeos.compiler_problems("node1", "29500", None)[0]
    assert line.startswith("node1") and "preflight bindto.compiler" in line
    assert "a C compiler" in line and "none" in line and "install gcc" in line  # expected, found, fix
    assert "': preflight" not in text and "'; fix: '" not in text
