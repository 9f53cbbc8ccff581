"""Issue #30: every real AMD, Ascend and RDMA output read right or refused with its line.

The captures are public real outputs under tests/fixtures/captures (each file's header names its source
and what was elided); a few tests damage a real capture the way a terminal or an author does (a
hard-wrapped line, an author's '...') and say so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import data_text, fixture_text
from llmb.hw import ParseError, parse
from llmb.hw.kinds import detect_kind
from llmbctl.hw.check import parse_checked
from llmbctl.hw.facts import build_facts

ROOT = Path(__file__).resolve().parents[4]
PUBLIC = ROOT / "tests" / "fixtures" / "captures"  # tests/fixtures/public would shadow ../shared/fixtures


def cap(rel: str) -> str:
    return (PUBLIC / rel).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- point 1: amd-smi / rocm-smi text


def test_amd_smi_list_text_has_the_json_facts_and_names_a_duplicate_uuid():
    text = cap("amd-smi/mi210-2gpu-list-duplicate-uuid-rocm-5480.txt")
    assert detect_kind(text) == "amd-smi-list"
    res = parse_checked(text)
    assert res.ok, res.findings
    g = res.facts["gpus"]
    assert [(x["gpu"], x["bdf"], x["kfd_id"], x["node_id"], x["partition_id"]) for x in g] == [
        (0, "0000:03:00.0", 22303, 2, 0), (1, "0000:83:00.0", 31706, 3, 0)]
    # the JSON twin's keys, same values
    json_keys = set(parse(data_text("amd-smi-list-mi300x-8.json"))["gpus"][0])
    assert json_keys <= set(g[0])
    # two GPUs with one UUID: the known bad state, named with the line of the second GPU
    dup = [f for f in res.findings if "same UUID" in f.message]
    assert len(dup) == 1 and dup[0].line == 12 and dup[0].text == "GPU: 1", res.findings
    clean = parse_checked(cap("amd-smi/mi210-2gpu-list-distinct-uuid-rocm-5480.txt"))
    assert clean.clean and clean.facts["gpus"][1]["uuid"] == "95ff740f-0000-1000-80a1-ca7691e7c391"


def test_amd_smi_static_text_reads_like_static_json():
    res = parse_checked(cap("amd-smi/radeon890m-apu-static-text-rocm72.txt"))
    assert res.kind == "amd-smi-static" and res.ok, res.findings
    g = res.facts["gpus"][0]
    assert set(g) == set(parse(data_text("amd-smi-static-mi300x-8.json"))["gpus"][0])  # one data model
    assert (g["market_name"], g["device_id"], g["target_graphics_version"], g["bdf"]) == (
        "AMD Radeon Graphics", "0x150e", "gfx1150", "0000:c5:00.0")
    assert (g["vram_type"], g["vram_mib"], g["driver_name"], g["numa_node"], g["numa_affinity"]) == (
        "DDR5", 65536, "amdgpu", 0, None)  # AFFINITY: NONE is not a node
    facts = build_facts([{"name": "amd-smi-static", "kind": "amd-smi-static", "cmd": "amd-smi static", "rc": 0,
                          "stdout": res.facts and cap("amd-smi/radeon890m-apu-static-text-rocm72.txt").split("\n\n", 1)[1]}])
    assert facts["vendor"] == "amd" and facts["devices"][0]["bus_id"] == "0000:c5:00.0"
    assert facts["devices"][0]["memory_mib"] == 65536


def test_amd_smi_metric_text():
    res = parse_checked(cap("amd-smi/radeon890m-apu-metric-text-rocm72.txt"))
    assert res.kind == "amd-smi-metric" and res.ok, res.findings
    assert res.facts["gpus"] == [{"gpu": 0, "temp_edge_c": 28.0, "vram_total_mib": 65536, "vram_used_mib": 1512,
                                  "ecc_correctable": 0, "ecc_uncorrectable": 0}]


@pytest.mark.parametrize("rel, first", [
    ("rocm-smi/mi210-2gpu-showproductname-rocm-5480.txt",
     {"gpu": 0, "card_series": "Instinct MI210", "device_id": "0x740f", "vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
      "sku": "D67301", "subsystem_id": "0x0c34", "device_rev": "0x02", "node_id": 2, "guid": 12261, "gfx_version": "gfx90a"}),
    ("rocm-smi/mi100-1gpu-showproductname-rocm4-1351.txt",
     {"gpu": 0, "card_series": "0x738c", "device_id": "0xc34", "vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
      "sku": "D34314"}),
])
def test_rocm_smi_showproductname_both_layouts(rel, first):
    text = cap(rel)
    assert detect_kind(text) == "rocm-smi-productname"
    body = text.split("\n\n", 1)[1]
    assert detect_kind(body) == "rocm-smi-productname"  # from the content alone too
    res = parse_checked(text)
    assert res.clean, res.findings
    assert res.facts["gpus"][0] == first


def test_the_concise_table_parser_refuses_productname_with_its_line():
    res = parse_checked(cap("rocm-smi/mi210-2gpu-showproductname-rocm-5480.txt"), kind="rocm-smi")
    err = res.errors[0]  # the content says which form it is: refused at the banner, naming the right kind
    assert err.line == 6 and "ROCm System Management Interface" in err.text
    assert err.message.startswith("expected rocm-smi output") and "rocm-smi-productname" in err.message
    from llmb.hw.amd import parse_rocm_smi  # the table parser alone names the section it found instead
    with pytest.raises(ParseError, match="Product Info") as exc:
        parse_rocm_smi(cap("rocm-smi/mi210-2gpu-showproductname-rocm-5480.txt").split("\n\n", 1)[1])
    assert exc.value.line == 3


# --------------------------------------------------------------------------- point 2: hccn_tool


def test_hccn_ping_loop_every_device_answers():
    res = parse_checked(cap("hccn_tool/910b3-8npu-ping-loop-mindie-deepseekv3.txt"))
    assert res.kind == "hccn-tool" and res.clean, res.findings
    devs = res.facts["devices"]
    assert [d["device"] for d in devs] == list(range(8))
    p = devs[7]["pings"][0]
    assert (p["address"], p["transmitted"], p["received"], p["loss_pct"], p["ok"]) == ("11.12.165.80", 3, 3, 0.0, True)


def test_hccn_ping_with_a_lost_reply_is_not_ok():
    res = parse_checked(cap("hccn_tool/mindie-doc-ping-partial-loss.txt"))
    p = res.facts["devices"][0]["pings"][0]
    assert (p["transmitted"], p["received"], p["loss_pct"], p["ok"]) == (3, 2, 33.33, False)
    assert p["lost"] == [{"line": 1, "text": "recv time out seq=O"}]  # the doc's letter O: still a timeout


def test_hccn_gateway_and_netdetect():
    gw = parse_checked(cap("hccn_tool/910b3-8npu-gateway-loop-mindie-deepseekv3.txt"))
    assert gw.clean, gw.findings
    assert [(d["device"], d["gateway"], d["gateway_iface"]) for d in gw.facts["devices"]] == [
        (i, "11.12.165.1", f"eth{i}") for i in range(8)]
    nd = parse_checked(cap("hccn_tool/910b3-8npu-netdetect-loop-elided-mindie-deepseekv3.txt"))
    assert nd.ok and nd.facts["devices"][0]["netdetect"] == "11.12.165.1"
    # the author's '...': a warning here ([fidelity: ELIDED]), an error without that header
    assert [(f.severity, f.line) for f in nd.findings] == [("warning", 6)]
    bare = parse_checked("netdetect address: 11.12.165.1\n...\n", kind="hccn-tool")
    assert not bare.ok and bare.errors[0].line == 2


def test_hccn_route_and_hw_stats():
    route = parse_checked(cap("hccn_tool/atlas800-9000-route-g-dev0.txt"))
    assert route.kind == "hccn-tool" and route.clean, route.findings
    routes = route.facts["devices"][0]["routes"]
    assert len(routes) == 13 and routes[0] == {"destination": "127.0.0.1", "gateway": None, "genmask": "255.255.255.255",
                                               "flags": "UH", "metric": 0, "iface": "lo"}
    assert [r["iface"] for r in routes if r["destination"].startswith("192.168.") and r["iface"].startswith("eth")] == [
        "eth0", "eth1", "eth2", "eth3"]
    hw = parse_checked(cap("hccn_tool/910b1-huaweicloud-dev3-hw_stats-g.txt"))
    assert hw.clean and hw.facts["devices"] == [{"device": 3, "hw_stats": {
        "pd_alloc": 1, "pd_dealloc": 0, "mr_alloc": 0, "mr_dealloc": 0, "cq_alloc": 1, "cq_dealloc": 0, "qp_alloc": 1,
        "qp_dealloc": 0, "pd_active": 1, "mr_active": 0, "cq_active": 1, "qp_active": 1, "aeqe": 0, "ceqe": 0}}]
    for rel in ("hccn_tool/atlas800-9000-route-g-dev0.txt", "hccn_tool/910b1-huaweicloud-dev3-hw_stats-g.txt",
                "hccn_tool/mindie-doc-ping-partial-loss.txt", "hccn_tool/910b3-8npu-gateway-loop-mindie-deepseekv3.txt"):
        assert detect_kind(cap(rel).split("\n\n", 1)[1]) == "hccn-tool", rel  # from the content alone


def test_hccn_ping_cut_before_its_summary_is_a_finding():
    text = cap("hccn_tool/910b3-8npu-ping-loop-mindie-deepseekv3.txt").rstrip("\n").rsplit("\n", 1)[0] + "\n"
    res = parse_checked(text)  # the last device's summary line cut (a derived damage of the real capture)
    assert not res.ok and "no 'packets transmitted' summary" in res.errors[0].message
    assert res.errors[0].line == 40 and res.errors[0].text == "device 7 PING 11.12.165.80"


# --------------------------------------------------------------------------- point 3: tool failures are findings


def test_ibstat_ibpanic_is_a_finding_not_a_field_of_the_previous_port():
    res = parse_checked(cap("ibstat/gpud-752-partial-then-ibpanic-mlx5_8.txt"))
    assert not res.ok
    panic = [f for f in res.errors if "ibpanic" in f.text]
    assert len(panic) == 1 and panic[0].line == 24 and "mlx5_8" in panic[0].message
    port = res.facts["cas"][0]["ports"][0]
    assert not any("ibpanic" in str(v) for v in port.values()), port  # not filed under mlx5_7's port
    assert port["state"] == "Active"
    assert res.facts["tool_errors"][0]["device"] == "mlx5_8"
    alone = parse_checked(cap("ibstat/azure-ndv4-ibpanic-an0-azhpc-213.txt"))  # ibstat that printed only the panic
    assert not alone.ok and alone.errors[0].line == 5 and "mlx5_an0" in alone.errors[0].text
    good = parse_checked(fixture_text("public/ibstat/h100-node-cx7-ib400-plus-cx6dx-eth-some-down-gpud.txt"))
    assert good.clean


def test_a_tool_that_exits_non_zero_after_output_fails_the_capture_check():
    body = cap("ibstat/gpud-752-partial-then-ibpanic-mlx5_8.txt").split("\n\n", 1)[1]
    blocks = body.replace("...\n\n", "").replace(": ...", ": 0x0").rsplit("ibpanic", 1)[0]  # stdout only
    facts = build_facts([{"name": "ibstat", "kind": "ibstat", "cmd": "ibstat", "rc": 255, "stdout": blocks,
                          "stderr": "ibpanic: [1323906] main: stat of IB device 'mlx5_8' failed: No such file or directory",
                          "ok_rcs": [0]}], vendor="nvidia")
    err = [e for e in facts["errors"] if e["probe"] == "ibstat"]
    assert err and err[0]["capture"] and "exit status 255" in err[0]["error"] and "mlx5_8" in err[0]["error"]


def _npu_elided() -> str:
    """The real A3 capture with the author's kind of cut: NPU rows 2-7 replaced by a '...' line."""
    lines = fixture_text("public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt").split("\n")
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| 2 "))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("| 8 ") or ln.startswith("+====") and i > start + 20)
    return "\n".join(lines[:start] + ["..."] + lines[end:])


