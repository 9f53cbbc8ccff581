"""NVIDIA parsers on real captures (values asserted), then synthetic damage."""

import itertools

import pytest
from conftest import assert_refused, fixture_text
from llmb.hw import ParseError, parse
from llmb.hw._text import parse_cpulist

TOPO = "public/nvidia-smi-topo/"


def _pairs(links, n, label):
    return all(links[f"GPU{a}"][f"GPU{b}"] == label for a, b in itertools.permutations(range(n), 2))


# --------------------------------------------------------------------------- topo -m


def test_topo_a100_roce_nic():
    r = parse(fixture_text(TOPO + "a100-80gb-4gpu-nv12-roce-nic-rocep49s0.txt"))
    assert [g["index"] for g in r["gpus"]] == [0, 1, 2, 3]
    assert _pairs(r["links"], 4, "NV12")
    assert r["nics"] == [{"index": 0, "name": "rocep49s0"}]
    assert all(r["links"][f"GPU{i}"]["NIC0"] == "SYS" for i in range(4))
    assert all(g["numa_affinity"] == [1] and g["gpu_numa_id"] is None for g in r["gpus"])
    assert r["gpus"][0]["cpu_affinity"] == parse_cpulist("32-63,96-127")
    assert r["warnings"] == []


def test_topo_h100_vm_header_without_leading_tab():
    r = parse(fixture_text(TOPO + "h100-8gpu-vm-single-nic-sys-dstack.txt"))
    assert len(r["gpus"]) == 8
    assert _pairs(r["links"], 8, "NV18")
    assert r["nics"] == [{"index": 0, "name": "mlx5_0"}]
    assert r["links"]["NIC0"]["GPU5"] == "SYS"
    assert [g["numa_affinity"] for g in r["gpus"]] == [[0]] * 4 + [[1]] * 4
    assert r["gpus"][0]["cpu_affinity"] == list(range(0, 104))
    assert r["gpus"][7]["cpu_affinity"] == list(range(104, 208))


def test_topo_tabs_expanded_to_spaces():
    r = parse(fixture_text(TOPO + "h100pcie-2gpu-nv12-bridge-numa1-spaces.txt"))
    assert r["links"] == {"GPU0": {"GPU1": "NV12"}, "GPU1": {"GPU0": "NV12"}}
    assert r["nics"] == []
    assert [g["numa_affinity"] for g in r["gpus"]] == [[1], [1]]
    assert r["gpus"][1]["cpu_affinity"] == parse_cpulist("32-63,96-127")


