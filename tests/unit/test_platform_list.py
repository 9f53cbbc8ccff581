"""Platforms come only from data/platforms/ (issue 25, point 2): a new profile file is the only edit.

In a temporary copy of data/ with a new profile (b200-hgx8.yml), preflight's validation
(scripts/launch-plan --check, the planner stage 0 runs) and the verify stage (its argument spec and
its profile loading, playbooks/verify.yml on localhost) both take it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
NEW = "b200-hgx8"


@pytest.fixture(scope="module")
def data_copy(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("platform") / "data"
    shutil.copytree(REPO / "data", data)
    profile = yaml.safe_load((data / "platforms" / "h200-hgx8.yml").read_text())
    profile.update(name=NEW, description="test-only: a platform the repository does not ship")
    (data / "platforms" / f"{NEW}.yml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return data


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_RUN_ID", "LLMB_ARTIFACTS_DIR")}
    env.update(LLMB_DATA_DIR=str(data), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    return env


def test_no_role_lists_the_platforms_again():
    for spec_file in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec_file.read_text())["argument_specs"] or {}).values():
            for name, spec in ((entry or {}).get("options") or {}).items():
                choices = set(map(str, (spec or {}).get("choices") or ()))
                assert not choices & {"h200-hgx8", "h100-hgx8", "mi300x-8"}, f"{spec_file}: {name} lists platforms"


def test_preflight_validation_takes_a_new_profile(tmp_path, data_copy):
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "h200", inv)
    llmb = inv / "group_vars" / "all" / "llmb.yml"
    text, n = re.subn(r"(?m)^llmb_platform:.*$", f"llmb_platform: {NEW}", llmb.read_text())
    assert n == 1, "the sample sets llmb_platform once"
    llmb.write_text(text)
    script = [sys.executable, str(REPO / "scripts" / "launch-plan"), "-i", str(inv), "--check"]
    proc = subprocess.run(script, capture_output=True, text=True, env=_env(data_copy), timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("OK:"), proc.stdout + proc.stderr
    # without the file the same inventory is refused, naming the profiles directory
    env = _env(REPO / "data")
    refused = subprocess.run(script, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert refused.returncode == 2 and "data/platforms/" in refused.stderr, refused.stdout + refused.stderr


def test_verify_takes_a_new_profile(tmp_path, data_copy):
    """verify.yml on localhost with the new platform: the argument spec lets it through and the profile is
    loaded (the record names it); the node is no B200, so deviations are expected, not a refusal."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/verify.yml", "-i", "localhost,",
         "-c", "local", "-e", f"llmb_platform={NEW}", "-e", "verify_fail=false",
         "-e", "llmb_run_id=unit-platform", "-e", f"llmb_artifacts_dir={tmp_path / 'run'}"],
        cwd=REPO, env=_env(data_copy), capture_output=True, text=True, timeout=300, check=False,
    )
    assert "must be one of" not in proc.stdout, proc.stdout[-3000:]
    record = json.loads((tmp_path / "run" / "verify" / "localhost.json").read_text())
    assert record["platform"] == NEW, proc.stdout[-3000:]