def test_npu_smi_elision_is_a_finding():
    text = _npu_elided()
    res = parse_checked(text)
    assert not res.ok
    eli = [f for f in res.errors if "elision" in f.message]
    assert eli and eli[0].text == "..." and text.split("\n")[eli[0].line - 1] == "..."


def before_amx(text):
    return parse_checked(text).facts["amx"]


def test_lscpu_stopped_at_a_wrapped_flags_line_keeps_what_came_before():
    real = fixture_text("public/lscpu/xeon8480-kvm-vm-208vcpu-h100-dstack.txt")
    lines = real.split("\n")
    i = next(n for n, ln in enumerate(lines) if ln.startswith("Flags:"))
    wrapped = lines[:i] + [lines[i][:80], lines[i][80:]] + lines[i + 1:]  # a narrow terminal's hard wrap
    text = "\n".join(wrapped)
    res = parse_checked(text)
    assert res.ok, res.findings
    assert res.facts["cpus"] == 208 and [n["node"] for n in res.facts["numa_nodes"]] == [0, 1]
    w = res.findings[0]
    assert w.severity == "warning" and w.line == i + 2 and w.text == lines[i][80:].strip()[:120]
    assert res.facts["amx"] == before_amx(real)  # the wrapped Flags value read whole
    before = parse_checked(real)
    assert before.facts["numa_nodes"] == res.facts["numa_nodes"]
    with pytest.raises(ParseError, match="expected a 'Field: value' line"):
        parse("garbage line\nArchitecture: x86_64\n", "lscpu")
    lost = set(before.facts["fields"]["Flags"].split()) - set(res.facts["fields"]["Flags"].split())
    assert len(lost) <= 1  # at most the one flag the wrap cut in two


