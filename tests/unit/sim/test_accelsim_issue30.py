"""The simulator outputs and faults of issue #30, read back through the verify parsers: hccn_tool
-ping / -gateway / -netdetect (modelled on tests/fixtures/captures/hccn_tool), the hccn_ping_lost fault
(an NPU whose peer does not answer) and the ibstat_abort fault (ibstat stops with `ibpanic:`)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
from llmbctl.hw.check import parse_checked  # noqa: E402


def test_hccn_ping_answers_on_the_npus_subnet_and_fails_under_the_fault(node):
    node.use("a3-16npu", "node1")
    peer = "192.168.103.2"  # NPU 3 of node2: the same per-NPU subnet
    rc, out, _ = node.run("hccn_tool", "-i", "3", "-ping", "-g", "address", peer)
    assert rc == 0 and out.startswith(f"device 3 PING {peer}\nrecv seq=0,time=0.")
    res = parse_checked(out, kind="hccn-tool")
    assert res.clean and res.facts["devices"][0]["pings"][0]["ok"], res.findings
    rc, out, _ = node.run("hccn_tool", "-i", "3", "-ping", "-g", "address", "192.168.104.2")  # another NPU's subnet
    assert rc == 1 and "3 packets transmitted, 0 received, 100.00% packet loss" in out
    node.fault("hccn_ping_lost", "device=3")
    rc, out, _ = node.run("hccn_tool", "-i", "3", "-ping", "-g", "address", peer)
    assert rc == 1 and out.count("recv time out seq=") == 3
    p = parse_checked(out, kind="hccn-tool").facts["devices"][0]["pings"][0]
    assert (p["address"], p["received"], p["ok"]) == (peer, 0, False)
    assert node.run("hccn_tool", "-i", "4", "-ping", "-g", "address", "192.168.104.2")[0] == 0  # only NPU 3


def test_hccn_gateway_and_netdetect(node):
    node.use("a3-16npu", "node1")
    gw = node.out("hccn_tool", "-i", "2", "-gateway", "-g")
    assert gw == "default gateway:192.168.102.254, Iface:eth2\n"
    assert parse_checked(gw, kind="hccn-tool").facts["devices"][0]["gateway"] == "192.168.102.254"
    nd = node.out("hccn_tool", "-i", "2", "-netdetect", "-g")
    assert parse_checked(nd, kind="hccn-tool").facts["devices"][0]["netdetect"] == "192.168.102.254"


def test_ibstat_abort_prints_the_devices_before_then_ibpanic(node):
    node.use("h800-hgx8", "node1")
    node.fault("ibstat_abort", "nic=mlx5_2")
    rc, out, err = node.run("ibstat")
    assert rc == 255 and err.startswith("ibpanic: [") and "stat of IB device 'mlx5_2' failed" in err
    res = parse_checked(out, kind="ibstat")
    assert [c["name"] for c in res.facts["cas"]] == ["mlx5_0", "mlx5_1"]
    both = parse_checked(out + err, kind="ibstat")  # stdout and stderr together, as gpud#752 shows them
    assert not both.ok and "mlx5_2" in both.errors[0].message


def test_rocm_smi_showproductname_reads_back_like_the_public_capture(node):
    node.use("mi300x-8", "node1")
    out = node.out("rocm-smi", "--showproductname")
    res = parse_checked(out, kind="rocm-smi-productname")
    assert res.clean, res.findings
    g = res.facts["gpus"]
    assert len(g) == 8 and g[0]["card_series"] == "Instinct MI300X" and g[0]["device_id"] == "0x74a1"
    assert g[0]["gfx_version"] == "gfx942" and isinstance(g[0]["node_id"], int)
    real = (ROOT / "tests/fixtures/captures/rocm-smi/mi210-2gpu-showproductname-rocm-5480.txt").read_text()
    fields = [ln.split(":")[1].strip() for ln in real.splitlines() if ln.startswith("GPU[0]")]
    assert fields == [ln.split(":")[1].strip() for ln in out.splitlines() if ln.startswith("GPU[0]")]  # same layout
