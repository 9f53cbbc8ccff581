"""scripts/* find the project's .venv by themselves (an operator's PATH lacks it) and their --help
says what they need."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# bootstrap-venv makes the venv (it needs none; its --help is tested on its own below)
SCRIPTS = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.is_file() and p.name != "bootstrap-venv")
BARE = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=BARE, cwd="/", timeout=120)


def test_the_scripts_are_found():
    assert {"launch-plan", "sim-cluster", "hwfacts", "inventory-knobs", "build-node-image", "demo"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_says_what_it_needs_without_the_venv_on_path(name):
    proc = _run(str(ROOT / "scripts" / name), "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "Needs:" in proc.stdout, f"{name} --help does not say what it needs"


def test_launch_plan_reads_an_inventory_without_the_venv_on_path():
    """The issue's case: [Errno 2] No such file or directory: 'ansible-inventory'."""
    proc = _run(str(ROOT / "scripts" / "launch-plan"), "-i", str(ROOT / "inventories" / "h800"), "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("OK: inventory")


def test_bootstrap_venv_help_prints_help_and_installs_nothing(tmp_path):
    """--help must not run the bootstrap (it would build a venv, here in tmp_path, from PyPI)."""
    venv = tmp_path / "venv"
    env = dict(BARE, LLMB_VENV=str(venv), PIP_INDEX_URL="http://127.0.0.1:9/simple", UV_INDEX_URL="http://127.0.0.1:9/simple")
    for arg in ("--help", "-h"):
        proc = subprocess.run([str(ROOT / "scripts" / "bootstrap-venv"), arg], capture_output=True, text=True,
                              env=env, cwd="/", timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "Needs:" in proc.stdout and "LLMB_VENV" in proc.stdout and "using" not in proc.stdout
        assert not proc.stdout.startswith("#!") and "set -euo" not in proc.stdout
    proc = subprocess.run([str(ROOT / "scripts" / "bootstrap-venv"), "--bogus"], capture_output=True, text=True,
                          env=env, cwd="/", timeout=60)
    assert proc.returncode == 2 and "unknown argument '--bogus'" in proc.stderr, proc.stderr
    assert not venv.exists(), "bootstrap-venv built a venv for --help / a bad argument"
