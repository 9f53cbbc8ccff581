"""engine_host's package probe (roles/engine_host/vars/main.yml _engine_host_probe_script): prints
exactly the planned "name==version" requirements the venv does not hold at that version, so that the
engine stage installs when one is missing and changes nothing when all are there."""

from __future__ import annotations

import importlib.metadata as m
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1].parent


def probe(*reqs: str) -> list[str]:
    script = yaml.safe_load((ROOT / "roles/engine_host/vars/main.yml").read_text())["_engine_host_probe_script"]
    out = subprocess.run([sys.executable, "-c", script, *reqs], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_probe_names_what_is_missing_or_another_version():
    have = m.version("PyYAML")
    assert probe(f"PyYAML=={have}", f"pyyaml=={have}") == []  # the name as pip normalizes it
    assert probe(f"ansible-core=={m.version('ansible-core')}", "ansible_core==0.0", "no-such-pkg-llmb==1.0") == [
        "ansible_core==0.0", "no-such-pkg-llmb==1.0"]
