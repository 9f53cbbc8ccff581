"""nvidia-smi on the simulated NVIDIA profiles: layouts, per-node identity, and every fault's effect."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from sim.accelsim import profiles

NVIDIA = [p for p in profiles.list_profiles() if profiles.load(p)["vendor"] == "nvidia"]
HGX = ["h100-hgx8", "h800-hgx8", "h200-hgx8", "h20-hgx8"]
COMMANDS = [
    (),
    ("-L",),
    ("-q",),
    ("-q", "-x"),
    ("--query-gpu=index,name,uuid,pci.bus_id,memory.total,fabric.state", "--format=csv"),
    ("topo", "-m"),
    ("topo", "--matrix"),
    ("topo", "-p2p", "n"),
    ("nvlink", "-s"),
    ("nvlink", "--status"),
    ("nvlink", "-c"),
]


def topo_rows(text: str) -> dict[str, list[str]]:
    """topo -m -> {'GPU0': [cells...], ...} for the GPU rows (GPU columns only)."""
    lines = text.split("\n")
    header = lines[0].replace("\x1b[4m", "").replace("\x1b[0m", "").split("\t")[1:]
    ngpu = sum(1 for h in header if h.startswith("GPU") and h != "GPU NUMA ID")
    rows = {}
    for line in lines[1:]:
        if not line.startswith("GPU"):
            break
        cells = line.split("\t")
        rows[cells[0]] = [c.strip() for c in cells[1:]]
    assert all(len(r) >= ngpu for r in rows.values())
    return rows


def query(node, fields: str, *extra: str) -> list[list[str]]:
    out = node.out("nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader", *extra)
    return [line.split(", ") for line in out.splitlines()]


@pytest.mark.parametrize("profile", NVIDIA)
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a) or "table")
def test_every_command_runs_on_every_profile(node, profile, argv):
    node.use(profile)
    rc, out, err = node.run("nvidia-smi", *argv)
    assert rc == 0, err
    assert err == ""


@pytest.mark.parametrize("profile", NVIDIA)
def test_xml_is_well_formed_and_consistent(node, profile):
    node.use(profile)
    root = ET.fromstring(node.out("nvidia-smi", "-q", "-x"))
    gpus = root.findall("gpu")
    assert root.findtext("attached_gpus") == str(len(gpus)) == str(len(profiles.load(profile)["gpus"]))
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in node.out("nvidia-smi", "-L").splitlines()]
    assert [g.findtext("uuid") for g in gpus] == uuids


@pytest.mark.parametrize(
    ("profile", "links"), [("h100-hgx8", 18), ("h800-hgx8", 8), ("h200-hgx8", 18), ("h20-hgx8", 18)]
)
def test_hgx_profiles_are_full_nvlink_meshes(node, profile, links):
    node.use(profile)
    rows = topo_rows(node.out("nvidia-smi", "topo", "-m"))
    assert len(rows) == 8
    for i, row in enumerate(rows.values()):
        assert row[:8] == [("X" if j == i else f"NV{links}") for j in range(8)]
    status = node.out("nvidia-smi", "nvlink", "-s")
    assert status.count("GPU ") == 8
    assert status.count(": 26.562 GB/s") == 8 * links


def test_hgx_numa_split_and_nics(node):
    node.use("h100-hgx8")
    text = node.out("nvidia-smi", "topo", "-m")
    for line in text.splitlines()[1:9]:
        cells = line.split("\t")
        gpu = int(cells[0][3:])
        assert cells[-3:] == ["0" if gpu < 4 else "1", "", "N/A"]
        assert cells[-4] == ("0-55,112-167" if gpu < 4 else "56-111,168-223")
        assert cells[1 + 8 + gpu] == "PIX"  # its own NIC
    assert "NIC Legend:\n\n  NIC0: mlx5_0\n" in text
    assert (
        text.splitlines()[0]
        == "\t\x1b[4m"
        + "\t".join(
            [f"GPU{i}" for i in range(8)]
            + [f"NIC{i}" for i in range(8)]
            + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
        )
        + "\x1b[0m"
    )


def test_identity_is_derived_from_the_hostname(node):
    node.use("h100-hgx8", hostname="node1")
    first = node.out("nvidia-smi", "-L")
    assert first == node.out("nvidia-smi", "-L")
    node.use("h100-hgx8", hostname="node2")
    second = node.out("nvidia-smi", "-L")
    assert first != second
    uuids = re.findall(r"GPU-[0-9a-f-]{36}", first + second)
    assert len(set(uuids)) == 16


def test_query_units_and_header_options(node):
    node.use("h200-hgx8")
    out = node.out("nvidia-smi", "--query-gpu=index,memory.total,power.limit,pstate", "--format=csv")
    assert out.splitlines()[0] == "index, memory.total [MiB], power.limit [W], pstate"
    assert out.splitlines()[1] == "0, 143771 MiB, 700.00 W, P0"
    out = node.out(
        "nvidia-smi", "--query-gpu=index,memory.total,power.limit", "--format=csv,noheader,nounits"
    )
    assert out.splitlines()[7] == "7, 143771, 700.00"
    out = node.out("nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "3")
    assert out == "143771\n"


def test_query_unknown_field_fails_like_nvidia_smi(node):
    node.use("h100-x1")
    rc, out, _ = node.run("nvidia-smi", "--query-gpu=index,bogus", "--format=csv")
    assert rc == 2
    assert out == 'Field "bogus" is not a valid field to query.\n\n'


def test_unsupported_arguments_fail_clearly(node):
    node.use("h100-x1")
    rc, out, _ = node.run("nvidia-smi", "--frobnicate")
    assert rc == 2 and "Invalid combination of input arguments" in out
    rc, _, err = node.run("nvidia-smi", "topo", "-x")
    assert rc == 2 and "simulated" in err


def test_q_selects_one_gpu_but_counts_all(node):
    node.use("h800-hgx8")
    out = node.out("nvidia-smi", "-q", "-i", "2")
    assert "Attached GPUs                                          : 8\n" in out
    assert out.count("\nGPU 0000") == 1 and "GPU 00000000:3A:00.0\n" in out


# --- faults -------------------------------------------------------------------------------------


def test_device_missing_disappears_everywhere(node):
    node.use("h100-hgx8")
    node.fault("device_missing", "index=2")
    assert len(node.out("nvidia-smi", "-L").splitlines()) == 7
    assert "00000000:52:00.0" not in node.out("nvidia-smi")
    assert "00000000:52:00.0" not in node.out("nvidia-smi", "-q")
    assert "Attached GPUs                                          : 7" in node.out("nvidia-smi", "-q")
    assert [r[1] for r in query(node, "index,pci.bus_id")][2] == "00000000:61:00.0"
    assert len(topo_rows(node.out("nvidia-smi", "topo", "-m"))) == 7
    assert (node.root / "etc/accelsim/device_count").read_text() == "7\n"
    # minor numbers keep the physical numbering, display indices close the gap
    assert re.findall(r"Minor Number\s+: (\d+)", node.out("nvidia-smi", "-q")) == [
        "0",
        "1",
        "3",
        "4",
        "5",
        "6",
        "7",
    ]


def test_all_devices_missing(node):
    node.use("h100-x1")
    node.fault("device_missing", "index=0")
    rc, out, _ = node.run("nvidia-smi")
    assert (rc, out) == (6, "No devices were found\n")


@pytest.mark.parametrize(
    ("profile", "full", "less"), [("h100-hgx8", "NV18", "NV17"), ("h800-hgx8", "NV8", "NV7")]
)
def test_link_down_on_nvswitch_drops_one_link_from_that_gpus_pairs(node, profile, full, less):
    node.use(profile)
    node.fault("link_down", "gpu=3", "link=5")
    rows = topo_rows(node.out("nvidia-smi", "topo", "-m"))
    for i in range(8):
        for j in range(8):
            expected = "X" if i == j else (less if 3 in (i, j) else full)
            assert rows[f"GPU{i}"][j] == expected, (i, j)
    status = node.out("nvidia-smi", "nvlink", "-s", "-i", "3")
    assert "\t Link 5: <inactive>\n" in status
    assert status.count("<inactive>") == 1
    assert "<inactive>" not in node.out("nvidia-smi", "nvlink", "-s", "-i", "2")


def test_link_down_on_direct_nvlink_takes_both_ends(node):
    node.use("h200-x2")
    node.fault("link_down", "gpu=0", "link=4")
    rows = topo_rows(node.out("nvidia-smi", "topo", "-m"))
    assert rows["GPU0"][1] == rows["GPU1"][0] == "NV17"
    status = node.out("nvidia-smi", "nvlink", "-s")
    assert status.count("\t Link 4: <inactive>\n") == 2
    caps = node.out("nvidia-smi", "nvlink", "-c", "-i", "0")
    assert "\t Link 4, P2P is supported: false\n" in caps


def test_link_degraded_lowers_speed_but_keeps_the_link(node):
    node.use("h100-hgx8")
    node.fault("link_degraded", "gpu=1", "link=0")
    node.fault("link_degraded", "gpu=1", "link=1", "speed=6.641 GB/s")
    status = node.out("nvidia-smi", "nvlink", "-s", "-i", "1")
    assert "\t Link 0: 13.281 GB/s\n" in status
    assert "\t Link 1: 6.641 GB/s\n" in status
    assert topo_rows(node.out("nvidia-smi", "topo", "-m"))["GPU1"][0] == "NV18"


def test_driver_version_everywhere(node):
    node.use("h800-hgx8")
    node.fault("driver_version", "version=535.104.05")
    assert "Driver Version: 535.104.05" in node.out("nvidia-smi")
    q = node.out("nvidia-smi", "-q")
    assert "Driver Version                                         : 535.104.05\n" in q
    assert "GSP Firmware Version                               : 535.104.05\n" in q
    assert "<driver_version>535.104.05</driver_version>" in node.out("nvidia-smi", "-q", "-x")
    assert {r[0] for r in query(node, "driver_version")} == {"535.104.05"}


def test_numa_wrong_moves_affinity_to_the_other_node(node):
    node.use("h100-hgx8")
    node.fault("numa_wrong", "gpu=1")
    line = node.out("nvidia-smi", "topo", "-m").splitlines()[2]
    assert line.startswith("GPU1\t")
    assert line.split("\t")[-4:] == ["56-111,168-223", "1", "", "N/A"]
    node.fault("numa_wrong", "gpu=6", "numa=0")
    line = node.out("nvidia-smi", "topo", "-m").splitlines()[7]
    assert line.split("\t")[-4:] == ["0-55,112-167", "0", "", "N/A"]


def test_fabricmanager_stopped(node):
    node.use("h100-hgx8")
    assert {r[0] for r in query(node, "fabric.state,fabric.status")} == {"Completed"}
    node.fault("fabricmanager_stopped")
    q = node.out("nvidia-smi", "-q")
    assert q.count("        State                                          : In Progress\n") == 8
    assert {tuple(r) for r in query(node, "fabric.state,fabric.status")} == {("In Progress", "N/A")}
    assert (node.root / "etc/accelsim/cuda_not_ready").exists()
    assert node.accelsim("fault", "clear", "fabricmanager_stopped")[0] == 0
    assert not (node.root / "etc/accelsim/cuda_not_ready").exists()
    assert {r[0] for r in query(node, "fabric.state")} == {"Completed"}


def test_fabric_manager_installed_but_not_running_is_not_ready(node):
    node.use("h800-hgx8")
    (node.root / "etc/accelsim/fabricmanager").write_text("/run/nvidia-fabricmanager/nv-fabricmanager.pid\n")
    assert {r[0] for r in query(node, "fabric.state")} == {"In Progress"}
    pidfile = node.root / "run/nvidia-fabricmanager/nv-fabricmanager.pid"
    pidfile.parent.mkdir(parents=True)
    import os

    pidfile.write_text(f"{os.getpid()}\n")
    assert {r[0] for r in query(node, "fabric.state")} == {"Completed"}


def test_ecc_off(node):
    node.use("h100-hgx8")
    node.fault("ecc_off", "gpu=4")
    table = node.out("nvidia-smi")
    ecc_cells = re.findall(r"^\|\s+(\d)  NVIDIA.*\|\s+(\S+) \|$", table, re.M)
    assert ecc_cells == [(str(i), "Off" if i == 4 else "0") for i in range(8)]
    assert [r[0] for r in query(node, "ecc.mode.current")] == ["Enabled"] * 4 + ["Disabled"] + ["Enabled"] * 3
    gpu4 = node.out("nvidia-smi", "-q", "-i", "4")
    assert "            DRAM Uncorrectable                         : N/A\n" in gpu4
    node.fault("ecc_off")
    assert {r[0] for r in query(node, "ecc.mode.current")} == {"Disabled"}


def test_persistence_off(node):
    node.use("h200-x2")
    node.fault("persistence_off")
    assert node.out("nvidia-smi").count("NVIDIA H200                    Off |") == 2
    assert {r[0] for r in query(node, "persistence_mode")} == {"Disabled"}
    assert "    Persistence Mode                                   : Disabled\n" in node.out(
        "nvidia-smi", "-q"
    )
