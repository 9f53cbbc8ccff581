"""Host parsers: numactl, lscpu (text / JSON), ibstat, ibv_devinfo, sysfs PCI, os-release, probes."""

import pytest
from conftest import assert_refused, fixture_text
from llmb.hw import ParseError, parse
from llmb.hw._text import format_cpulist, parse_cpulist


def test_cpulist_roundtrip():
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    with pytest.raises(ParseError):
        parse_cpulist("3-1")


def test_numactl_two_nodes():
    r = parse(fixture_text("public/numactl/2node-48cpu-unbalanced-free-zh-notes.txt"))
    assert [n["node"] for n in r["nodes"]] == [0, 1]
    assert r["nodes"][0]["cpus"] == list(range(24)) and r["nodes"][1]["cpus"] == list(range(24, 48))
    assert (r["nodes"][1]["size_mb"], r["nodes"][1]["free_mb"]) == (580512, 191915)
    assert r["distances"] == [[10, 32], [32, 10]]


def test_numactl_offline_cpu_missing():
    r = parse(fixture_text("public/numactl/epyc-2s-256cpu-oci-mi355x-cpu239-missing.txt"))
    assert len(r["nodes"][0]["cpus"]) == 128 and len(r["nodes"][1]["cpus"]) == 127
    assert 239 not in r["nodes"][1]["cpus"] and 240 in r["nodes"][1]["cpus"]
    assert r["nodes"][0]["size_mb"] == 1547872


@pytest.mark.parametrize("rel, cpus, size", [("real/h100/numactl.txt", 16, 4443), ("real/h200x2/numactl.txt", 32, 4699)])
def test_numactl_real_single_node(rel, cpus, size):
    r = parse(fixture_text(rel))
    assert r["available"] == 1 and r["distances"] == [[10]]
    assert r["nodes"] == [{"node": 0, "cpus": list(range(cpus)), "size_mb": size, "free_mb": r["nodes"][0]["free_mb"]}]


def test_numactl_damaged():
    text = fixture_text("public/numactl/2node-48cpu-unbalanced-free-zh-notes.txt")
    with pytest.raises(ParseError, match="distance matrix has 1 rows, expected 2"):
        parse(text.rsplit("\n", 2)[0] + "\n")
    with pytest.raises(ParseError, match="node 1: no 'cpus:' line"):
        parse("available: 2 nodes (0-1)\nnode 0 cpus: 0 1\nnode distances:\nnode 0 1\n0: 10 20\n1: 20 10\n", "numactl")
    assert parse("No NUMA available on this system\n", "numactl")["nodes"] == []


def test_lscpu_kunpeng_bios_model_name():
    r = parse(fixture_text("public/lscpu/kunpeng920-4socket-8numa-a3-vllm-ascend-3002.txt"))
    assert (r["architecture"], r["cpus"], r["sockets"], r["cores_per_socket"]) == ("aarch64", 384, 4, 48)
    assert r["model_name"].startswith("Kunpeng 920 5250Y")
    assert [n["node"] for n in r["numa_nodes"]] == list(range(8))
    assert r["numa_nodes"][7]["cpus"] == list(range(336, 384))


def test_lscpu_kvm_vm():
    r = parse(fixture_text("public/lscpu/xeon8480-kvm-vm-208vcpu-h100-dstack.txt"))
    assert (r["cpus"], r["hypervisor_vendor"], r["model_name"]) == (208, "KVM", "Intel(R) Xeon(R) Platinum 8480+")
    assert [n["cpus"] for n in r["numa_nodes"]] == [list(range(104)), list(range(104, 208))]


def test_lscpu_text_and_json_agree_real_h100():
    text = parse(fixture_text("real/h100/lscpu.txt"))
    js = parse(fixture_text("real/h100/lscpu-json.txt"))
    assert js["kind"] == "lscpu"
    for key in ("architecture", "cpus", "online_cpus", "model_name", "sockets", "numa_nodes", "hypervisor_vendor"):
        assert text[key] == js[key], key
    assert text["cpus"] == 16 and text["numa_nodes"] == [{"node": 0, "cpus": list(range(16))}]


def test_lscpu_damaged():
    assert_refused("lscpu", {"Architecture: x86_64\nCPU(s): 4\nNUMA node(s): 2\nNUMA node0 CPU(s): 0-3\n":
                             "NUMA node\\(s\\): 2"})
    assert_refused("lscpu-json", {'{"lscpu": [': "expected JSON"})


