"""Ascend parsers: npu-smi info (A2 and A3 layouts), npu-smi topo, hccn_tool, version.info."""

import pytest
from conftest import assert_refused, fixture_text
from llmb.hw import ParseError, parse

A2 = "public/npu-smi/910b3-8npu-idle-24.1rc1-ms-swift.txt"
A3 = "public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt"


def test_npu_smi_a2_eight_910b3():
    r = parse(fixture_text(A2))
    assert r["version"] == "24.1.rc1.b030"
    assert [n["npu"] for n in r["npus"]] == list(range(8))
    assert {n["name"] for n in r["npus"]} == {"910B3"} and {n["health"] for n in r["npus"]} == {"OK"}
    assert {n["chip"] for n in r["npus"]} == {0} and {n["phy_id"] for n in r["npus"]} == {None}
    assert {n["hbm_total_mb"] for n in r["npus"]} == {65536}
    first = r["npus"][0]
    assert (first["bus_id"], first["hbm_used_mb"], first["power_w"], first["temp_c"]) == ("0000:C1:00.0", 3318, 101.8, 43)
    assert r["npus"][7]["bus_id"] == "0000:42:00.0"
    assert r["processes"] == []


def test_npu_smi_a3_sixteen_chips_with_processes():
    r = parse(fixture_text(A3))
    assert r["version"] == "25.2.0"
    npus = r["npus"]
    assert len(npus) == 16
    assert [n["phy_id"] for n in npus] == list(range(16))
    assert [(n["npu"], n["chip"]) for n in npus[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {n["name"] for n in npus} == {"Ascend910"}
    assert npus[0]["hbm_used_mb"] == 61609 and npus[0]["hbm_total_mb"] == 65536  # '61609/ 65536'
    assert npus[1]["power_w"] is None and npus[0]["power_w"] == 211.3  # second chip prints '-'
    assert npus[15]["bus_id"] == "0000:83:00.0"
    assert len(r["processes"]) == 23
    assert r["processes"][8] == {"npu": 0, "chip": 1, "pid": 929405, "name": None, "memory_mb": 58780}


def test_npu_smi_damaged():
    lines = fixture_text(A2).splitlines()
    cut = "\n".join(ln for ln in lines if "0000:81:00.0" not in ln)
    with pytest.raises(ParseError, match="NPU 2: second row"):
        parse(cut)
    half = "\n".join(lines[: lines.index(next(ln for ln in lines if "0000:42:00.0" in ln))])
    with pytest.raises(ParseError, match="NPU 7: output ends after its first row"):
        parse(half, "npu-smi-info")
    with pytest.raises(ParseError, match="no 'npu-smi <v> Version"):
        parse("dcmi module initialize failed. ret is -8005\n", "npu-smi-info")


def test_npu_topo_a3_sio():
    r = parse(fixture_text("public/npu-smi-topo/a3-2chip-sio-sglang-30453.txt"))
    assert [d["index"] for d in r["devices"]] == [12, 13]
    assert r["links"] == {"Phy-ID12": {"Phy-ID13": "SIO"}, "Phy-ID13": {"Phy-ID12": "SIO"}}


def test_npu_topo_a2_with_cpu_affinity_synthetic():
    text = (
        "           NPU0       NPU1       NPU2       CPU Affinity\n"
        "NPU0       X          HCCS       HCCS       144-167\n"
        "NPU1       HCCS       X          HCCS       144-167\n"
        "NPU2       HCCS       HCCS       X          96-119\n\nLegend:\n"
    )
    r = parse(text)
    assert r["kind"] == "npu-smi-topo"
    assert r["devices"][2] == {"name": "NPU2", "index": 2, "cpu_affinity": list(range(96, 120))}
    assert r["links"]["NPU0"]["NPU2"] == "HCCS"
    with pytest.raises(ParseError, match="unknown label 'HCCX'"):
        parse(text.replace("X          HCCS       HCCS       144", "X          HCCX       HCCS       144"), "npu-smi-topo")


def test_hccn_ip():
    r = parse(fixture_text("public/hccn_tool/910b1-huaweicloud-dev3-ip-g.txt"))
    assert r["devices"] == [{"device": None, "ipaddr": "29.1.112.213", "netmask": "255.255.0.0"}]
    r = parse(fixture_text("public/hccn_tool/910b1-huaweicloud-dev3-ip-g.txt"), device=3)
    assert r["devices"][0]["device"] == 3


def test_hccn_two_commands_with_echoed_command_lines():
    r = parse(fixture_text("public/hccn_tool/mindcluster-doc-dev0-net_health-init-and-link-up.txt"))
    assert r["devices"] == [{"device": 0, "net_health": "Init", "link": "UP"}]


def test_hccn_lldp_elided():
    r = parse(fixture_text("public/hccn_tool/910b1-huaweicloud-dev3-lldp-g-elided.txt"))
    lldp = r["devices"][0]["lldp"]
    assert lldp["port_id"] == "Ifname: 400GE1/1/20:2"
    assert lldp["maximum_frame_size"] == "9216"
    assert lldp["system_capabilities"] == "Enabled capabilities: Bridge, Router"
    assert "Huarong DX511" in lldp["system_description"]
    assert len(r["warnings"]) == 1 and "elided" in r["warnings"][0]
    assert r["elisions"] == [15]  # the author's '...' line: a finding (a warning under [fidelity: ELIDED])


def test_hccn_link_down_and_damage():
    assert parse("link status: DOWN\n", "hccn-tool", device=5)["devices"] == [{"device": 5, "link": "DOWN"}]
    no_ip = parse("ipaddr:\nnetmask:\n", "hccn-tool", device=5)["devices"][0]
    assert no_ip == {"device": 5, "ipaddr": None, "netmask": None}
    failed = parse("Get ip address failed\n", "hccn-tool", device=5)  # the tool failed: a finding, not skipped
    assert failed["tool_errors"] == [{"line": 1, "text": "Get ip address failed"}]
    assert failed["devices"] == [{"device": 5, "errors": ["Get ip address failed"]}]
    assert_refused("hccn-tool", {"some banner\n": "expected a hccn_tool result line", "\n": "found none"})


def test_version_info():
    r = parse(fixture_text("public/ascend-version-info/driver-24.1.rc2.2-mindie.txt"))
    assert r["version"] == "24.1.rc2.2" and r["package_version"] == "24.1.rc2.2"
    assert r["innerversion"] == "V100R001C18SPC001B233"
    assert r["compatible_version"] == ["V100R001C30", "V100R001C13", "V100R001C15", "V100R001C17", "V100R001C18"]
    assert r["fields"]["ascendhal_version"] == "7.35.23"
    with pytest.raises(ParseError, match="not a key=value line"):
        parse("Version=24.1.rc2\ngarbage line\n", "ascend-version-info")
    with pytest.raises(ParseError, match="no Version="):
        parse("aicpu_version=1.0\n", "ascend-version-info")
