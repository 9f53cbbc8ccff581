"""llmbctl.verify: profiles, version comparison, and facts -> checks on real captures and synthetic faults."""

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hw"))

import hwsynth  # noqa: E402
from llmbctl.hw.facts import build_facts, read_bundle  # noqa: E402
from llmbctl.verify import (  # noqa: E402
    load_profile,
    profile_names,
    report_lines,
    summarize,
    validate_profile,
    verify,
    version_at_least,
)

REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures" / "real"
PROFILES = ["a2-910b-8", "a3-16npu", "h100-hgx8", "h100-x1", "h20-hgx8", "h200-hgx8", "h200-x2", "h200-x4",
            "h800-hgx8",
            "mi300x-8", "mi325x-8", "mi355x-8"]


def run(probes, platform, **kw):
    profile = load_profile(platform)
    facts = build_facts(probes)
    return summarize("node1", profile, verify(facts, profile, **kw), facts)


def failed(result):
    return {c["id"]: c for c in result["checks"] if not c["ok"]}


# --------------------------------------------------------------------------- profiles


def test_profile_names_are_the_shared_ones():
    assert profile_names() == PROFILES


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_is_valid(name):
    p = load_profile(name)
    assert p["name"] == name and validate_profile(p) == []


def test_profile_specifics():
    assert load_profile("h800-hgx8")["interconnect"]["matrix"]["default"] == ["NV8"]
    assert load_profile("h100-hgx8")["interconnect"]["matrix"]["default"] == ["NV18"]
    assert load_profile("h800-hgx8")["bandwidth"]["allreduce_busbw_gbps"] < load_profile("h100-hgx8")["bandwidth"][
        "allreduce_busbw_gbps"]
    x2 = load_profile("h200-x2")
    assert (x2["devices"]["count"], x2["numa"]["nodes"], x2["driver"]["min_version"]) == (2, 1, "580.159.04")
    assert load_profile("a3-16npu")["interconnect"]["matrix"]["same_card"] == ["SIO"]


def test_profile_errors_are_named():
    p = copy.deepcopy(load_profile("h100-hgx8"))
    p["vendor"] = "intel"
    p["devices"]["count"] = "8"
    del p["driver"]
    errs = validate_profile(p)
    assert "vendor must be one of nvidia, amd, ascend, found 'intel'" in errs
    assert any(e.startswith("devices.count must be int") for e in errs)
    assert "driver.min_version is missing" in errs
    q = copy.deepcopy(load_profile("h100-hgx8"))
    q["numa"]["device_nodes"] = [0, 1]
    assert validate_profile(q) == ["numa.device_nodes lists 2 devices, devices.count is 8"]
    with pytest.raises(ValueError, match="unknown platform profile 'h900'"):
        load_profile("h900")


def test_profile_overrides_deep_merge():
    p = load_profile("h800-hgx8", overrides={"rdma": {"nics": 4}})
    assert p["rdma"]["nics"] == 4 and p["rdma"]["rate_gbps"] == 400


@pytest.mark.parametrize("found, minimum, ok", [
    ("580.159.04", "580.159.04", True), ("580.159.10", "580.159.04", True), ("570.211.01", "580.159.04", False),
    ("24.1.rc2.2", "24.1.0", False), ("25.2.0", "24.1.0", True), ("24.1.rc1.b030", "24.1.rc1", True),
    ("24.1.0", "24.1.rc3", True), ("6.10.5", "6.7.0", True), ("6.7", "6.7.0", True),
    ("Linuxversion6.8.0-79-generic(buildd@lcy02)", "6.7.0", None),
])
def test_version_at_least(found, minimum, ok):
    assert version_at_least(found, minimum) is ok


# --------------------------------------------------------------------------- real captures


