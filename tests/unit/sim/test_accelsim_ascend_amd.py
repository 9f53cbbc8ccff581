"""npu-smi, hccn_tool, version.info (Ascend) and amd-smi, rocm-smi (AMD): layouts and fault effects."""

from __future__ import annotations

import json
import re

import pytest

ASCEND_COMMANDS = [("info",), ("info", "-t", "topo"), ("info", "-t", "board", "-i", "0")]
AMD_COMMANDS = [
    ("list",),
    ("list", "--json"),
    ("static",),
    ("static", "--json"),
    ("topology",),
    ("topology", "--json"),
    ("version",),
    ("static", "-g", "1"),
]


@pytest.mark.parametrize("profile", ["a3-16npu", "a2-910b-8"])
@pytest.mark.parametrize("argv", ASCEND_COMMANDS, ids=" ".join)
def test_npu_smi_commands_run(node, profile, argv):
    node.use(profile)
    assert node.out("npu-smi", *argv)


@pytest.mark.parametrize("profile", ["mi300x-8", "mi325x-8"])
@pytest.mark.parametrize("argv", AMD_COMMANDS, ids=" ".join)
def test_amd_smi_commands_run(node, profile, argv):
    node.use(profile)
    out = node.out("amd-smi", *argv)
    if "--json" in argv:
        json.loads(out)


def test_tools_of_other_vendors_are_absent(node):
    node.use("a3-16npu")
    assert node.run("nvidia-smi")[0] == 127
    assert node.run("amd-smi", "list")[0] == 127
    node.use("h100-x1")
    assert node.run("npu-smi", "info")[0] == 127


def test_a3_has_16_chips_on_8_cards(node):
    node.use("a3-16npu")
    out = node.out("npu-smi", "info")
    assert len(re.findall(r"^\| \d+\s+Ascend910\s+\| OK", out, re.M)) == 16
    assert len(re.findall(r"^\| [01]     \d+ +\| 0000:", out, re.M)) == 16
    assert out.count("No running processes found in NPU") == 8
    topo = node.out("npu-smi", "info", "-t", "topo").splitlines()
    assert topo[0].split() == [f"Phy-ID{i}" for i in range(16)]
    row0 = topo[1].split()
    assert row0[:4] == ["Phy-ID0", "X", "SIO", "HCCS_SW"]
    assert set(row0[3:]) == {"HCCS_SW"}


def test_a2_topology_has_hccs_mesh_and_cpu_affinity(node):
    node.use("a2-910b-8")
    topo = node.out("npu-smi", "info", "-t", "topo").splitlines()
    assert topo[0] == "\t   " + "".join(f"NPU{i:<8}" for i in range(8)) + "CPU Affinity"
    assert topo[1].split() == ["NPU0", "X"] + ["HCCS"] * 7 + ["144-167"]
    assert topo[8].split()[-1] == "48-71"


def test_board_info(node):
    node.use("a2-910b-8")
    out = node.out("npu-smi", "info", "-t", "board", "-i", "2")
    fields = dict(line.strip().split(" : ", 1) for line in out.splitlines())
    fields = {k.strip(): v for k, v in fields.items()}
    assert (
        fields["NPU ID"] == "2" and fields["PCIe Bus Info"] == "0000:81:00.0" and fields["Chip Count"] == "1"
    )
    assert fields["Software Version"] == "24.1.rc1.b030"
    rc, out, _ = node.run("npu-smi", "info", "-t", "board", "-i", "9")
    assert rc == 1


def test_hccn_tool_ports(node):
    node.use("a3-16npu", hostname="node3")
    assert node.out("hccn_tool", "-i", "0", "-link", "-g") == "link status: UP\n"
    assert node.out("hccn_tool", "-i", "15", "-ip", "-g") == "ipaddr:192.168.115.3\nnetmask:255.255.255.0\n"
    assert node.out("hccn_tool", "-i", "7", "-net_health", "-g") == "net health status: Success\n"
    rc, _, err = node.run("hccn_tool", "-i", "0", "-lldp", "-g")
    assert rc == 2 and "simulated" in err
    assert node.run("hccn_tool", "-i", "16", "-link", "-g")[0] == 1


def test_hccn_down(node):
    node.use("a2-910b-8")
    node.fault("hccn_down", "device=5")
    assert node.out("hccn_tool", "-i", "5", "-link", "-g") == "link status: DOWN\n"
    assert node.out("hccn_tool", "-i", "5", "-ip", "-g") == "ipaddr:\nnetmask:\n"
    assert node.out("hccn_tool", "-i", "5", "-net_health", "-g") == "net health status: Fault\n"
    assert node.out("hccn_tool", "-i", "4", "-link", "-g") == "link status: UP\n"


