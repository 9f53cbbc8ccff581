"""`llmb up` on an inventory stage 0 refuses (issue 26): the problems on the terminal, last, and in
report.html instead of a row of "no result" per host and stage; `-e llmb_pipeline_parallel=2` (text)
plans like the integer. Runs the real site.yml through ansible-runner; stage 0 runs on localhost
only and stops the run, so no host is contacted (the inventory's addresses are TEST-NET)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytest.importorskip("ansible_runner")


def _up(tmp_path, inventory: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    run_id = f"test-refusal-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "llmbctl.console.cli", "up", "-i", str(inventory), "--run-id", run_id]
    for e in extra:
        cmd += ["-e", e]
    env = dict(os.environ, LLMB_ROOT=str(ROOT), PYTHONPATH=f"{ROOT / 'lib'}:{ROOT / 'plugins' / 'module_utils'}",
               COLUMNS="200")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    run_dir = ROOT / "artifacts" / run_id
    return out, run_dir


@pytest.fixture
def refused_inventory(h100_inventory):
    return h100_inventory


def test_llmb_up_refused_inventory_shows_the_problems(tmp_path, refused_inventory):
    out, run_dir = _up(tmp_path, refused_inventory, "llmb_tensor_parallel=16")
    try:
        text = out.stdout
        assert out.returncode == 2, text + out.stderr
        tail = text[text.index("stage 0 refused the inventory before any host was contacted"):]
        assert "1. [parallelism] TP x PP = 16 x 1 = 16 devices" in tail
        assert "fix:" in tail
        assert "no result: the host was unreachable" not in text
        rep = json.loads((run_dir / "report.json").read_text())
        assert rep["verdict"] == "FAILED" and rep["refused"][0]["check"] == "parallelism"
        assert rep["failed"] == [] and rep["results"] == {}
        page = (run_dir / "report.html").read_text()
        assert 'id="refused"' in page and "TP x PP = 16 x 1 = 16 devices" in page
        assert 'id="stages"' not in page
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def test_llmb_up_extra_var_text_is_converted(tmp_path, refused_inventory):
    """`-e llmb_pipeline_parallel=two` is refused naming the variable; `=1` (text) is not a problem."""
    out, run_dir = _up(tmp_path, refused_inventory, "llmb_pipeline_parallel=two", "llmb_tensor_parallel=16")
    try:
        assert out.returncode == 2
        assert "llmb_pipeline_parallel must be an integer" in out.stdout
        assert "'two' does not convert to an integer" in out.stdout
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    out, doc_run = _up(tmp_path, refused_inventory, "llmb_pipeline_parallel=1", "llmb_tensor_parallel=16")
    try:
        assert "must be an integer" not in out.stdout
        doc = json.loads((doc_run / "deployment.json").read_text())
        assert [p["check"] for p in doc["problems"]] == ["parallelism"]
    finally:
        shutil.rmtree(doc_run, ignore_errors=True)


def test_llmb_up_refuses_a_duplicate_key_in_stage_0(tmp_path, refused_inventory):
    """Stage 0 (the llmb_deployment filter, Ansible's own inventory sources) refuses a key given twice."""
    f = refused_inventory / "group_vars" / "all" / "llmb.yml"
    f.write_text(f.read_text() + "\nllmb_engine: vllm\n")
    line = len(f.read_text().splitlines())
    out, run_dir = _up(tmp_path, refused_inventory)
    try:
        assert out.returncode == 2, out.stdout + out.stderr
        tail = out.stdout[out.stdout.index("stage 0 refused the inventory"):]
        assert f"[yaml-duplicate-key] {f}:{line}: the key llmb_engine is given twice" in " ".join(tail.split())
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
