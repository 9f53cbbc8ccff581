"""scripts/hwfacts exit statuses and the findings of llmbctl.hw.check on the damage found in the field
(issue 12): half an `nvidia-smi -q`, a cut npu-smi, a UTF-8 BOM, the wrong --kind, terminal residue,
cells fused by a lost tab. Each damaged capture is made from a real one; status 2 and the line named."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT, fixture_text
from llmb.hw import parse
from llmbctl.hw.check import decode_capture, parse_checked
from llmbctl.hw.facts import build_facts
from llmbctl.verify import load_profile, verify

HWFACTS = ROOT / "scripts" / "hwfacts"


def _hwfacts(*args, stdin=None):
    return subprocess.run([sys.executable, str(HWFACTS), *args], capture_output=True, text=True, check=False,
                          input=stdin, timeout=60)


def _lines(rel: str) -> list[str]:
    return fixture_text(rel).split("\n")


def half_smi_q():
    lines = _lines("real/h200x2/smi-q.txt")
    second = next(i for i, ln in enumerate(lines) if ln.startswith("GPU 00000000:00:07.0"))
    return "\n".join(lines[: second - 40]) + "\n", 13, "'Attached GPUs : 2' but 1 GPU section(s) follow"


def npu_12_of_16():
    lines = _lines("public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt")
    bus_rows = [i for i, ln in enumerate(lines) if ":00.0" in ln]
    cut = bus_rows[11] + 1  # through the 12th chip's second row, as `head -n` would cut it
    return "\n".join(lines[:cut]) + "\n", cut, "the output ends inside a table"


def bom():
    # A BOM hid the capture header: the kind came out wrong ("tool": null). Now stripped, noted, parsed.
    return "\ufeff" + fixture_text("real/h100/smi-q.txt"), 1, "UTF-8 byte order mark removed"


def fused_tab():
    text = fixture_text("real/h200x2/topo.txt").replace("GPU0\t X \tNV18\t0-31\t", "GPU0\t X \tNV18\t0-31")
    return text, 7, "row GPU0 has 2 values after the matrix, other rows 3 (cells fused by a lost tab?)"


def fused_label():
    text = fixture_text("real/h200x2/topo.txt").replace("GPU0\t X \tNV18\t", "GPU0\t X \tNV18")
    return text, 7, "row GPU0, column GPU1: unknown label 'NV180-31'"


def ansi_cut():
    # Colour codes, an OSC window title and CRLF line ends (all repaired), then a matrix cut after one row.
    text = ("\x1b]0;root@gpu-01: ~\x07\x1b[4m\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\r\n"
            "GPU0\t X \tNV18\t0-31\t0\t\tN/A\r\n")
    return text, None, "column GPU1 has no row"


CASES = {
    "half nvidia-smi -q": (half_smi_q, []),
    "npu-smi cut at 12 of 16": (npu_12_of_16, []),
    "ANSI residue and a cut matrix": (ansi_cut, []),
    "fused columns (affinity)": (fused_tab, []),
    "fused columns (label)": (fused_label, []),
    "another kind": (lambda: (fixture_text("real/h100/topo.txt"), 6, "this is not npu-smi-topo output: it looks like"
                                                                       " `nvidia-smi topo -m` (nvidia-smi-topo)"),
                     ["--kind", "npu-smi-topo"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_capture_exits_2_naming_the_line(tmp_path, case):
    make, args = CASES[case]
    text, line, message = make()
    f = tmp_path / "capture.txt"
    f.write_bytes(text.encode("utf-8"))
    r = _hwfacts(*args, str(f))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    where = f"{f}:{line}: error: " if line else f"{f}: error: "
    assert any(ln.startswith(f"hwfacts: {where}") and message in ln for ln in r.stderr.splitlines()), r.stderr


def test_half_smi_q_names_the_cut_section_too():
    text, _line, _msg = half_smi_q()
    res = parse_checked(text)
    assert not res.ok and res.facts["attached_gpus"] == 2 and len(res.facts["gpus"]) == 1
    cut = [f for f in res.errors if "ends before its 'Processes' entry" in f.message]
    assert cut and cut[0].line == len(text.rstrip("\n").split("\n")) and cut[0].text


def test_npu_cut_at_a_card_border_is_not_clean():
    lines = _lines("public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt")
    bus_rows = [i for i, ln in enumerate(lines) if ":00.0" in ln]
    res = parse_checked("\n".join(lines[: bus_rows[11] + 2]) + "\n")  # ... and the border after it
    assert len(res.facts["npus"]) == 12 and not res.clean
    assert any("no process table" in f.message for f in res.findings)
    res = parse_checked("\n".join(lines[: bus_rows[10] + 2]) + "\n")  # 11 chips: the last card has one of two
    assert any(f.severity == "error" and "lists 1 chip(s), other NPUs 2" in f.message for f in res.findings)


def test_bom_capture_parses_like_the_original_and_exits_0(tmp_path):
    f = tmp_path / "smi-q.txt"
    f.write_bytes(b"\xef\xbb\xbf" + (FIXTURES / "real/h100/smi-q.txt").read_bytes())
    r = _hwfacts(str(f))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == parse(fixture_text("real/h100/smi-q.txt"))
    assert f"hwfacts: {f}:1: warning: UTF-8 byte order mark removed" in r.stderr


def test_terminal_residue_is_repaired_with_a_warning():
    clean = fixture_text("real/h200x2/topo.txt")
    dirty = "\x1b]0;user@host\x07" + clean.replace("\n", "\r\n").replace("NV18", "\x1b[32mNV18\x1b[0m")
    res = parse_checked(dirty)
    assert res.ok and res.facts == parse(clean)
    assert {f.message.split(" (")[0] for f in res.findings} >= {"carriage returns removed",
                                                             "terminal escape sequences / control characters removed"}
    # A progress-style overwrite keeps what the terminal showed: the text after the last \r.
    res = parse_checked("available: 1 nodes (0)\nnode 0 cpus: 0 1\rnode 0 cpus: 0 1 2 3\nnode distances:\nnode 0\n0: 10\n")
    assert res.ok and res.facts["nodes"][0]["cpus"] == [0, 1, 2, 3]


def test_not_utf8_is_an_error_with_its_line(tmp_path):
    data = (FIXTURES / "real/h100/numactl.txt").read_bytes()
    at = data.index(b"node 0 size")
    f = tmp_path / "numactl.txt"
    f.write_bytes(data[:at] + b"\xff" + data[at + 1:])
    text, findings = decode_capture(f.read_bytes())
    line = data[:at].count(b"\n") + 1
    assert findings[0].line == line
    r = _hwfacts(str(f))
    assert r.returncode == 2 and f"hwfacts: {f}:{line}: error: bytes that are not UTF-8" in r.stderr


def test_good_captures_exit_0_with_unchanged_output():
    rels = ["real/h100/smi-q.txt", "real/h200x2/topo.txt", "public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt"]
    for rel in rels:
        r = _hwfacts(str(FIXTURES / rel))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == parse(fixture_text(rel))
        assert "error" not in r.stderr


def test_usage_and_internal_errors(tmp_path, monkeypatch, capsys):
    r = _hwfacts(str(tmp_path / "missing.txt"))
    assert r.returncode == 2 and "No such file or directory" in r.stderr and "Traceback" not in r.stderr
    r = _hwfacts("--bundle", str(tmp_path), "--platform", "h100-x1", "--override", "{not json")
    assert r.returncode == 2 and "--override is not JSON" in r.stderr
    r = _hwfacts("--bundle", str(tmp_path / "no-such-dir"), "--platform", "h100-x1")
    assert r.returncode == 2 and "no-such-dir: No such file or directory" in r.stderr
    r = _hwfacts("--kind", "nope", "x")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    # An internal error: one line, what and where, status 1 (the parser is broken on purpose here).
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("hwfacts_script", str(HWFACTS))
    spec = importlib.util.spec_from_loader("hwfacts_script", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)

    def boom(*_a, **_k):
        raise KeyError("gpus")

    monkeypatch.setattr(mod, "parse_checked", boom)
    f = tmp_path / "q.txt"
    f.write_text(fixture_text("real/h100/smi-q.txt"))
    capsys.readouterr()
    assert mod.main([str(f)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hwfacts: internal error: KeyError: 'gpus' (at test_hw_findings.py:")


def test_facts_mode_exits_2_on_a_damaged_capture(tmp_path):
    text, _line, _msg = half_smi_q()  # the line counts the capture header, as in the file
    f = tmp_path / "smi-q.txt"
    f.write_text(text)
    r = _hwfacts("--facts", str(f))
    assert r.returncode == 2
    assert f"hwfacts: smi-q: nvidia-smi-q: line {_line}: 'Attached GPUs : 2' but 1 GPU section(s) follow" in r.stderr
    r = _hwfacts("--facts", str(FIXTURES / "real/h100/smi-q.txt"), str(FIXTURES / "real/h100/topo.txt"))
    assert r.returncode == 0, r.stderr
    assert not json.loads(r.stdout)["errors"]


def test_verify_fails_a_capture_check_for_a_damaged_capture():
    text, _line, _msg = half_smi_q()
    probes = [{"name": "smi-q", "kind": "nvidia-smi-q", "cmd": "nvidia-smi -q", "rc": 0, "stdout": text.split("\n\n", 1)[1],
               "stderr": "", "ok_rcs": [0]}]
    facts = build_facts(probes, "nvidia")
    err = [e for e in facts["errors"] if e.get("capture")]
    assert err and err[0]["parsed"] and err[0]["line"]
    checks = verify(facts, load_profile("h200-x2"))
    cap = [c for c in checks if c["id"] == "capture.smi-q"]
    assert cap and not cap[0]["ok"] and "'Attached GPUs : 2' but 1 GPU section(s) follow" in cap[0]["found"]
    assert cap[0]["hint"]