def test_topo_h800_clipped_narrow_terminal():
    r = parse(fixture_text(TOPO + "h800-8gpu-nv8-4nic-clipped-narrow-terminal.txt"))
    assert _pairs(r["links"], 8, "NV8")
    assert [n["name"] for n in r["nics"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    # NIC columns were clipped from the GPU rows; the NIC rows give the same cells.
    assert r["links"]["NIC0"]["GPU1"] == "PIX" and r["links"]["GPU1"]["NIC0"] == "PIX"
    assert r["links"]["GPU3"]["NIC1"] == "PIX"
    assert r["links"]["GPU7"]["NIC2"] == "PIX" and r["links"]["GPU7"]["NIC3"] == "PIX"
    assert r["links"]["GPU0"]["NIC2"] == "SYS"
    assert [g["numa_affinity"] for g in r["gpus"]] == [[0]] * 4 + [[1]] * 4
    # '-31,64-95' cannot be recovered: unknown, with a warning naming the GPU.
    assert all(r["gpus"][i]["cpu_affinity"] is None for i in range(4))
    assert any("GPU0: CPU Affinity '-31,64-95' is clipped" in w for w in r["warnings"])
    # '2-63,96-127' is a suffix of GPU4's '32-63,96-127' on the same node: recovered.
    assert r["gpus"][7]["cpu_affinity"] == parse_cpulist("32-63,96-127")
    assert any(w.startswith("GPU7:") and "looks clipped" in w for w in r["warnings"])
    assert r["gpus"][4]["gpu_numa_id"] is None


def test_topo_pcie_only_node_sys():
    r = parse(fixture_text(TOPO + "pcie-8gpu-node-sys-no-nvlink-no-nic-lmdeploy.txt"))
    links = r["links"]
    assert links["GPU0"]["GPU3"] == "NODE" and links["GPU0"]["GPU4"] == "SYS" and links["GPU5"]["GPU7"] == "NODE"
    assert not any(v.startswith("NV") for row in links.values() for v in row.values())
    assert r["nics"] == []
    assert r["gpus"][4]["cpu_affinity"] == parse_cpulist("64-127,192-255")


def test_topo_no_legend_nic_names_unknown():
    r = parse(fixture_text(TOPO + "rtx4090-8gpu-allsys-go-gpuallocator-17.txt"))
    assert r["nics"] == [{"index": 0, "name": None}, {"index": 1, "name": None}]
    assert r["links"]["GPU6"]["NIC0"] == "PHB" and r["links"]["NIC0"]["NIC1"] == "PIX"
    assert _pairs(r["links"], 8, "SYS")
    assert "NIC Legend missing" in r["warnings"][0]


def test_topo_real_h100_single_gpu_ansi_header():
    r = parse(fixture_text("real/h100/topo.txt"))
    assert r["gpus"] == [{"index": 0, "cpu_affinity": list(range(16)), "numa_affinity": [0], "gpu_numa_id": None}]
    assert r["links"] == {"GPU0": {}}
    assert r["nics"] == []


def test_topo_real_h200_pair_nv18():
    r = parse(fixture_text("real/h200x2/topo.txt"))
    assert r["links"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert [g["cpu_affinity"] for g in r["gpus"]] == [list(range(32))] * 2
    assert [g["numa_affinity"] for g in r["gpus"]] == [[0], [0]]


def test_topo_p2p_real_h200():
    r = parse(fixture_text("real/h200x2/topo-p2p.txt"))
    assert r["gpus"] == [0, 1]
    assert r["status"] == {"GPU0": {"GPU1": "OK"}, "GPU1": {"GPU0": "OK"}}


GOOD_TOPO = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty output"),
        ("Legend:\n\n  X    = Self\n", "unexpected column name"),
        (GOOD_TOPO.replace("GPU1\tNV18\t X \t0-31\t0\t\tN/A\n", ""), "column GPU1 has no row"),
        (GOOD_TOPO.replace("GPU1\tNV18\t X", "GPU1\tNV18"), "row GPU1 has"),
        (GOOD_TOPO.replace("\tNV18\t0-31", "\tNVxx\t0-31"), "unknown label 'NVxx'"),
        (GOOD_TOPO.replace("GPU0\t X \tNV18", "GPU0\tNV18\tNV18"), "diagonal cell"),
        (GOOD_TOPO.replace("\t0-31\t0\t\tN/A\nGPU1", "\t0-31\t0\t\tN/A\textra\tmore\nGPU1"), "values after the matrix"),
        (GOOD_TOPO.replace("0-31\t0\t\tN/A\nGPU1", "0-x1\t0\t\tN/A\nGPU1"), "bad CPU list"),
    ],
)
def test_topo_damaged(text, message):
    with pytest.raises(ParseError, match=message) as exc:
        parse(text, "nvidia-smi-topo")
    assert str(exc.value).startswith("nvidia-smi-topo:")


def test_topo_good_synthetic_and_old_soc_label():
    r = parse(GOOD_TOPO.replace("NV18", "SOC"), "nvidia-smi-topo")
    assert r["links"]["GPU0"]["GPU1"] == "SOC"


# --------------------------------------------------------------------------- nvlink


def test_nvlink_a100_twelve_links():
    r = parse(fixture_text("public/nvlink/a100-80gb-4gpu-nvlink-s-all-12x25.txt"))
    assert [g["index"] for g in r["gpus"]] == [0, 1, 2, 3]
    assert all(len(g["links"]) == 12 for g in r["gpus"])
    assert all(lk == {"link": lk["link"], "speed_gbps": 25.0, "active": True} for g in r["gpus"] for lk in g["links"])
    assert r["gpus"][0]["uuid"] == "GPU-e04968e9-3302-841c-b00f-f388d7a8f56f"


def test_nvlink_h800_elided():
    r = parse(fixture_text("public/nvlink/h800-8gpu-nvlink-status-8links-elided.txt"))
    assert [g["index"] for g in r["gpus"]] == [0, 1, 7]
    assert all(len(g["links"]) == 8 and all(lk["speed_gbps"] == 26.562 for lk in g["links"]) for g in r["gpus"])
    assert r["gpus"][0]["name"] == "NVIDIA H800"
    assert "elided" in r["warnings"][0]


@pytest.mark.parametrize("rel", ["real/h100/nvlink-s.txt", "real/h100/nvlink-status.txt"])
def test_nvlink_real_h100_has_no_links(rel):
    assert parse(fixture_text(rel))["gpus"] == []


def test_nvlink_real_h200_eighteen_links():
    r = parse(fixture_text("real/h200x2/nvlink-s.txt"))
    assert [g["uuid"] for g in r["gpus"]] == [
        "GPU-6de2358b-ee4d-f3a9-e601-7bac2d4808df", "GPU-8ab29f12-bf49-4a67-5ae1-48648d97f094"]
    assert [len(g["links"]) for g in r["gpus"]] == [18, 18]
    assert {lk["speed_gbps"] for g in r["gpus"] for lk in g["links"]} == {26.562}


def test_nvlink_inactive_links():
    text = "GPU 0: NVIDIA H800 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n\t Link 2: Inactive\n"
    links = parse(text, "nvidia-smi-nvlink")["gpus"][0]["links"]
    assert [lk["active"] for lk in links] == [True, False, False]
    assert links[1]["speed_gbps"] is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("GPU 0: NVIDIA H800 (UUID: GPU-1)\n\t Link 0: fast\n", "link state 'fast'"),
        ("\t Link 0: 26.562 GB/s\n", "unexpected line"),
        ("NVML: Driver/library version mismatch\n", "unexpected line"),
    ],
)
def test_nvlink_damaged(text, message):
    with pytest.raises(ParseError, match=message):
        parse(text, "nvidia-smi-nvlink")