# --------------------------------------------------------------------------- point 4: one refusal format


@pytest.mark.parametrize("kind, text, line, shown", [
    ("amd-smi-static-json", '[\n  {"gpu": 0,\n   "asic": {"market_name": "MI300X"\n', 3, '"asic": {"market_name": "MI300X"'),
    ("amd-smi-list-json", "GPU: 0\n    BDF: 0000:03:00.0\n", 1, "GPU: 0"),
    ("lscpu-json", '{"lscpu": [\n  {"field": "Architecture:", "data": "x86_64"},\n  {"field"\n', 3, '{"field"'),
    ("rocm-smi", "==== ROCm System Management Interface ====\n==== Product Info ====\nGPU[0] : Card SKU: D1\n", 2,
     "==== Product Info ===="),
])
def test_every_kind_refuses_with_file_line_text_and_expectation(tmp_path, kind, text, line, shown):
    res = parse_checked(text, kind=kind)
    err = res.errors[0]
    assert res.facts is None and err.line == line and err.text == shown and "expected" in err.message, err
    path = tmp_path / "capture.txt"
    path.write_text(text)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "hwfacts"), "--kind", kind, str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{path}:{line}: error: " in proc.stderr and f"| {shown}" in proc.stderr, proc.stderr


def test_docs_verify_lists_every_kind_with_its_command():
    from llmb.hw.kinds import KINDS

    doc = (ROOT / "docs" / "verify.md").read_text(encoding="utf-8")
    table = doc[doc.index("### Every kind: command, facts, refusal"):]
    rows = [ln for ln in table.splitlines() if ln.startswith("| `")]
    listed = {k.strip("` ") for row in rows for k in row.split("|")[1].split("/")}
    assert set(KINDS) <= listed, sorted(set(KINDS) - listed)
    assert "hwfacts: FILE:LINE: error: expected" in table


