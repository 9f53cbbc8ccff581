"""One stage table (llmb.stages): site.yml, the playbooks' headers and gates, the report, the console,
the README and scripts/inventory-knobs agree with it (issue 25, point 2)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from pathlib import Path

import yaml
from llmb import report
from llmb.stages import PIPELINE_STAGES, ROLE_STAGE, STAGES
from llmbctl.console import progress

REPO = Path(__file__).resolve().parents[2]


def test_site_yml_runs_the_table_in_order():
    plays = yaml.safe_load((REPO / "site.yml").read_text())
    seen = []
    for play in plays:
        if play["ansible.builtin.import_playbook"] == "playbooks/_gates.yml":  # not a stage: the gates' one call
            continue
        m = re.fullmatch(r"Stage (\d+) - (.+)", play["name"])
        assert m, play["name"]
        seen.append((int(m.group(1)), m.group(2), "playbooks/" + Path(play["ansible.builtin.import_playbook"]).name))
    assert seen == [(s.number, s.title, s.playbook) for s in STAGES]
    assert plays[-1]["vars"]["llmb_report_stages"] == PIPELINE_STAGES


def test_every_stage_playbook_header_and_gate_follow_the_table():
    for s in STAGES:
        text = (REPO / s.playbook).read_text()
        first = next(line for line in text.splitlines() if line.startswith("#"))
        m = re.match(r"# Stage (\d+)\b", first)
        assert m and int(m.group(1)) == s.number, f"{s.playbook}: header {first!r}, the table says stage {s.number}"
        stage0 = yaml.safe_load(text)[0]
        assert stage0["ansible.builtin.import_playbook"] == "_run.yml"
        gate = (stage0.get("vars") or {}).get("llmb_stage_needs_plan")
        assert gate == (s.name if s.needs_plan else None), s.playbook


def test_every_role_belongs_to_one_stage_of_the_table():
    assert sorted(ROLE_STAGE) == sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())


def test_report_and_console_take_the_table():
    names = [s.name for s in STAGES]
    assert report.STAGE_ORDER == [n for n in names if n != "report"]
    assert report.PIPELINE_STAGES == PIPELINE_STAGES == [s.name for s in STAGES if s.records]
    assert progress.STAGES == names
    assert progress.stage_of("/x/roles/engine_image/tasks/main.yml") == "engine"


def test_readme_table_follows_the_table():
    rows = re.findall(r"^\| (\d+) (\w+) \| `(playbooks/[\w.]+)` \|", (REPO / "README.md").read_text(), re.M)
    assert [(int(n), label, pb) for n, label, pb in rows] == [
        (s.number, s.title.split()[0], s.playbook) for s in STAGES
    ]


def test_inventory_knobs_sections_follow_the_table():
    loader = importlib.machinery.SourceFileLoader("llmb_inventory_knobs_stages", str(REPO / "scripts/inventory-knobs"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    assert [role for role, _ in module.ROLES] == [r for s in STAGES for r in s.roles]
    for role, title in module.ROLES:
        assert title.startswith(f"stage {next(s.number for s in STAGES if role in s.roles)} ")