@pytest.mark.parametrize("host, platform, n", [("h100", "h100-x1", 1), ("h200x2", "h200-x2", 2)])
def test_real_captures_pass_their_profile(host, platform, n):
    if not (REAL / host).exists():
        pytest.skip("shared fixtures missing")
    r = run(read_bundle(str(REAL / host)), platform)
    assert r["ok"], report_lines([r])
    ids = {c["id"]: c for c in r["checks"]}
    assert ids["device.count"]["found"] == f"{n} devices"
    assert ids["driver.version"]["found"] == "580.159.04"
    assert ids["cuda.init"].get("skipped")  # captures hold no CUDA-init probe
    if n == 2:
        assert ids["interconnect.GPU0-GPU1"]["found"] == "NV18"
        assert ids["links.GPU1"]["found"] == "18 active"


def test_real_h200_pair_against_wrong_profile_fails_clearly():
    if not (REAL / "h200x2").exists():
        pytest.skip("shared fixtures missing")
    r = run(read_bundle(str(REAL / "h200x2")), "h200-hgx8")
    f = failed(r)
    assert f["device.count"]["found"] == "2 devices" and f["device.count"]["expected"] == "8 devices"
    assert f["numa.nodes"]["found"] == "1" and f["fabric_manager.service"]["found"].startswith("unknown")
    assert "driver.version" not in f and "interconnect.GPU0-GPU1" not in f
    lines = report_lines([r])
    assert lines[0].startswith("node1: device.count: expected 8 devices, found 2 devices.")


# --------------------------------------------------------------------------- no faults


@pytest.mark.parametrize("probes, platform", [
    (hwsynth.nvidia(), "h100-hgx8"),
    (hwsynth.nvidia(label="NV8", nlinks=8, model="NVIDIA H800", driver="535.129.03"), "h800-hgx8"),
    (hwsynth.nvidia(model="NVIDIA H200", mem=143771), "h200-hgx8"),
    (hwsynth.nvidia(model="NVIDIA H20", mem=97871), "h20-hgx8"),
    (hwsynth.ascend(), "a3-16npu"),
    (hwsynth.ascend(chips=1, model="910B3", cross="HCCS", version="24.1.rc3"), "a2-910b-8"),
    (hwsynth.amd(), "mi300x-8"),
    (hwsynth.amd(model="AMD Instinct MI325X", vram=262128), "mi325x-8"),
])
def test_healthy_node_passes(probes, platform):
    r = run(probes, platform)
    assert r["ok"], report_lines([r])
    assert r["counts"]["failed"] == 0 and r["counts"]["total"] > 20


def test_healthy_hgx_covers_every_pair_and_device():
    ids = [c["id"] for c in run(hwsynth.nvidia(), "h100-hgx8")["checks"]]
    assert sum(i.startswith("interconnect.GPU") for i in ids) == 28
    assert sum(i.startswith("links.GPU") for i in ids) == 8
    assert sum(i.startswith("numa.GPU") for i in ids) == 8
    assert sum(i.startswith("rdma.rail.") for i in ids) == 8
    for cid in ("fabric_manager.service", "fabric_manager.fabric_state", "cuda.init", "persistence_mode", "ecc",
                "numa_balancing", "driver.version", "device.memory", "rdma.count"):
        assert cid in ids


# --------------------------------------------------------------------------- faults


def test_missing_gpu():
    f = failed(run(hwsynth.nvidia(missing=(7,)), "h100-hgx8"))
    assert f["device.count"]["found"] == "7 devices"
    assert f["cuda.init"]["found"] == "cuInit 0, 7 devices"


def test_nvlink_down_names_pairs_and_link():
    f = failed(run(hwsynth.nvidia(link_down=[(3, 5)]), "h100-hgx8"))
    pairs = sorted(k for k in f if k.startswith("interconnect."))
    assert pairs == ["interconnect.GPU0-GPU3", "interconnect.GPU1-GPU3", "interconnect.GPU2-GPU3",
                     "interconnect.GPU3-GPU4", "interconnect.GPU3-GPU5", "interconnect.GPU3-GPU6",
                     "interconnect.GPU3-GPU7"]
    assert (f["interconnect.GPU0-GPU3"]["expected"], f["interconnect.GPU0-GPU3"]["found"]) == ("NV18", "NV17")
    assert f["links.GPU3"]["found"] == "17 active; inactive: 5"
    assert "nvidia-smi nvlink -s -i 3" in f["links.GPU3"]["hint"]


