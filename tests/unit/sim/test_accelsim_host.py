"""numactl and lscpu of the simulated nodes: every profile, read back through the verify stage's parsers.

Byte layouts are compared with real captures in test_real_captures.py (h100-x1, h200-x2) and
test_accelsim_public_captures.py (A3 lscpu, a 2-node numactl).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from llmb.hw import host as parsers
from sim.accelsim import host, profiles

REPO = Path(__file__).resolve().parents[3]
PROFILES = profiles.list_profiles()


@pytest.mark.parametrize("name", PROFILES)
def test_numactl_hardware_reads_back_as_the_profile(node, name):
    node.use(name)
    profile = profiles.load(name)
    facts = parsers.parse_numactl(node.out("numactl", "-H"))
    assert facts["available"] == len(profile["numa_nodes"])
    assert [n["cpus"] for n in facts["nodes"]] == [host.parse_cpulist(c) for c in profile["numa_nodes"]]
    assert [n["size_mb"] for n in facts["nodes"]] == profile["numa_memory_mb"]
    assert all(0 < n["free_mb"] < n["size_mb"] for n in facts["nodes"])
    matrix = facts["distances"]
    assert all(matrix[i][i] == 10 for i in range(len(matrix)))
    assert matrix == [list(row) for row in zip(*matrix, strict=True)]  # symmetric


@pytest.mark.parametrize("name", PROFILES)
def test_lscpu_text_and_json_agree_and_match_the_profile(node, name):
    node.use(name)
    profile = profiles.load(name)
    text = parsers.parse_lscpu(node.out("lscpu"))
    as_json = parsers.parse_lscpu_json(node.out("lscpu", "-J"))
    assert text == {**as_json, "kind": "lscpu"}
    nodes = [host.parse_cpulist(c) for c in profile["numa_nodes"]]
    assert [n["cpus"] for n in text["numa_nodes"]] == nodes
    assert (
        text["cpus"]
        == sum(map(len, nodes))
        == text["sockets"] * text["cores_per_socket"] * text["threads_per_core"]
    )
    assert text["online_cpus"] == list(range(text["cpus"]))
    assert text["sockets"] == profile["cpu"]["sockets"]
    assert text["model_name"]


@pytest.mark.parametrize("name", PROFILES)
def test_profile_agrees_with_the_platform_data(name):
    """What verify compares: data/platforms/NAME.yml numa.nodes and device_nodes against the simulated node."""
    path = REPO / "data" / "platforms" / f"{name}.yml"
    if not path.is_file():
        pytest.skip(f"no {path.name}")
    numa = yaml.safe_load(path.read_text()).get("numa") or {}
    profile = profiles.load(name)
    if numa.get("nodes") is not None:
        assert numa["nodes"] == len(profile["numa_nodes"])
    if numa.get("device_nodes") is not None:
        assert numa["device_nodes"] == [g["numa"] for g in profile["gpus"]]


@pytest.mark.parametrize("name", PROFILES)
def test_each_numa_node_sits_on_one_socket(name):
    topo = host.topology(profiles.load(name))
    for n in range(len(topo.nodes)):
        assert len({c.socket for c in topo.cpus if c.node == n}) == 1
    assert len({c.core for c in topo.cpus}) == topo.sockets * topo.cores_per_socket


def test_numactl_show_is_an_unbound_process(node):
    node.use("h800-hgx8")
    lines = node.out("numactl", "--show").split("\n")
    assert lines[:2] == ["policy: default", "preferred node: current"]
    assert lines[2] == "physcpubind: " + " ".join(map(str, range(128))) + " "
    assert lines[3:] == ["cpubind: 0 1 ", "nodebind: 0 1 ", "membind: 0 1 ", "preferred: ", ""]


def test_numactl_distance_matrix_of_four_sockets(node):
    node.use("a3-16npu")
    out = node.out("numactl", "-H")
    assert out.startswith("available: 8 nodes (0-7)\nnode 0 cpus: 0 1 2 ")
    tail = out.split("node distances:\n")[1].split("\n")
    assert tail[0] == "node   0   1   2   3   4   5   6   7 "
    assert tail[1] == "  0:  10  12  20  22  20  22  20  22 "
    assert tail[2] == "  1:  12  10  22  24  22  24  22  24 "


def test_lscpu_extended(node):
    node.use("h100-hgx8")
    lines = node.out("lscpu", "-e").splitlines()
    assert lines[0] == "CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE    MAXMHZ   MINMHZ      MHZ"
    assert len(lines) == 1 + 224
    assert lines[1] == "  0    0      0    0 0:0:0:0          yes 3800.0000 800.0000 912.0000"
    assert lines[1 + 56].split()[:5] == ["56", "1", "1", "56", "56:56:56:1"]
    assert lines[1 + 112].split()[:5] == ["112", "0", "0", "0", "0:0:0:0"]  # the SMT sibling of CPU 0
    node.use("h100-x1")  # a VM: no frequency columns
    assert node.out("lscpu", "--extended").splitlines()[:2] == [
        "CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE",
        "  0    0      0    0 0:0:0:0          yes",
    ]
    node.use("a3-16npu")  # SMT siblings numbered next to each other, L3 per die (NUMA node)
    rows = [line.split() for line in node.out("lscpu", "-e").splitlines()[1:]]
    assert rows[1][:5] == ["1", "0", "0", "0", "0:0:0:0"]
    assert rows[383][:5] == ["383", "7", "3", "191", "191:191:191:7"]


def test_lscpu_json_is_the_flat_util_linux_layout(node):
    node.use("h200-hgx8")
    out = node.out("lscpu", "--json")
    data = json.loads(out)
    assert list(data) == ["lscpu"] and all(set(item) == {"field", "data"} for item in data["lscpu"])
    assert out.startswith('{\n   "lscpu": [\n      {\n         "field": "Architecture:",\n')
    assert '\n      },{\n         "field": "CPU op-mode(s):",\n' in out
    assert out.endswith('"\n      }\n   ]\n}\n')


@pytest.mark.parametrize(
    ("tool", "argv", "answered"),
    [
        ("numactl", ["-H"], True),
        ("numactl", ["--hardware"], True),
        ("numactl", ["-s"], True),
        ("numactl", ["--show"], True),
        ("numactl", ["-H", "ignored"], True),  # numactl prints and exits at -H
        ("numactl", [], False),
        ("numactl", ["--cpunodebind=0", "--membind=0", "true"], False),
        ("numactl", ["--cpunodebind=0", "-H"], False),
        ("lscpu", [], True),
        ("lscpu", ["-J"], True),
        ("lscpu", ["--json"], True),
        ("lscpu", ["-e"], True),
        ("lscpu", ["--extended"], True),
        ("lscpu", ["-p"], False),
        ("lscpu", ["-e=CPU,NODE"], False),
        ("lscpu", ["-J", "-e"], False),
        ("lscpu", ["-C"], False),
    ],
)
def test_which_forms_are_simulated(node, tool, argv, answered):
    assert host.simulated(tool, argv) is answered
    node.use("h800-hgx8")
    rc, out, err = node.run(tool, *argv)
    if answered:
        assert rc == 0 and out and not err
    else:  # in-process the rest is refused; the installed wrapper execs the real tool instead
        assert rc == 2 and f"/usr/bin/{tool}" in err


def test_numa_wrong_moves_the_device_not_the_nodes(node):
    node.use("h800-hgx8")
    before = node.out("numactl", "-H"), node.out("lscpu", "-J")
    node.fault("numa_wrong", "gpu=0", "numa=1")
    row = next(
        line for line in node.out("nvidia-smi", "topo", "-m").splitlines() if line.startswith("GPU0\t")
    )
    assert row.split("\t")[-4:-2] == ["32-63,96-127", "1"]
    assert (node.out("numactl", "-H"), node.out("lscpu", "-J")) == before


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (768 * 1024, "768 KiB"),
        (1536 * 1024, "1.5 MiB"),
        (112 * 48 * 1024, "5.3 MiB"),
        (300 * 1024 * 1024, "300 MiB"),
        (1023, "1023 B"),
        (1024 * 1024 * 1024 - 1, "1024 MiB"),  # rounding carries into the figure, not into the unit
        (int(2.25 * 1024**3), "2.3 GiB"),
    ],
)
def test_human_size_as_util_linux(size, text):
    assert host.human_size(size) == text


@pytest.mark.parametrize(
    ("cpus", "text"),
    [([0, 1], "0,1"), ([0, 1, 2], "0-2"), ([0, 2, 3, 4, 6, 7], "0,2-4,6,7"), ([5], "5")],
)
def test_cpulist_as_util_linux(cpus, text):
    assert host.cpulist(cpus) == text
    assert host.parse_cpulist(text) == cpus
