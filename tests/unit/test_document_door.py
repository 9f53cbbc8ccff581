"""The deployment document is the only door (issue 25, point 1).

A role variable whose value the document holds (DOC_OWNED) is refused when an inventory sets it, by
``scripts/launch-plan --check`` and by stage 0 (playbooks/_run.yml), naming the variable and the
llmb_* knob to set instead; the roles' defaults read those values from the document only.
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
from llmbctl import deployment as D
from llmbctl.planner.inventory import DOC_OWNED, ROLE_TEST_VARS_ENV, plain, read_var

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "launch-plan"

# the two copies of inventories/h800 of the issue: (line appended to group_vars/all/llmb.yml, knob named)
OVERRIDES = [
    ("engine_host_version: 0.32.0", "engine_host_version", "llmb_engine_version"),
    ("weights_repo_id: someone/other-model", "weights_repo_id", "llmb_model"),
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_RUN_ID", "LLMB_ARTIFACTS_DIR", ROLE_TEST_VARS_ENV)}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", **extra)
    return env


def _h800_copy(tmp_path: Path, line: str) -> Path:
    inv = tmp_path / "h800"
    shutil.copytree(REPO / "inventories" / "h800", inv)
    with (inv / "group_vars" / "all" / "llmb.yml").open("a") as fh:
        fh.write("\n" + line + "\n")
    return inv


@pytest.mark.parametrize(("line", "variable", "knob"), OVERRIDES, ids=[o[1] for o in OVERRIDES])
def test_launch_plan_check_refuses_a_role_variable_that_copies_the_document(tmp_path, line, variable, knob):
    inv = _h800_copy(tmp_path, line)
    proc = subprocess.run([sys.executable, str(SCRIPT), "-i", str(inv), "--check"], capture_output=True,
                          text=True, env=_env(), timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "[document-owned]" in out and f"remove {variable} and set {knob}" in out, out
    assert "OK:" not in out


@pytest.mark.parametrize(("line", "variable", "knob"), OVERRIDES, ids=[o[1] for o in OVERRIDES])
def test_stage_0_refuses_it_for_every_stage(tmp_path, line, variable, knob):
    """Even a stage that needs no plan (engine, verify) is refused: the role would act on the copy."""
    inv = _h800_copy(tmp_path, line)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/_run.yml", "-i", str(inv),
         "-e", "llmb_run_id=unit-door", "-e", f"llmb_artifacts_dir={tmp_path / 'run'}",
         "-e", "llmb_stage_needs_plan="],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "[document-owned]" in proc.stdout and f"remove {variable} and set {knob}" in proc.stdout, proc.stdout[-3000:]
    doc = json.loads((tmp_path / "run" / "deployment.json").read_text())
    assert [p["found"] for p in doc["problems"] if p["check"] == "document-owned"] == [variable]


def _h800() -> tuple[dict, dict]:
    from importlib.machinery import SourceFileLoader
    from importlib.util import module_from_spec, spec_from_loader

    loader = SourceFileLoader("llmb_launch_plan_for_door", str(SCRIPT))
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module.load_inventory(str(REPO / "inventories" / "h800"))


def test_weights_revision_cannot_go_around_the_lock(monkeypatch):
    """weights_revision is refused; llmb_model_revision is the knob, and it reaches only model.commit."""
    monkeypatch.delenv(ROLE_TEST_VARS_ENV, raising=False)
    hv, groups = _h800()
    for name in hv:
        hv[name]["weights_revision"] = "main"
    doc = D.resolve(hv, groups)
    assert not doc["planned"]
    assert [p["found"] for p in doc["problems"]] == ["weights_revision"]
    assert "llmb_model_revision" in doc["problems"][0]["fix"]
    for name in hv:
        del hv[name]["weights_revision"]
        hv[name]["llmb_model_revision"] = "d" * 40
    doc = D.resolve(hv, groups)
    assert doc["planned"] and doc["model"]["commit"] == "d" * 40


def test_the_test_only_route_is_the_environment_not_the_inventory(monkeypatch):
    hv, groups = _h800()
    for name in hv:
        hv[name]["engine_host_version"] = "0.32.0"
        hv[name]["LLMB_ROLE_TEST_VARS"] = "1"  # no inventory variable opens it
    assert not D.resolve(hv, groups)["planned"]
    monkeypatch.setenv(ROLE_TEST_VARS_ENV, "1")
    doc = D.resolve(hv, groups)
    assert doc["planned"] and doc["engine"]["version"] == "0.19.1"  # the document keeps its own value


# directories of the fixed node layout that a site may still move per role (not a copy of an llmb_* knob)
LAYOUT_OVERRIDES = {"engine_host_uv_dir", "serve_etc_dir", "weights_tools_dir"}


def test_every_role_default_that_reads_the_document_is_refused_in_an_inventory():
    """A new role variable copying the document cannot slip in unrefused (and none is listed for nothing)."""
    reads = set()
    for path in sorted(REPO.glob("roles/*/defaults/main.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            text = str(value)
            if re.search(r"llmb_deployment\.|_engine_image_doc\.", text) or re.fullmatch(
                r"\{\{ llmb_(platform|run_id|artifacts_dir) \}\}", text
            ):
                reads.add(name)
    assert reads - LAYOUT_OVERRIDES == set(DOC_OWNED)
    specs = {}
    for path in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(path.read_text())["argument_specs"] or {}).values():
            specs.update((entry or {}).get("options") or {})
    for name in DOC_OWNED:
        assert "LLMB_ROLE_TEST_VARS" in specs[name]["description"], name


def test_one_reader_one_converter():
    """The deployment reads inventory values through the planner's reader; the script's vault hook is
    the only thing it adds to the one converter."""
    src = (REPO / "lib/llmbctl/deployment.py").read_text()
    assert "read_var" in src and "def _plain" not in src
    assert "def _plain" not in SCRIPT.read_text()

    class Lazy:  # Ansible's lazy containers: items() only
        def __init__(self, d):
            self.d = d

        def items(self):
            return self.d.items()

    value = {"a": Lazy({"b": [1, "x", True]}), "c": {"__ansible_vault": "cipher"}}
    assert plain(value) == {"a": {"b": [1, "x", True]}, "c": {"__ansible_vault": "cipher"}}
    assert plain(value, vault=lambda v: "<v>") == {"a": {"b": [1, "x", True]}, "c": "<v>"}

    class Broken:
        def get(self, key):
            raise ValueError("Decryption failed (no vault secrets were found)")

    assert read_var(Broken(), "x") == (None, "Decryption failed (no vault secrets were found)")
