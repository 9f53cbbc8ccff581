"""llmbctl.console.cli without ansible-runner: usage errors (exit 2, naming the input), `llmb report`,
and the progress table as rich renders it."""

from __future__ import annotations

import json

import pytest
from llmbctl.console import cli
from llmbctl.console.progress import Progress, Weights
from llmbctl.results import record


def test_bad_inputs_exit_2_naming_them(tmp_path, capsys):
    assert cli.main(["up", "-i", str(tmp_path / "nope")]) == 2
    assert "-i " in capsys.readouterr().err
    assert cli.main(["up", "-i", str(tmp_path), "-e", "not a var"]) == 2
    assert "-e 'not a var': expected name=value" in capsys.readouterr().err
    assert cli.main(["up", "-i", str(tmp_path), "--run-id", "../x"]) == 2
    assert "--run-id" in capsys.readouterr().err
    assert cli.main(["recover", "node2", "-i", str(tmp_path), "--accept-hostkey", "SHA256:nope"]) == 2
    assert "--accept-hostkey: expected a SHA256 fingerprint" in capsys.readouterr().err


def test_report_rerenders_a_run(tmp_path, capsys):
    run = tmp_path / "run-1"
    run.mkdir()
    (run / "deployment.json").write_text(json.dumps({"hosts": {"node1": {}, "node2": {}}}))
    record(str(run), "verify", "node1", {})
    assert cli.main(["report", str(run)]) == 1  # node2 has no verify result
    out = capsys.readouterr().out
    assert "verdict: FAILED" in out and f"{run}/report.html" in out
    assert (run / "report.html").exists()


def test_progress_table_renders_status_and_weights():
    from rich.console import Console

    p = Progress()
    p.cell("verify", "node1").status = "ok"
    p.cell("verify", "node2").status = "unreachable"
    p.weights["node1"] = Weights(bytes=3_000_000_000, seconds=10.0, files=3)
    con = Console(record=True, width=120)
    con.print(cli.render(p, "llmb up"))
    text = con.export_text()
    assert "node1" in text and "unreachable" in text and "3.0 GB in 3 files 300.0 MB/s" in text


@pytest.mark.parametrize("cmd", ["up", "verify"])
def test_runner_missing_says_what_to_do(monkeypatch, tmp_path, capsys, cmd):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "ansible_runner":
            raise ImportError("no", name="ansible_runner")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    assert cli.main([cmd, "-i", str(tmp_path), "--run-id", "t-1"]) == 2
    assert "ansible_runner missing" in capsys.readouterr().err
