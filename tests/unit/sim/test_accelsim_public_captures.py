"""Layouts against public captures of real machines (fixtures/public, see its INDEX.md).

Public machines differ from the simulated profiles in values (loads, serials, driver versions), so
these tests put the capture's values into the model, or compare the parts that do not vary, and
then require the bytes to match.
"""

from __future__ import annotations

import re

import pytest
from capture_paths import fixtures_dir
from sim.accelsim import ascend, host, main, profiles

PUBLIC = fixtures_dir("public", "public captures") / "public"


def capture(relpath: str) -> str:
    text = (PUBLIC / relpath).read_text()
    header, sep, body = text.partition("\n\n")
    assert sep and all(line.startswith("# ") for line in header.splitlines())
    return body


def load_npu_values(model: ascend.AscendNode, text: str) -> None:
    """Copy power/temperature/AICore/HBM of each chip in an npu-smi capture into the model."""
    first = re.findall(r"^\| \d+\s+\S+\s+\| OK\s+\| (\S+)\s+(\d+)\s+", text, re.M)
    second = re.findall(
        r"^\| \d+(?:\s+\d+)?\s+\| \w{4}:\w\w:\w\w\.\d\s+\| (\d+)\s+\d+\s*/ \d+\s+(\d+)\s*/", text, re.M
    )
    assert len(first) == len(second) == len(model.chips)
    for chip, (power, temp), (aicore, hbm) in zip(model.chips, first, second, strict=True):
        if power != "-":
            chip.power = float(power)
        chip.temp, chip.aicore, chip.hbm_used = int(temp), int(aicore), int(hbm)


@pytest.mark.parametrize(
    ("profile", "path"),
    [
        ("a3-16npu", "npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt"),
        ("a2-910b-8", "npu-smi/910b3-8npu-idle-24.1rc1-ms-swift.txt"),
    ],
)
def test_npu_smi_info_layout(node, profile, path):
    node.use(profile)
    expected = capture(path)
    model = ascend.build(main.load_node())
    load_npu_values(model, expected)
    ours = ascend.render_info(model)
    # The captures' process tables differ (the A3 box was loaded, the A2 doc stopped before it).
    process_table = "+---------------------------+---------------+----------------------------------------------------+\n| NPU     Chip"
    assert ours.split(process_table)[0] == expected.split(process_table)[0]


def test_npu_smi_topo_layout_a3(node):
    """The capture shows Phy-ID 12/13 of an A3 (a container with one card); tabs were expanded on copy."""
    node.use("a3-16npu")
    for index in set(range(16)) - {12, 13}:
        node.fault("device_missing", f"index={index}")
    ours = node.out("npu-smi", "info", "-t", "topo")
    assert ours.expandtabs(8) == capture("npu-smi-topo/a3-2chip-sio-sglang-30453.txt")


def test_rocm_smi_showtopo_is_byte_exact(node):
    node.use("mi300x-8")
    assert node.out("rocm-smi", "--showtopo") == capture(
        "rocm-smi/mi300x-8gpu-showtopo-trailing-spaces-dstack.txt"
    )


def test_hccn_tool_line_shapes(node):
    node.use("a2-910b-8")
    ip = capture("hccn_tool/910b1-huaweicloud-dev3-ip-g.txt")
    ours = node.out("hccn_tool", "-i", "3", "-ip", "-g")
    assert [line.split(":")[0] for line in ours.splitlines()] == [
        line.split(":")[0] for line in ip.splitlines()
    ]
    assert re.fullmatch(r"ipaddr:\d+\.\d+\.\d+\.\d+\nnetmask:\d+\.\d+\.\d+\.\d+\n", ours)
    doc = capture("hccn_tool/mindcluster-doc-dev0-net_health-init-and-link-up.txt").splitlines()
    assert node.out("hccn_tool", "-i", "0", "-net_health", "-g").startswith(doc[1].rsplit(" ", 1)[0] + " ")
    assert node.out("hccn_tool", "-i", "0", "-link", "-g") == doc[4] + "\n"


def test_ascend_version_info_keys(node):
    node.use("a2-910b-8")
    expected = [
        line.split("=")[0]
        for line in capture("ascend-version-info/driver-24.1.rc2.2-mindie.txt").splitlines()
    ]
    ours = (node.root / "usr/local/Ascend/driver/version.info").read_text()
    assert [line.split("=")[0] for line in ours.splitlines()] == expected


def test_nvidia_h800_topology_matches_public_h800(node):
    """The public H800 copy lost its tabs and NIC columns to a narrow terminal: compare what survived."""
    node.use("h800-hgx8")
    ours = node.out("nvidia-smi", "topo", "--matrix").splitlines()
    theirs = capture("nvidia-smi-topo/h800-8gpu-nv8-4nic-clipped-narrow-terminal.txt").splitlines()
    for k in range(8):
        cells = ours[1 + k].split("\t")
        clipped = theirs[1 + k].split()
        assert cells[:9] == [f"GPU{k}"] + [c if c != "X" else " X " for c in clipped[1:9]]
        assert cells[-4].endswith(clipped[9]) and cells[-3] == clipped[10]
    for k in range(4):
        assert ours[9 + k].split("\t")[:9] == theirs[9 + k].split()[:9]


def test_nvidia_h800_nvlink_status_matches_public_h800(node):
    node.use("h800-hgx8")
    ours = node.out("nvidia-smi", "nvlink", "--status").splitlines()
    theirs = capture("nvlink/h800-8gpu-nvlink-status-8links-elided.txt").splitlines()
    uuid = re.compile(r"GPU-[0-9a-f-]+")
    assert [uuid.sub("U", line.strip()) for line in ours[:18]] == [
        uuid.sub("U", line.strip()) for line in theirs[:18]
    ]
    assert all(line.startswith("\t ") for line in ours if "Link" in line)


def test_nvidia_query_matches_public_h200(node):
    node.use("h200-hgx8")
    node.fault("driver_version", "version=570.211.01")
    ours = node.out(
        "nvidia-smi", "--query-gpu=index,name,memory.total,driver_version,power.limit,pstate", "--format=csv"
    )
    assert ours == capture("nvidia-smi-query/h200-8gpu-query-csv-power-pstate-570.txt")


def test_lscpu_a3_kunpeng(node):
    """The A3 profile's CPU block is the public A3 capture (4x Kunpeng 920 5250Y, 8 NUMA nodes)."""
    node.use("a3-16npu")
    assert node.out("lscpu") == capture("lscpu/kunpeng920-4socket-8numa-a3-vllm-ascend-3002.txt")


def test_numactl_two_nodes_layout():
    """A 2-socket numactl -H (EPYC distance 32): the capture's nodes and sizes give its bytes (free aside)."""
    expected = capture("numactl/2node-48cpu-unbalanced-free-zh-notes.txt")
    profile = {
        "name": "capture",
        "numa_nodes": ["0-23", "24-47"],
        "numa_memory_mb": [580352, 580512],
        "cpu": {"sockets": 2, "threads_per_core": 1},
        "cpu_spec": profiles.cpus()["epyc-9454"],
    }
    ours = host.render_numactl_hardware(host.topology(profile))

    def fixed(text: str) -> list[str]:
        return [line for line in text.split("\n") if not re.match(r"node \d+ free: ", line)]

    assert fixed(ours) == fixed(expected)