def test_probe_reads_the_text_form_where_amd_smi_has_no_json(tmp_path, monkeypatch):
    """An amd-smi that refuses --json (older releases): the probe runs the text form and the node's
    facts come out of it, the same data model as the JSON form's."""
    import stat

    from llmb.hw.probes import run_probes

    bindir = tmp_path / "bin"
    bindir.mkdir()
    static = tmp_path / "static.txt"
    static.write_text(cap("amd-smi/radeon890m-apu-static-text-rocm72.txt").split("\n\n", 1)[1])
    listing = tmp_path / "list.txt"
    listing.write_text(cap("amd-smi/mi210-2gpu-list-distinct-uuid-rocm-5480.txt").split("\n\n", 1)[1])
    script = bindir / "amd-smi"
    script.write_text("#!/bin/sh\ncase \"$*\" in\n"
                      f'  "static") cat "{static}";;\n  "list") cat "{listing}";;\n'
                      '  *) echo "amd-smi: error: unrecognized arguments: --json" >&2; exit 2;;\nesac\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")  # the stub's cat
    monkeypatch.setattr("llmb.hw.probes.EXTRA_PATH", ())
    raw = run_probes("amd", only=["amd-smi-static", "amd-smi-list"])
    kinds = {p["name"]: p["kind"] for p in raw["probes"]}
    assert kinds == {"amd-smi-static-text": "amd-smi-static", "amd-smi-list-text": "amd-smi-list"}, raw["probes"]
    facts = build_facts(raw["probes"], "amd")
    assert facts["devices"][0]["bus_id"] == "0000:c5:00.0" and not facts["errors"], facts["errors"]


def test_rocm_smi_only_node_gets_its_devices_from_showproductname():
    body = cap("rocm-smi/mi210-2gpu-showproductname-rocm-5480.txt").split("\n\n", 1)[1]
    facts = build_facts([{"name": "rocm-productname", "kind": "rocm-smi-productname", "cmd": "rocm-smi --showproductname",
                          "rc": 0, "stdout": body}], vendor="amd")
    assert [(d["name"], d["model"]) for d in facts["devices"]] == [("GPU0", "Instinct MI210"), ("GPU1", "Instinct MI210")]