def test_ibstat_cx7_ib_and_cx6_eth():
    r = parse(fixture_text("public/ibstat/h100-node-cx7-ib400-plus-cx6dx-eth-some-down-gpud.txt"))
    assert [c["name"] for c in r["cas"]][:4] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"]
    assert len(r["cas"]) == 12
    ib = [c for c in r["cas"] if c["ports"][0]["link_layer"] == "InfiniBand"]
    assert len(ib) == 8 and all(c["ports"][0]["state"] == "Active" and c["ports"][0]["rate_gbps"] == 400 for c in ib)
    down = {c["name"]: c["ports"][0] for c in r["cas"] if c["ports"][0]["state"] == "Down"}
    assert sorted(down) == ["mlx5_2", "mlx5_7", "mlx5_8"]
    assert down["mlx5_2"]["physical_state"] == "Disabled" and down["mlx5_2"]["rate_gbps"] == 40
    assert r["cas"][0]["ca_type"] == "MT4129" and r["cas"][0]["firmware_version"] == "28.39.1002"


def test_ibstat_damaged():
    with pytest.raises(ParseError, match="1 ports declared, 0 listed"):
        parse("CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n", "ibstat")


def test_ibv_devinfo_azure_vfs():
    r = parse(fixture_text("public/ibv_devinfo/azure-ndv5-h200-8x-ib-vf-plus-an0.txt"))
    names = [h["name"] for h in r["hcas"]]
    assert names == [f"mlx5_ib{i}" for i in range(8)] + ["mlx5_an0"]
    assert all(h["ports"][0]["state"] == "PORT_ACTIVE" for h in r["hcas"])
    assert r["hcas"][0]["vendor_part_id"] == "4126" and r["hcas"][0]["ports"][0]["link_layer"] == "InfiniBand"
    an0 = r["hcas"][-1]
    assert an0["ports"][0]["link_layer"] == "Ethernet" and an0["ports"][0]["active_mtu"] == "1024 (3)"


def test_pci_devices_real():
    h100 = parse(fixture_text("real/h100/nodes.txt"))
    assert h100["devices"] == [{"address": "0000:00:06.0", "class": "0x030200", "vendor": "0x10de",
                                "device": "0x2330", "numa_node": None, "cpus": None}]
    assert h100["sysfs_nodes"] == ["node0"]
    h200 = parse(fixture_text("real/h200x2/nodes.txt"))
    assert [d["address"] for d in h200["devices"]] == ["0000:00:06.0", "0000:00:07.0"]
    assert h200["devices"][1]["cpus"] == list(range(32)) and h200["devices"][1]["device"] == "0x2335"


def test_os_release_real():
    r = parse(fixture_text("real/h100/osrel.txt"))
    assert (r["id"], r["version_id"], r["pretty_name"]) == ("ubuntu", "24.04", "Ubuntu 24.04.3 LTS")


def test_torch_probes_real():
    info = parse(fixture_text("real/h100/torch.txt"))
    assert info == {"kind": "torch-info", "torch": "2.11.0+cu130", "cuda": "13.0", "device_count": 1,
                    "device_name": "NVIDIA H100 80GB HBM3", "capability": [9, 0]}
    assert parse(fixture_text("real/h200x2/p2p.txt"))["matrix"] == [[None, True], [True, None]]
    bw = parse(fixture_text("real/h200x2/bw.txt"))
    assert bw["copies"] == [{"src": 0, "dst": 1, "gbps": pytest.approx(394.8189, rel=1e-4)}]


def test_small_probes():
    assert parse("0\n", "numa-balancing")["value"] == 0
    with pytest.raises(ParseError, match="expected one integer"):
        parse("cat: /proc/sys/kernel/numa_balancing: No such file\n", "numa-balancing")
    assert parse("inactive\n", "systemctl-is-active")["state"] == "inactive"
    with pytest.raises(ParseError, match="expected one of"):
        parse("System has not been booted with systemd\n", "systemctl-is-active")
    cuda = parse('{"library": "libcuda.so.1", "present": true, "init_rc": 802, "error_name": "CUDA_ERROR_SYSTEM_NOT_READY"}')
    assert cuda["kind"] == "cuda-probe" and cuda["init_rc"] == 802
    assert parse("1234 /usr/bin/nv-fabricmanager -c x\n", "process-list")["processes"][0]["pid"] == 1234


def test_nccl_tests_output():
    text = (
        "# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
        "  1073741824     268435456     float     sum      -1   4893.2  219.43  384.00      0   4880.1  220.02  385.04      0\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 384.52 \n"
    )
    r = parse(text)
    assert r["kind"] == "nccl-tests" and r["avg_busbw_gbps"] == 384.52 and r["peak_busbw_gbps"] == 385.04
    assert r["out_of_bounds"] == 0 and r["rows"][0]["size_bytes"] == 1073741824
