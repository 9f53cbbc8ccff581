"""Preflight's node OS checks (llmbctl.nodeos): the facts the toolkit relies on, each deviation naming
host, check, expected and found."""

from __future__ import annotations

from llmbctl.nodeos import TESTED_TEXT, compiler_problems, os_problems, os_untested, preflight_problems

GOOD = {
    "system": "Linux", "service_mgr": "systemd", "distribution": "Debian", "distribution_major_version": "12",
    "python": {"executable": "/usr/bin/python3", "version": {"major": 3, "minor": 11, "micro": 2}},
    "ssh_host_key_ed25519_public": "AAAAC3NzaC1lZDI1NTE5AAAAI...",
}


def test_a_tested_node_has_no_problem():
    assert os_problems("node1", GOOD) == []
    assert os_untested("node1", GOOD) is None
    assert os_untested("node1", {**GOOD, "distribution_major_version": "13"}) is None


def test_old_python_names_host_expected_found_and_where():
    facts = {**GOOD, "python": {"executable": "/usr/bin/python3", "version": {"major": 3, "minor": 8}}}
    (msg,) = os_problems("gpu-07", facts)
    assert msg.startswith("gpu-07: preflight python: expected python3 >= 3.9")
    assert "found 3.8 at /usr/bin/python3" in msg and "ansible_python_interpreter" in msg


def test_python_39_is_enough():
    assert os_problems("n", {**GOOD, "python": {"version": {"major": 3, "minor": 9}}}) == []


def test_no_systemd_and_no_sshd_key_are_both_reported():
    facts = {**GOOD, "service_mgr": "sysvinit"}
    facts.pop("ssh_host_key_ed25519_public")
    problems = os_problems("n2", facts)
    assert len(problems) == 2
    assert "n2: preflight systemd: expected systemd" in problems[0] and "found sysvinit" in problems[0]
    assert "n2: preflight sshd: expected sshd with an ed25519 host key" in problems[1]


def test_not_linux_and_missing_facts_say_unknown():
    problems = os_problems("mac", {"system": "Darwin"})
    assert problems[0] == "mac: preflight os: expected Linux, found Darwin. the toolkit drives Linux nodes only"
    assert any("found unknown at unknown" in p for p in problems)


def test_an_untested_distribution_is_a_note_naming_the_tested_ones():
    note = os_untested("n3", {**GOOD, "distribution": "Ubuntu", "distribution_major_version": "24"})
    assert note.startswith("n3: preflight os: Ubuntu 24 is not among the tested node OSes")
    assert TESTED_TEXT in note and "Debian 12 (bookworm)" in TESTED_TEXT and "Debian 13 (trixie)" in TESTED_TEXT


def test_no_compiler_where_listeners_are_confined_names_the_ports_and_the_way_out():
    assert compiler_problems("n1", "", None) == []  # nothing confined: no compiler needed
    assert compiler_problems("n1", "6379,29500", "/usr/bin/cc") == []
    (msg,) = compiler_problems("n1", "6379,29500", None)
    assert msg.startswith("n1: preflight bindto.compiler: expected a C compiler (cc, gcc or clang)")
    assert "binds port(s) 6379,29500 to the cluster address, found none." in msg
    assert "llmb_confine_listeners: false" in msg


def test_preflight_problems_are_the_os_then_the_compiler_and_no_driver_check_without_a_query():
    facts = {**GOOD, "service_mgr": "openrc"}
    problems = preflight_problems("n4", facts, engine="vllm", version="0.0.0-unknown", vendor="nvidia",
                                  driver_query=None, confined="6379", compiler=None)
    assert [p.split(":")[1].strip() for p in problems] == ["preflight systemd", "preflight bindto.compiler"]
    assert preflight_problems("n4", GOOD) == []