def test_degraded_link_speed():
    probes = hwsynth.nvidia(speed=20.0)
    f = failed(run(probes, "h100-hgx8"))
    assert f["links.GPU0"]["found"].startswith("18 active; slow: 0@20.0")


def test_wrong_driver():
    f = failed(run(hwsynth.nvidia(driver="535.104.05"), "h100-hgx8"))
    assert (f["driver.version"]["expected"], f["driver.version"]["found"]) == (">= 550.54.15", "535.104.05")


def test_gpu_on_wrong_numa_node():
    f = failed(run(hwsynth.nvidia(wrong_numa=(6, 0)), "h100-hgx8"))
    assert list(k for k in f if k.startswith("numa.")) == ["numa.GPU6"]
    assert (f["numa.GPU6"]["expected"], f["numa.GPU6"]["found"]) == ("NUMA node 1", "0")


def test_fabric_manager_stopped_and_cuda_802():
    f = failed(run(hwsynth.nvidia(fm="inactive", cuda_rc=802, fabric_state="In Progress"), "h100-hgx8"))
    assert f["fabric_manager.service"]["found"] == "service inactive, process not running"
    assert f["cuda.init"]["found"] == "cuInit error 802 (CUDA_ERROR_SYSTEM_NOT_READY)"
    assert "Fabric Manager" in f["cuda.init"]["hint"]
    assert f["fabric_manager.fabric_state"]["found"].startswith("GPU0: In Progress")


def test_fabric_manager_not_required_on_single_gpu_vm():
    r = run(hwsynth.nvidia(n=1, nics=0, fm="inactive", numa=(0,), numa_nodes=1, driver="580.159.04", nlinks=0),
            "h100-x1")
    assert r["ok"], report_lines([r])
    assert not any(c["id"].startswith("fabric_manager") for c in r["checks"])


def test_no_cuda_library_is_skipped_not_failed():
    r = run(hwsynth.nvidia(with_cuda=False), "h100-hgx8")
    c = next(c for c in r["checks"] if c["id"] == "cuda.init")
    assert c["ok"] and c["skipped"] and "libcuda.so.1" in c["found"]


def test_persistence_ecc_numa_balancing():
    f = failed(run(hwsynth.nvidia(persistence="Disabled", ecc="Disabled", numa_balancing=1), "h100-hgx8"))
    assert f["persistence_mode"]["found"].startswith("GPU0: Disabled")
    assert f["ecc"]["found"].startswith("GPU0: Disabled")
    assert (f["numa_balancing"]["expected"], f["numa_balancing"]["found"]) == ("kernel.numa_balancing = 0", "1")


def test_rdma_port_down():
    f = failed(run(hwsynth.nvidia(nic_down=(2,)), "h100-hgx8"))
    assert list(f) == ["rdma.port.mlx5_2"]
    assert f["rdma.port.mlx5_2"]["found"] == "Down (Disabled) at 40 Gb/s"


def test_probe_failure_is_its_own_check():
    probes = hwsynth.nvidia()
    topo = next(p for p in probes if p["name"] == "topo")
    topo.update(rc=9, stdout="", stderr="Failed to initialize NVML: Driver/library version mismatch")
    f = failed(run(probes, "h100-hgx8"))
    assert "Driver/library version mismatch" in f["probe.topo"]["found"]
    assert f["interconnect.matrix"]["found"].startswith("not collected")


def test_damaged_output_is_reported_with_the_parse_error():
    probes = hwsynth.nvidia()
    nvl = next(p for p in probes if p["name"] == "nvlink-s")
    nvl["stdout"] = nvl["stdout"].replace("Link 4: 26.562 GB/s", "Link 4: ???", 1)
    f = failed(run(probes, "h100-hgx8"))
    assert "link state '???' not understood" in f["probe.nvlink-s"]["found"]