def test_nvlink_caps_real_h200():
    r = parse(fixture_text("real/h200x2/nvlink-c.txt"))
    assert [len(g["links"]) for g in r["gpus"]] == [18, 18]
    caps = r["gpus"][1]["links"][17]["caps"]
    assert caps["p2p_is_supported"] is True and caps["link_is_supported"] is True and len(caps) == 6


# --------------------------------------------------------------------------- --query-gpu


def test_query_a100():
    r = parse(fixture_text("public/nvidia-smi-query/a100-80gb-4gpu-query-csv-580.txt"))
    assert [g["index"] for g in r["gpus"]] == [0, 1, 2, 3]
    assert {g["memory_total_mib"] for g in r["gpus"]} == {81920}
    assert r["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB" and r["gpus"][0]["driver_version"] == "580.105.08"
    assert r["gpus"][0]["compute_cap"] == "8.0"


def test_query_h200_power_units():
    r = parse(fixture_text("public/nvidia-smi-query/h200-8gpu-query-csv-power-pstate-570.txt"))
    assert len(r["gpus"]) == 8
    assert r["gpus"][7] == {"index": 7, "name": "NVIDIA H200", "memory_total_mib": 143771,
                            "driver_version": "570.211.01", "power_limit_w": 700, "pstate": "P0"}


def test_query_l4_no_index_column():
    r = parse(fixture_text("public/nvidia-smi-query/l4-1gpu-query-csv-power-temp-epyc.txt"))
    assert r["fields"] == ["name", "driver_version", "memory_total_mib", "power_limit_w", "temperature_gpu"]
    assert r["gpus"] == [{"name": "NVIDIA L4", "driver_version": "550.90.07", "memory_total_mib": 24564,
                          "power_limit_w": 72, "temperature_gpu": "33"}]


@pytest.mark.parametrize("rel, count, name, mem", [
    ("real/h100/query.txt", 1, "NVIDIA H100 80GB HBM3", 81559),
    ("real/h200x2/query.txt", 2, "NVIDIA H200", 143771),
])
def test_query_real(rel, count, name, mem):
    r = parse(fixture_text(rel))
    assert len(r["gpus"]) == count
    for i, g in enumerate(r["gpus"]):
        assert (g["index"], g["name"], g["memory_total_mib"], g["driver_version"]) == (i, name, mem, "580.159.04")
        assert (g["persistence_mode"], g["ecc_mode_current"], g["compute_cap"]) == ("Enabled", "Enabled", "9.0")
    assert r["gpus"][-1]["pci_bus_id"] == f"00000000:00:0{5 + count}.0"


def test_query_damaged():
    assert_refused("nvidia-smi-query", {
        "index, name, memory.total [MiB]\n0, NVIDIA H100\n": "row has 2 values, header names 3",
        "Failed to initialize NVML: Unknown Error\n": "not a --query-gpu CSV header",
    })


# --------------------------------------------------------------------------- default table


def test_table_h100pcie():
    r = parse(fixture_text("public/nvidia-smi/h100pcie-2gpu-nvlink-bridge-table-555.txt"))
    assert (r["driver_version"], r["cuda_version"]) == ("555.42.02", "12.5")
    assert [(g["name"], g["persistence_mode"], g["memory_total_mib"]) for g in r["gpus"]] == [
        ("NVIDIA H100 PCIe", "Disabled", 81559)] * 2
    assert [g["bus_id"] for g in r["gpus"]] == ["00000000:C2:00.0", "00000000:D5:00.0"]


def test_table_h200_azure_nonzero_domains():
    r = parse(fixture_text("public/nvidia-smi/h200-8gpu-azure-ndv5-table-565.txt"))
    assert len(r["gpus"]) == 8
    assert r["gpus"][0]["bus_id"] == "00000001:00:00.0" and r["gpus"][7]["bus_id"] == "0000000C:00:00.0"
    assert {g["power_cap_w"] for g in r["gpus"]} == {700}
    assert r["gpus"][0]["persistence_mode"] == "Disabled"
    assert r["processes"] == []


@pytest.mark.parametrize("rel, n, mem", [("real/h100/smi.txt", 1, 81559), ("real/h200x2/smi.txt", 2, 143771)])
def test_table_real(rel, n, mem):
    r = parse(fixture_text(rel))
    assert r["driver_version"] == "580.159.04" and r["cuda_version"] == "13.0"
    assert [(g["persistence_mode"], g["memory_total_mib"], g["ecc_uncorrected"]) for g in r["gpus"]] == [
        ("Enabled", mem, 0)] * n


def test_table_damaged():
    text = fixture_text("real/h200x2/smi.txt")
    lines = text.splitlines()
    cut = [ln for ln in lines if "121W /  700W" not in ln]
    with pytest.raises(ParseError, match="GPU 0: second row missing or damaged"):
        parse("\n".join(cut))
    with pytest.raises(ParseError, match="couldn't communicate"):
        parse("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "nvidia-smi")
    assert parse("No devices were found\n", "nvidia-smi")["gpus"] == []


# --------------------------------------------------------------------------- -q / -q -x


def test_q_h200_excerpt():
    r = parse(fixture_text("public/nvidia-smi-q/h200-1gpu-q-550-header-excerpt.txt"))
    assert (r["driver_version"], r["cuda_version"], r["attached_gpus"]) == ("550.90.12", "12.4", 1)
    g = r["gpus"][0]
    assert (g["bus_id"], g["product_name"], g["persistence_mode"]) == ("00000000:03:00.0", "NVIDIA H200", "Enabled")
    assert g["memory_total_mib"] is None and g["fabric_state"] is None  # cut before those sections


def test_q_h800_single_gpu_of_eight():
    r = parse(fixture_text("public/nvidia-smi-q/h800-q-i0-525-full-single-gpu.txt"))
    assert r["attached_gpus"] == 8 and len(r["gpus"]) == 1
    g = r["gpus"][0]
    assert (g["product_name"], g["memory_total_mib"], g["ecc_mode_current"]) == ("NVIDIA H800", 81559, "Disabled")
    assert (g["fabric_state"], g["fabric_status"], g["power_limit_w"], g["module_id"]) == ("Completed", "Success", 700.0, 5)
    assert g["pcie_gen_current"] == 5 and g["pcie_width_current"] == 16


@pytest.mark.parametrize("host, n", [("h100", 1), ("h200x2", 2)])
def test_q_text_and_xml_agree_on_real_machines(host, n):
    text = parse(fixture_text(f"real/{host}/smi-q.txt"))
    xml = parse(fixture_text(f"real/{host}/smi-qx.txt"))
    assert len(xml["gpus"]) == n and xml["attached_gpus"] == n
    for key in ("driver_version", "cuda_version", "attached_gpus"):
        assert text[key] == xml[key]
    for a, b in zip(text["gpus"], xml["gpus"], strict=True):
        for key in ("bus_id", "product_name", "uuid", "persistence_mode", "ecc_mode_current", "memory_total_mib",
                    "fabric_state", "fabric_status", "remapped_rows_pending"):
            assert a[key] == b[key], key


def test_xml_values():
    h100 = parse(fixture_text("real/h100/smi-qx.txt"))["gpus"][0]
    assert (h100["product_name"], h100["memory_total_mib"], h100["fabric_state"]) == ("NVIDIA H100 80GB HBM3", 81559, None)
    assert h100["virtualization_mode"] == "Pass-Through" and h100["power_limit_w"] == 700.0
    h200 = parse(fixture_text("real/h200x2/smi-qx.txt"))["gpus"]
    assert [(g["fabric_state"], g["fabric_status"], g["memory_total_mib"]) for g in h200] == [
        ("Completed", "Success", 143771)] * 2
    assert [g["minor_number"] for g in h200] == [0, 1]


def test_xml_truncated():
    text = fixture_text("real/h100/smi-qx.txt")
    with pytest.raises(ParseError, match="XML is not well-formed"):
        parse(text[: len(text) // 2])
    with pytest.raises(ParseError, match="expected <nvidia_smi_log>"):
        parse("<other/>", "nvidia-smi-q-xml")


def test_proc_version_real_h100():
    r = parse(fixture_text("real/h100/procdrv.txt"))
    assert (r["driver_version"], r["kernel_module"]) == ("580.159.04", "open")
    assert "/dev/nvidia0" in r["dev_nodes"]
    old = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  525.105.17  Tue Mar 28 18:02:59 UTC 2023\n"
    assert parse(old)["kernel_module"] == "proprietary"
    with pytest.raises(ParseError, match="NVRM version"):
        parse("cat: /proc/driver/nvidia/version: No such file or directory", "nvidia-proc-version")
