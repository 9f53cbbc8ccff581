"""The mpirun host lists the roles build (ssh_mesh's mpirun check, verify's fabric all-reduce), rendered
from the task files themselves with Ansible's templating and the project's filters: the launching
node (the task's delegate_to) comes first, named by its own host name; the others by their cluster
address. Open MPI 5 (Debian 13) counts no slot for the launching node named by its own IP address
(openpmix/prrte#2258: "There are not enough slots available")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]

pytest.importorskip("ansible.template")
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.plugins.loader import filter_loader  # noqa: E402
from ansible.template import Templar, trust_as_template  # noqa: E402

filter_loader.add_directory(str(ROOT / "plugins" / "filter"))


def _task(path: str, prefix: str) -> dict:
    tasks = yaml.safe_load((ROOT / path).read_text())
    (task,) = [t for t in tasks if str(t.get("name", "")).startswith(prefix)]
    return task


def _render(expr, variables: dict):
    trusted = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in variables.items()}
    return Templar(loader=DataLoader(), variables=trusted).template(trust_as_template(expr))


# inventory order n1, n2, n3; the cluster addresses are llmb_node_ip (n1, n3) or ansible_host (n2)
HOSTVARS = {
    "n1": {"llmb_node_ip": "10.1.0.11", "ansible_host": "192.0.2.11", "llmb_accel": {"device_count": 8},
           "__ssh_mesh_check": {"results": [{"item": 22, "hostname": "gpu-01"}]},
           "__verify_result": {"node_hostname": "gpu-01"}},
    "n2": {"ansible_host": "10.1.0.12", "llmb_accel": {"device_count": 8},
           "__ssh_mesh_check": {"results": [{"item": 22, "hostname": "gpu-02"}]},
           "__verify_result": {"node_hostname": "gpu-02"}},
    "n3": {"llmb_node_ip": "10.1.0.13", "llmb_accel": {"device_count": 4},
           "__ssh_mesh_check": {"results": [{"item": 22, "hostname": "gpu-03"}]},
           "__verify_result": {"node_hostname": "gpu-03"}},
}


def test_ssh_mesh_mpirun_check_names_the_launcher_by_host_name():
    task = _task("roles/ssh_mesh/tasks/check.yml", "Run mpirun across all nodes")
    variables = {
        "hostvars": HOSTVARS, "_ssh_mesh_nodes": ["n1", "n2", "n3"], "item": 22, "ssh_mesh_user": "ops",
        "ssh_mesh_mpirun_timeout_s": 60, "_ssh_mesh_client_config": "/etc/llmb/ssh-mesh/ssh_config",
        "_ssh_mesh_targets": "{{ hostvars | llmb_ssh_mesh_targets(_ssh_mesh_nodes) }}",
        **task.get("vars", {}),
    }
    argv = _render(task["ansible.builtin.command"]["argv"], variables)
    assert argv[argv.index("-H") + 1] == "gpu-01:1,10.1.0.12:1,10.1.0.13:1", argv
    assert argv[argv.index("-np") + 1] == "3"
    assert _render(task["delegate_to"], variables) == "n1"  # the launcher is the node named first


def test_verify_fabric_allreduce_names_the_launcher_by_host_name():
    task = _task("roles/verify/tasks/fabric.yml", "Fabric | all_reduce_perf across all nodes")
    variables = {
        "hostvars": HOSTVARS, "ansible_play_hosts": ["n1", "n2", "n3"],
        "_verify_fabric_nodes": "{{ hostvars | llmb_ssh_mesh_targets(ansible_play_hosts) }}",
        **task.get("vars", {}),
    }
    assert _render(task["vars"]["_hosts"], variables).strip() == "gpu-01:8,10.1.0.12:8,10.1.0.13:4"
    assert _render(task["delegate_to"], variables) == "n1"
