"""The stage table: the one list of the stages site.yml runs (number, name, playbook, roles, what each writes).

site.yml's play names and imports, each stage playbook's header and its stage-0 gate
(``llmb_stage_needs_plan``), the report's stage order and expected stages, the console's columns,
the README's table and scripts/inventory-knobs' sections all agree with it
(tests/unit/test_stage_table.py reads them all and fails on drift).

Runs on the controller only; stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    number: int
    name: str  # the results directory artifacts/<run-id>/<name>/ and the report's key
    title: str  # site.yml's "Stage N - <title>"
    playbook: str
    roles: tuple[str, ...]  # the roles whose tasks belong to the stage
    needs_plan: bool  # imports playbooks/_run.yml with llmb_stage_needs_plan: <name>
    records: bool  # writes artifacts/<run-id>/<name>/<host>.json (an expected result of site.yml)
    writes: str


STAGES: tuple[Stage, ...] = (
    Stage(0, "preflight", "preflight", "playbooks/preflight.yml", (), True, False,
          "artifacts/<run-id>/deployment.json and <inventory>/llmb.lock.json (the pins); nothing on a node"),
    Stage(1, "verify", "verify", "playbooks/verify.yml", ("verify",), False, True,
          "artifacts/<run-id>/verify/<host>.json and summary.json; nothing on a node"),
    Stage(2, "engine", "engine", "playbooks/engine.yml", ("engine_host", "engine_image"), False, True,
          "/opt/llmb/uv, the engine venv /opt/llmb/venvs/<engine>-<version> or the pinned image; "
          "artifacts/<run-id>/engine/<host>.json"),
    Stage(3, "weights", "weights", "playbooks/weights.yml", ("weights",), True, True,
          "the model directory (llmb_model_dir, config.json patched), /opt/llmb/tools; "
          "artifacts/<run-id>/weights/<host>.json"),
    Stage(4, "ssh_mesh", "access (SSH mesh)", "playbooks/ssh_mesh.yml", ("ssh_mesh",), False, True,
          "/etc/llmb/ssh-mesh (cluster key, known_hosts, ssh_config), root's ~/.ssh; "
          "artifacts/<run-id>/ssh_mesh/<host>.json"),
    Stage(5, "serve", "serve", "playbooks/serve.yml", ("serve",), True, True,
          "/etc/llmb EnvironmentFiles and config files, systemd units or containers; "
          "artifacts/<run-id>/serve/<host>.json"),
    Stage(6, "bench", "bench", "playbooks/bench.yml", ("bench",), True, True,
          "artifacts/<run-id>/bench/<host>.json (API hosts)"),
    Stage(7, "accuracy", "accuracy", "playbooks/accuracy.yml", ("accuracy",), True, True,
          "artifacts/<run-id>/accuracy/<host>.json (API hosts)"),
    Stage(8, "report", "report", "playbooks/report.yml", (), False, False,
          "artifacts/<run-id>/report.{json,md,html}"),
)

BY_NAME = {s.name: s for s in STAGES}
# every stage, in order (the report's order and the console's columns)
STAGE_NAMES = [s.name for s in STAGES]
# what site.yml runs per host and records: every one is an expected result of a full run
PIPELINE_STAGES = [s.name for s in STAGES if s.records]
# role -> stage (a role's tasks name their stage wherever they run from)
ROLE_STAGE = {role: s.name for s in STAGES for role in s.roles}
