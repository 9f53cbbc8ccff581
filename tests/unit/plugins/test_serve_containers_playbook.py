"""The serve role's container levels (roles/serve/tasks/level.yml) run by ansible-playbook over a local
connection, with the fake docker CLI on PATH (tests/fakedocker.py): the tasks' Jinja (pins from the
deployment document, env split into public and secret, the replaced-container facts) and the
module together. Containers only: units need systemd (the simulated cluster's scenarios run those).
Two playbook runs; check mode and the faults are tested on the module itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
IMAGE = "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3"
DIGEST = "sha256:" + "d" * 64
SECRET = "hf_do_not_show_me_0123456789"

pytestmark = pytest.mark.skipif(not (BIN / "ansible-playbook").exists(), reason="needs the venv's ansible-playbook")


def services(argv_tail: str = "/m") -> list[dict]:
    box = {
        "kind": "container", "image": IMAGE, "devices": [], "mounts": ["/srv:/srv:ro"], "ports": [],
        "ready": None, "health": None, "api": None, "exec_in": None, "depends_on": [], "config_files": [],
    }
    return [
        {**box, "name": "head-box", "role": "ray-head", "order": 10, "argv": ["vllm", "serve", argv_tail],
         "env": {"HCCL_IF_IP": "10.0.0.1", "HF_TOKEN": SECRET},
         "container": {"name": "head-box", "network": "host", "entrypoint": "vllm", "command": ["serve", argv_tail]}},
        {**box, "name": "other-box", "role": "ray-worker", "order": 20, "argv": ["ray", "start"],
         "env": {"HCCL_IF_IP": "10.0.0.2"},
         "container": {"name": "other-box", "network": "host", "entrypoint": "ray", "command": ["start"]}},
    ]


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    serve_etc_dir: "{{ tmp }}/etc"
    serve_health_timeout_s: 5
    serve_health_interval_s: 1
    serve_log_lines: 5
    serve_container_settle_s: 0
    _serve_changed: []
    _serve_replaced: []
    llmb_deployment:
      engine: {image: {ref: "IMAGE_REF", digest: "IMAGE_DIGEST", id: null}}
  tasks:
    - name: Levels
      ansible.builtin.include_role:
        name: serve
        tasks_from: level.yml
      loop: [10, 20]
      loop_control:
        loop_var: _serve_level
    - name: Show what was replaced
      ansible.builtin.debug:
        msg: "REPLACED={{ _serve_replaced | to_json }}"
    - name: Show what was started (the start history's starts)
      ansible.builtin.debug:
        msg: "STARTED={{ _serve_started | default([]) | to_json }}"
""".replace("IMAGE_REF", IMAGE).replace("IMAGE_DIGEST", DIGEST)


@pytest.fixture
def env(tmp_path: Path) -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                                   "from fakedocker import main\nsys.exit(main())\n")
    (bindir / "docker").chmod(0o755)
    state = tmp_path / "docker.json"
    state.write_text(json.dumps({"images": {IMAGE: {"Id": "sha256:" + "9" * 64,
                                                    "RepoDigests": [f"quay.io/ascend/vllm-ascend@{DIGEST}"]}}}))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    return dict(os.environ, PATH=f"{bindir}:{BIN}:/usr/bin:/bin", FAKE_DOCKER_STATE=str(state),
                ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
                ANSIBLE_LIBRARY=str(ROOT / "plugins" / "modules"),
                ANSIBLE_MODULE_UTILS=str(ROOT / "plugins" / "module_utils"),
                ANSIBLE_FILTER_PLUGINS=str(ROOT / "plugins" / "filter"),
                ANSIBLE_ACTION_PLUGINS=str(ROOT / "plugins" / "action"),
                ANSIBLE_CACHE_PLUGIN="memory", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
                ANSIBLE_INVENTORY_UNPARSED_WARNING="0", LANG="C.UTF-8", LC_ALL="C.UTF-8", TMPDIR=str(tmp_path))


def play(env: dict, tmp: Path, svcs: list[dict], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), str(tmp / "play.yml"), "-i", "localhost,", "-c", "local", "-v",
         "-e", json.dumps({"tmp": str(tmp), "_serve_services": svcs}), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)


def replaced(run: subprocess.CompletedProcess, key: str = "REPLACED") -> list[str]:
    line = next(ln for ln in run.stdout.splitlines() if f"{key}=" in ln)
    return json.loads(line.split(f"{key}=", 1)[1].rstrip('"').replace('\\"', '"'))


def test_levels_create_leave_and_replace_only_the_changed_container(env, tmp_path):
    state = Path(env["FAKE_DOCKER_STATE"])
    first = play(env, tmp_path, services())
    assert first.returncode == 0, first.stdout[-4000:]
    boxes = json.loads(state.read_text())["containers"]
    assert set(boxes) == {"head-box", "other-box"}
    assert replaced(first) == ["localhost/head-box", "localhost/other-box"]
    assert replaced(first, "STARTED") == ["head-box", "other-box"]  # both started: both join the start history
    assert SECRET not in first.stdout + first.stderr  # -v output: loop items are names, secrets masked
    files = json.loads(state.read_text())["env_files"]
    assert f"HF_TOKEN={SECRET}\n" in files[0] and "HCCL_IF_IP=10.0.0.1\n" in files[0]

    # head-box's argv changed: it is replaced, other-box (same spec) is left running
    changed = play(env, tmp_path, services("/m2"))
    assert changed.returncode == 0, changed.stdout[-4000:]
    assert replaced(changed) == ["localhost/head-box"]
    assert replaced(changed, "STARTED") == ["head-box"]  # other-box ran on: its health wait is no start
    now = json.loads(state.read_text())["containers"]
    assert now["head-box"]["_argv"][-1] == "/m2"
    assert now["other-box"]["_argv"] == boxes["other-box"]["_argv"]
