"""Stage 0 refuses a node whose NVIDIA driver cannot run the chosen engine release, by name, before
anything is downloaded: `ansible-playbook playbooks/preflight.yml` against one simulated node (the
controller itself over the local connection, `nvidia-smi` the accelerator simulator's, driver
570.148.08) with the h100 sample inventory pinned to vLLM 0.23.0 (links libcudart.so.13).

Part of `make unit` (about 45 s: planning plus one ansible run, no docker); alone:
`pytest -q -p no:cacheprovider tests/integration/test_preflight_engine_driver.py`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIM_PY = """import sys
from sim.accelsim import main
rc, out, err = main.run("nvidia-smi", sys.argv[1:])
sys.stdout.write(out); sys.stderr.write(err); sys.exit(rc)
"""


def _node(tmp: Path, driver: str) -> Path:
    """A bin directory whose nvidia-smi is the simulator's h100-x1 node at ``driver``."""
    sys.path.insert(0, str(REPO / "tests"))
    from sim.accelsim import cli, state

    env = {"ACCELSIM_ROOT": str(tmp / "sim"), "ACCELSIM_HOSTNAME": "node1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        state.write_profile_name("h100-x1")
        state.write_faults([])
        cli.sync_derived()
        rc, _out, err = cli.run(["fault", "add", "driver_version", f"version={driver}"])
        assert rc == 0, err
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    bindir = tmp / "bin"
    bindir.mkdir()
    (tmp / "sim_smi.py").write_text(SIM_PY)
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexport ACCELSIM_ROOT={tmp / 'sim'} ACCELSIM_HOSTNAME=node1 "
                   f"PYTHONPATH={REPO / 'tests'}\nexec {sys.executable} {tmp / 'sim_smi.py'} \"$@\"\n")
    smi.chmod(0o755)
    return bindir


def _inventory(tmp: Path, version: str) -> Path:
    inv = tmp / "inv"
    shutil.copytree(REPO / "inventories" / "h100", inv)
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    accel_nodes:\n      hosts:\n        gpu-h100-01:\n"
        "          ansible_host: 127.0.0.1\n          ansible_connection: local\n"
        f"          ansible_python_interpreter: {sys.executable}\n          llmb_node_ip: 10.0.0.11\n")
    llmb = inv / "group_vars" / "all" / "llmb.yml"
    text = re.sub(r"(?m)^llmb_engine_version:.*\n", "", llmb.read_text())  # the sample's own, replaced
    llmb.write_text(text + f'\nllmb_engine_version: "{version}"\n'
                    'llmb_model_revision: "0123456789abcdef0123456789abcdef01234567"\n')
    return inv


def test_preflight_refuses_driver_570_for_vllm_0_23_0_before_any_download(tmp_path):
    bindir = _node(tmp_path, "570.148.08")
    inv = _inventory(tmp_path, "0.23.0")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", LLMB_ARTIFACTS_DIR=str(tmp_path / "art"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           "playbooks/preflight.yml"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert ("gpu-h100-01: preflight engine.driver: expected NVIDIA driver >= 580.65.06 for vllm 0.23.0 "
            "(links libcudart.so.13), found 570.148.08") in " ".join(out.split()), out[-3000:]
    # stage 0 only: nothing of the engine or weights stages ran
    assert "TASK [engine" not in out and "TASK [weights" not in out


def test_preflight_passes_a_driver_that_runs_the_release_in_one_round_with_the_nodes_facts(tmp_path):
    """The same node at driver 580.65.06: the driver check passes, in one task per node (llmb_preflight:
    the connection, the minimal facts, the driver), and the node's facts are the host's facts. (The node is
    the controller itself: where it has no systemd or no sshd key, preflight says so, and only that.)"""
    bindir = _node(tmp_path, "580.65.06")
    inv = _inventory(tmp_path, "0.23.0")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", LLMB_ARTIFACTS_DIR=str(tmp_path / "art"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-v", "-i", str(inv),
                           "playbooks/preflight.yml"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    out = proc.stdout + proc.stderr
    play = out.split("PLAY [Reachability and OS of every node]", 1)[1]
    assert play.count("TASK [") == 1, play[:3000]
    assert '"checked": ["driver", "os"]' in play and '"ansible_system": "Linux"' in play, play[:3000]
    assert "engine.driver" not in play, play[:3000]
    problems = re.findall(r"gpu-h100-01: (preflight [a-z.]+):", play)
    assert set(problems) <= {"preflight systemd", "preflight sshd"}, play[:3000]
    assert (proc.returncode == 0) == (not problems), out[-3000:]