def test_ascend_faults():
    f = failed(run(hwsynth.ascend(link_down=(5,), no_ip=(3,), hccs_down=[(2, 9)], health={4: "Warning"}), "a3-16npu"))
    assert (f["hccn.link.NPU5"]["expected"], f["hccn.link.NPU5"]["found"]) == ("link UP", "DOWN")
    assert f["hccn.ip.NPU3"]["found"].startswith("-ip: exit status 255")
    assert (f["interconnect.NPU2-NPU9"]["expected"], f["interconnect.NPU2-NPU9"]["found"]) == ("HCCS or HCCS_SW", "PIX")
    assert f["device.health"]["found"] == "NPU4: Warning"
    assert len(f) == 4


def test_ascend_same_card_pairs_expect_sio():
    probes = hwsynth.ascend(cross="SIO")
    f = failed(run(probes, "a3-16npu"))
    assert "interconnect.NPU0-NPU1" not in f and f["interconnect.NPU0-NPU2"]["found"] == "SIO"


def test_ascend_missing_npu():
    f = failed(run(hwsynth.ascend(missing=(15,)), "a3-16npu"))
    assert f["device.count"]["found"] == "15 devices"


def test_amd_xgmi_down():
    f = failed(run(hwsynth.amd(xgmi_down=[(1, 2)]), "mi300x-8"))
    assert (f["interconnect.GPU1-GPU2"]["expected"], f["interconnect.GPU1-GPU2"]["found"]) == ("XGMI", "PCIE")
    assert f["links.GPU1"]["found"] == "6 active" and f["links.GPU2"]["found"] == "6 active"


def test_amd_numa_and_driver():
    f = failed(run(hwsynth.amd(numa=(0, 0, 0, 0, 1, 1, 1, 0), driver="6.3.6"), "mi300x-8"))
    assert f["numa.GPU7"]["found"] == "0" and f["driver.version"]["found"] == "6.3.6"


def test_waivers():
    r = run(hwsynth.nvidia(nic_down=(2,), numa_balancing=1), "h100-hgx8", waive=["rdma.*"])
    assert not r["ok"] and r["failed"] == ["numa_balancing"]
    waived = [c for c in r["checks"] if c.get("waived")]
    assert [c["id"] for c in waived] == ["rdma.port.mlx5_2"]


def test_report_lines_for_two_hosts():
    a = run(hwsynth.nvidia(link_down=[(0, 1)]), "h100-hgx8")
    a["host"] = "gpu-a"
    b = run(hwsynth.nvidia(driver="535.1.1"), "h100-hgx8")
    b["host"] = "gpu-b"
    lines = report_lines([a, b])
    assert any(ln.startswith("gpu-a: links.GPU0: expected 18 active links at 26.562 GB/s, found 17 active") for ln in lines)
    assert any(ln.startswith("gpu-b: driver.version: expected >= 550.54.15, found 535.1.1.") for ln in lines)


# --------------------------------------------------------------------------- bundles from real runs

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


@pytest.mark.parametrize("platform, n", [("h100-x1", 1), ("h200-x2", 2)])
def test_bundles_probed_on_real_machines_pass(platform, n):
    """docs/examples/verify-real-*/bundle: raw outputs accel_probe collected on the lent H100 / 2x H200."""
    bundle = EXAMPLES / f"verify-real-{platform}" / "bundle"
    r = run(read_bundle(str(bundle)), platform)
    assert r["ok"], report_lines([r])
    ids = {c["id"]: c for c in r["checks"]}
    assert ids["cuda.init"]["found"] == f"cuInit 0, {n} devices"
    assert ids["device.count"]["found"] == f"{n} devices"
    if n == 2:
        assert ids["interconnect.GPU0-GPU1"]["found"] == "NV18"


def test_real_h200_bundle_with_h800_expectations_says_wrong_profile():
    bundle = EXAMPLES / "verify-real-h200-x2" / "bundle"
    profile = load_profile("h200-x2", overrides={"interconnect": {"matrix": {"default": ["NV8"]}, "links_per_device": 8}})
    checks = verify(build_facts(read_bundle(str(bundle))), profile)
    f = {c["id"]: c for c in checks if not c["ok"]}
    assert sorted(f) == ["interconnect.GPU0-GPU1", "links.GPU0", "links.GPU1"]
    assert "more NVLinks (NV18) than the profile expects (NV8)" in f["interconnect.GPU0-GPU1"]["hint"]