def test_ascend_device_missing_link_down_numa_wrong(node):
    node.use("a2-910b-8")
    node.fault("device_missing", "index=3")
    node.fault("link_down", "gpu=0", "link=1")  # NPU0's second peer is NPU2
    node.fault("numa_wrong", "gpu=1", "numa=7")
    info = node.out("npu-smi", "info")
    assert "0000:82:00.0" not in info and "No running processes found in NPU 3" not in info
    topo = node.out("npu-smi", "info", "-t", "topo").splitlines()
    assert "NPU3" not in topo[0]
    assert topo[1].split() == ["NPU0", "X", "HCCS", "SYS", "HCCS", "HCCS", "HCCS", "HCCS", "144-167"]
    assert topo[3].split()[1] == "SYS"  # NPU2 -> NPU0
    assert topo[2].split()[-1] == "168-191"
    assert (node.root / "etc/accelsim/device_count").read_text() == "7\n"


def test_version_info_follows_driver_version(node):
    node.use("a3-16npu")
    path = node.root / "usr/local/Ascend/driver/version.info"
    assert path.read_text().startswith("Version=25.2.0\n")
    node.fault("driver_version", "version=24.1.rc2.2")
    text = path.read_text()
    assert "Version=24.1.rc2.2\n" in text and text.endswith("package_version=24.1.rc2.2\n")
    assert "npu-smi 24.1.rc2.2" in node.out("npu-smi", "info")
    node.accelsim("fault", "clear")
    assert path.read_text().startswith("Version=25.2.0\n")


def test_amd_list_and_static(node):
    node.use("mi300x-8")
    items = json.loads(node.out("amd-smi", "list", "--json"))
    assert [i["gpu"] for i in items] == list(range(8))
    assert items[0]["bdf"] == "0000:0c:00.0" and items[0]["node_id"] == 2
    text = node.out("amd-smi", "list")
    assert text.startswith("GPU: 0\n    BDF: 0000:0c:00.0\n    UUID: ")
    assert text.count("\n\nGPU: ") == 7
    static = json.loads(node.out("amd-smi", "static", "--json"))["gpu_data"]
    assert static[3]["asic"]["market_name"] == "AMD Instinct MI300X"
    assert static[3]["vram"]["size"] == {"value": 196592, "unit": "MB"}
    assert static[5]["numa"] == {"node": 1, "affinity": 1}
    assert "        SIZE: 196592 MB\n" in node.out("amd-smi", "static", "-g", "3")


def test_amd_topology_xgmi_mesh_and_link_down(node):
    node.use("mi325x-8")
    topo = json.loads(node.out("amd-smi", "topology", "--json"))
    assert {link["link_type"] for g in topo for link in g["links"]} == {"SELF", "XGMI"}
    node.fault("link_down", "gpu=0", "link=0")  # GPU0 <-> GPU1 falls back to PCIe
    topo = json.loads(node.out("amd-smi", "topology", "--json"))
    assert topo[0]["links"][1]["link_type"] == topo[1]["links"][0]["link_type"] == "PCIE"
    assert topo[0]["links"][2]["link_type"] == "XGMI"
    text = node.out("amd-smi", "topology")
    link_table = text.split("LINK TYPE TABLE:\n")[1].split("\n\n")[0].splitlines()
    assert link_table[1].split() == ["0000:05:00.0", "SELF", "PCIE"] + ["XGMI"] * 6
    rocm = node.out("rocm-smi", "--showtopo")
    assert "GPU0   0            PCIE         XGMI" in rocm


def test_amd_faults_device_missing_numa_driver(node):
    node.use("mi300x-8")
    node.fault("device_missing", "index=7")
    node.fault("numa_wrong", "gpu=0")
    node.fault("driver_version", "version=6.8.5")
    assert len(json.loads(node.out("amd-smi", "list", "--json"))) == 7
    rocm = node.out("rocm-smi", "--showtopo")
    assert "GPU7" not in rocm
    assert "GPU[0]\t\t: (Topology) Numa Node: 1\n" in rocm
    static = json.loads(node.out("amd-smi", "static", "--json"))["gpu_data"]
    assert static[0]["driver"]["version"] == "6.8.5"
    assert "amdgpu version: 6.8.5" in node.out("amd-smi", "version")


@pytest.mark.parametrize(
    "kind", ["link_degraded gpu=0 link=0", "ecc_off", "persistence_off", "fabricmanager_stopped"]
)
def test_nvidia_only_faults_are_refused_on_amd(node, kind):
    node.use("mi300x-8")
    rc, _, err = node.accelsim("fault", "add", *kind.split())
    assert rc == 2 and "does not apply to amd profile" in err
