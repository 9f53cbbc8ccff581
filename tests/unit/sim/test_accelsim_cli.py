"""`accelsim` control command: profile, fault add/clear/list, and its error handling."""

from __future__ import annotations

import json

import pytest
from sim.accelsim import faults, profiles


def test_profile_and_profiles(node):
    node.use("h800-hgx8")
    assert node.accelsim("profile") == (0, "h800-hgx8\n", "")
    rc, out, _ = node.accelsim("profiles")
    assert rc == 0
    assert [line.split("\t")[0] for line in out.splitlines()] == profiles.list_profiles()
    assert {
        "h100-hgx8",
        "h800-hgx8",
        "h200-hgx8",
        "h20-hgx8",
        "a3-16npu",
        "a2-910b-8",
        "mi300x-8",
        "mi325x-8",
        "h100-x1",
        "h200-x2",
    } <= set(profiles.list_profiles())


def test_fault_add_list_clear(node):
    node.use("h100-hgx8")
    node.fault("link_down", "gpu=1", "link=2")
    node.fault("link_down", "gpu=1", "link=3")
    node.fault("numa_wrong", "gpu=4")
    node.fault("numa_wrong", "gpu=4", "numa=0")  # same instance: replaces
    assert (
        node.accelsim("fault", "list")[1]
        == "link_down gpu=1 link=2\nlink_down gpu=1 link=3\nnuma_wrong gpu=4 numa=0\n"
    )
    listed = json.loads(node.accelsim("fault", "list", "--json")[1])
    assert listed == json.loads((node.root / "etc/accelsim/faults.json").read_text())
    assert node.accelsim("fault", "clear", "link_down", "gpu=1", "link=3")[1] == "cleared 1 fault\n"
    assert node.accelsim("fault", "clear", "link_down")[1] == "cleared 1 fault\n"
    assert node.accelsim("fault", "clear")[1] == "cleared 1 fault\n"
    assert node.accelsim("fault", "list")[1] == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fault", "add", "melted"], "unknown fault kind 'melted'"),
        (["fault", "add", "link_down", "gpu=1"], "missing link="),
        (["fault", "add", "link_down", "gpu=1", "lane=2"], "unknown key 'lane'"),
        (["fault", "add", "link_down", "gpu=one", "link=2"], "gpu must be an integer"),
        (["fault", "add", "link_down", "gpu=-1", "link=2"], "gpu must be >= 0"),
        (["fault", "add", "link_down", "gpu=8", "link=2"], "gpu=8 but profile h100-hgx8 has devices 0-7"),
        (["fault", "add", "link_down", "gpu=1", "link=18"], "has links 0-17"),
        (["fault", "add", "link_down", "gpu", "link=1"], "expected key=value"),
        (["fault", "add", "numa_wrong", "gpu=1", "numa=2"], "has NUMA nodes 0-1"),
        (["fault", "add", "hccn_down", "device=0"], "does not apply to nvidia profile"),
        (["fault", "add", "driver_version", "version="], "version must not be empty"),
        (["fault", "clear", "melted"], "unknown fault kind 'melted'"),
        (["fault", "frob"], "unknown fault command"),
        (["nonsense"], "unknown command"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(node, argv, message):
    node.use("h100-hgx8")
    rc, _, err = node.accelsim(*argv)
    assert rc == 2
    assert message in err
    assert node.accelsim("fault", "list")[1] == ""


def test_h100_x1_has_no_nvlink_to_break_and_one_numa_node(node):
    node.use("h100-x1")
    rc, _, err = node.accelsim("fault", "add", "link_down", "gpu=0", "link=0")
    assert rc == 2 and "has no links" in err
    rc, _, err = node.accelsim("fault", "add", "numa_wrong", "gpu=0")
    assert rc == 2 and "single NUMA node" in err


def test_fault_kinds_are_documented(node):
    rc, out, _ = node.accelsim("fault", "kinds")
    assert rc == 0
    for kind in faults.KINDS:
        assert out.count(kind + " ") + out.count(kind + "\n") >= 1


def test_broken_faults_file_is_reported_and_clearable(node):
    node.use("h100-hgx8")
    path = node.root / "etc/accelsim/faults.json"
    path.write_text('[{"kind": "link_down", "gpu": 99, "link": 0}]')
    rc, _, err = node.run("nvidia-smi", "-L")
    assert rc == 2 and "faults.json" in err and "gpu=99" in err
    path.write_text("{not json")
    rc, _, err = node.run("nvidia-smi", "-L")
    assert rc == 2 and "not valid JSON" in err
    assert node.accelsim("fault", "clear")[0] == 0
    assert node.run("nvidia-smi", "-L")[0] == 0


def test_tools_without_an_installed_profile(node):
    rc, _, err = node.run("nvidia-smi")
    assert rc == 2 and "install-accelsim.sh" in err
    (node.root / "etc/accelsim").mkdir(parents=True)
    (node.root / "etc/accelsim/profile").write_text("h900-hgx16\n")
    rc, _, err = node.run("nvidia-smi")
    assert rc == 2 and "unknown profile 'h900-hgx16'" in err


def test_every_profile_loads_and_has_consistent_devices():
    for name in profiles.list_profiles():
        p = profiles.load(name)
        assert p["description"]
        assert profiles.device_count(p) >= 1
        numa = len(p["numa_nodes"])
        devices = p["gpus"] if p["vendor"] != "ascend" else p["cards"]
        assert all(0 <= d["numa"] < numa for d in devices), name
