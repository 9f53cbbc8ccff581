"""AMD parsers: rocm-smi (concise, --showtopo), amd-smi (table, version, partition, --json)."""

import itertools

import pytest
from conftest import data_text, fixture_text
from llmb.hw import ParseError, detect_kind, parse

SHOWTOPO = "public/rocm-smi/mi300x-8gpu-showtopo-trailing-spaces-dstack.txt"


def test_rocm_showtopo_mi300x():
    r = parse(fixture_text(SHOWTOPO))
    assert [g["index"] for g in r["gpus"]] == list(range(8))
    assert all(r["links"][f"GPU{a}"][f"GPU{b}"] == "XGMI" for a, b in itertools.permutations(range(8), 2))
    assert all(r["weights"][f"GPU{a}"][f"GPU{b}"] == 15 for a, b in itertools.permutations(range(8), 2))
    assert all(r["hops"][f"GPU{a}"][f"GPU{b}"] == 1 for a, b in itertools.permutations(range(8), 2))
    assert [g["numa_node"] for g in r["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g["numa_affinity"] for g in r["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_rocm_showtopo_damaged():
    text = fixture_text(SHOWTOPO)
    bad = text.replace("GPU3   XGMI         XGMI         XGMI         0            XGMI", "GPU3   XGMI         XGMI", 1)
    with pytest.raises(ParseError, match="row GPU3 has"):
        parse(bad)
    cut = text[: text.index("=== Link Type")]
    with pytest.raises(ParseError, match="no 'Link Type between two GPUs' section"):
        parse(cut, "rocm-smi-topo")


def test_rocm_smi_concise_mi210():
    r = parse(fixture_text("public/rocm-smi/mi210-2gpu-concise-trailing-spaces-rocm-5480.txt"))
    assert [(g["device"], g["node"], g["device_id"]) for g in r["gpus"]] == [(0, 2, "0x740f"), (1, 3, "0x740f")]
    assert r["gpus"][0]["power_cap_w"] == 300.0 and r["gpus"][0]["vram_pct"] == 32
    assert r["gpus"][1]["partitions"] == "N/A, N/A, 0"


def test_amd_smi_default_table_vf_guest():
    r = parse(fixture_text("public/amd-smi/mi300x-vf-guest-default-table-26.0.txt"))
    assert (r["version"], r["amdgpu_version"], r["rocm_version"], r["platform"]) == (
        "26.0.0+37d158ab", "6.14.14", "7.0.0", "Linux Guest")
    assert r["gpus"] == [{"gpu": 0, "bdf": "0000:83:00.0", "name": "AMD Instinct MI300X VF", "hip_id": 0, "oam_id": 0,
                          "partition_mode": "SPX/NPS1", "power_w": 135.0, "power_cap_w": 750.0, "temp_c": 37,
                          "mem_used_mb": 285, "mem_total_mb": 196288}]


def test_amd_smi_partition_current_marked():
    r = parse(fixture_text("public/amd-smi/mi325x-vf-partition-g0-spx-nps1.txt"))
    assert r["current"][0]["memory"] == "NPS1" and r["current"][0]["accelerator_type"] == "SPX"
    assert [p["accelerator_type"] for p in r["profiles"]] == ["SPX", "DPX", "QPX", "CPX"]
    assert [p["current"] for p in r["profiles"]] == [True, False, False, False]
    assert [p["num_partitions"] for p in r["profiles"]] == [1, 2, 4, 8]
    assert r["memory_partition"][0]["current_memory_partition"] == "NPS1"


def test_amd_smi_version_inbox_driver():
    r = parse(fixture_text("public/amd-smi/version-25.3.0-rocm-6.4.0-inbox-kernel-driver.txt"))
    assert (r["tool"], r["library"], r["rocm_version"]) == ("25.3.0+ede62f2", "25.3.0", "6.4.0")
    assert r["amdgpu_version"].startswith("Linuxversion6.8.0-79-generic")
    assert r["fields"]["amd_hsmp_version"] is None


def test_amd_smi_static_json_new_layout():
    text = data_text("amd-smi-static-mi300x-8.json")
    assert detect_kind(text) == "amd-smi-static-json"
    r = parse(text)
    assert len(r["gpus"]) == 8
    g = r["gpus"][5]
    assert (g["market_name"], g["vram_mib"], g["driver_version"], g["numa_node"]) == (
        "AMD Instinct MI300X", 196592, "6.10.5", 1)


def test_amd_smi_static_json_old_layout_string_sizes():
    r = parse(data_text("amd-smi-static-mi300x-2-old.json"))
    assert [g["vram_mib"] for g in r["gpus"]] == [196592, 196592]
    assert r["gpus"][0]["numa_node"] is None


def test_amd_smi_topology_json_both_layouts():
    new = parse(data_text("amd-smi-topology-mi300x-8.json"))
    assert all(new["links"][f"GPU{a}"][f"GPU{b}"] == "XGMI" for a, b in itertools.permutations(range(8), 2))
    assert new["link_status"]["GPU0"]["GPU7"] == "ENABLED" and new["hops"]["GPU3"]["GPU4"] == 1
    old = parse(data_text("amd-smi-topology-old-2.json"))
    assert old["links"] == {"GPU0": {"GPU1": "PCIE"}, "GPU1": {"GPU0": "PCIE"}}
    assert old["link_status"]["GPU0"]["GPU1"] == "DISABLED" and old["weights"]["GPU1"]["GPU0"] == 40


def test_amd_smi_list_json():
    r = parse(data_text("amd-smi-list-mi300x-8.json"))
    assert [g["gpu"] for g in r["gpus"]] == list(range(8)) and r["gpus"][0]["bdf"] == "0000:05:00.0"


def test_amd_smi_json_damaged():
    text = data_text("amd-smi-static-mi300x-8.json")
    with pytest.raises(ParseError, match="expected JSON") as exc:
        parse(text[:300], "amd-smi-static-json")
    assert exc.value.line == text[:300].count("\n") + 1  # the line where the JSON stops
    with pytest.raises(ParseError, match="neither 'links' nor 'link_type'"):
        parse('[{"gpu": 0, "bdf": "0000:05:00.0"}]', "amd-smi-topology-json")
