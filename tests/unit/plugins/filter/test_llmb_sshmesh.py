"""plugins/filter/llmb_sshmesh.py: the role-facing shims (registered loop results -> rows, errors)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

SPEC = importlib.util.spec_from_file_location(
    "llmb_sshmesh_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "llmb_sshmesh.py")
mod = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(mod)
F = mod.FilterModule().filters()


def pair(target, ok=True):
    return {"target": target, "address": "10.0.0.9", "port": 22, "ok": ok, "rc": 0, "output": "",
            "error": "" if ok else "refused", "hint": "h", "attempts": 1, "seconds": 0.0}


HOSTVARS = {
    "n1": {"__ssh_mesh_check": {"results": [{"item": 22, "pairs": [pair("n2")]},
                                            {"item": 2233, "pairs": [pair("n2", False)]}]}},
    "n2": {"__ssh_mesh_check": {"results": [{"item": 22, "pairs": [pair("n1")]},
                                            {"item": 2233, "pairs": [pair("n1")]}]}},
    "n3": {},
}


def test_rows_per_port_and_bad_count():
    rows = F["llmb_ssh_mesh_rows"](HOSTVARS, ["n1", "n2"], "__ssh_mesh_check", 22)
    assert rows == {"n1": [pair("n2")], "n2": [pair("n1")]}
    assert F["llmb_ssh_mesh_bad_pairs"](rows) == 0
    assert F["llmb_ssh_mesh_rows_bad"](2233, HOSTVARS, ["n1", "n2"], "__ssh_mesh_check") == 1
    # a node that has no result counts as bad (it failed before the check)
    assert F["llmb_ssh_mesh_rows_bad"](22, HOSTVARS, ["n1", "n2", "n3"], "__ssh_mesh_check") == 1


def test_matrix_text_and_failures():
    rows = F["llmb_ssh_mesh_rows"](HOSTVARS, ["n1", "n2"], "__ssh_mesh_check", "2233")
    assert "1/2 ordered pairs ok" in F["llmb_ssh_mesh_matrix"](rows, "2233")
    assert F["llmb_ssh_mesh_failures"](rows["n1"], "n1")[0].startswith("n1 -> n2 (10.0.0.9:22)")


def test_bad_input_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="ssh_mesh: not IP addresses"):
        F["llmb_ssh_authorized_line"]("ssh-ed25519 AAAA", ["node1"])
    assert F["llmb_ssh_not_addresses"](["10.0.0.1", "node1", "10.0.0.0/8"]) == ["node1"]


def test_known_hosts_for_container_port_as_string():
    nodes = [{"names": ["n1"], "host_key": "ssh-ed25519 AAAA1", "sshd_host_key": "ssh-ed25519 AAAA2"}]
    assert F["llmb_ssh_known_hosts_for"](nodes, "22", "2233") == "n1 ssh-ed25519 AAAA1\n[n1]:2233 ssh-ed25519 AAAA2\n"
    assert F["llmb_ssh_known_hosts_for"](nodes, 22, None) == "n1 ssh-ed25519 AAAA1\n"


def test_my_targets_follow_the_pairs_and_carry_the_role():
    targets = [{"name": n, "address": f"10.0.0.{i}"} for i, n in enumerate(["n1", "n2", "n3"], 1)]
    pairs = F["llmb_ssh_mesh_pairs"](["n1", "n2", "n3"], "mpirun", "64")
    assert F["llmb_ssh_mesh_my_targets"](targets, pairs, "n1") == [
        {"name": "n2", "address": "10.0.0.2", "role": "launcher"}, {"name": "n3", "address": "10.0.0.3", "role": "launcher"}]
    assert F["llmb_ssh_mesh_my_targets"](targets, pairs, "n2") == []
    allp = F["llmb_ssh_mesh_pairs"](["n1", "n2", "n3"], "all")
    assert [t["name"] for t in F["llmb_ssh_mesh_my_targets"](targets, allp, "n2")] == ["n1", "n3"]
    with pytest.raises(AnsibleFilterError, match="ssh_mesh: .*ssh_mesh_check_pairs"):
        F["llmb_ssh_mesh_pairs"](["n1"], "ring")


def test_mesh_stale_reads_each_nodes_slurped_host_key():
    import base64

    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh8m0YbqLkZ1gXoJq3sVvLr0fJm2P6dQm0xq3a1b2c3"
    new = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFRlcGxhY2VkUmVwbGFjZWRSZXBsYWNlZFJlcGxhY2Vk"
    known = f"# mesh\nn1,10.0.0.11 {key}\nn2,10.0.0.12 {key}\n"
    hv = {"n1": {"k": {"content": base64.b64encode(f"{key} root@n1\n".encode()).decode()}},
          "n2": {"k": {"content": base64.b64encode(f"{new} root@n2\n".encode()).decode()}}}
    targets = [{"name": "n1", "address": "10.0.0.11"}, {"name": "n2", "address": "10.0.0.12"}]
    assert F["llmb_ssh_mesh_stale"](hv, targets, known, "k") == [
        "n2 (10.0.0.12): its host key changed since the mesh pinned it"]
    assert F["llmb_ssh_mesh_stale"](hv, targets[:1], known, "k", 22) == []
    assert F["llmb_ssh_mesh_stale"]({"n1": {}}, targets[:1], known, "k") == [
        "n1 (10.0.0.11): its host key could not be read"]
