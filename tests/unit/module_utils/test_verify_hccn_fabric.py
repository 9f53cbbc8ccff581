"""Issue #30: the Ascend cross-node check (NPU i of a node pings NPU i of every other node) named by host,
NPU and address, judged from the real hccn_tool -ping outputs (tests/fixtures/captures/hccn_tool)."""

from __future__ import annotations

from pathlib import Path

from llmbctl import verify as V

CAPS = Path(__file__).resolve().parents[2] / "fixtures" / "captures" / "hccn_tool"


def _body(name: str) -> str:
    return (CAPS / name).read_text(encoding="utf-8").split("\n\n", 1)[1]


def test_pairs_are_npu_i_to_npu_i_of_every_other_node():
    addrs = {"a": {"0": "10.0.0.1", "1": "10.0.1.1"}, "b": {"0": "10.0.0.2", "1": "10.0.1.2"}, "c": {"0": "10.0.0.3"}}
    pairs = V.hccn_ping_pairs(["a", "b", "c"], addrs)
    assert pairs["a"] == [{"device": 0, "peer": "b", "address": "10.0.0.2"}, {"device": 0, "peer": "c", "address": "10.0.0.3"},
                          {"device": 1, "peer": "b", "address": "10.0.1.2"}]
    assert pairs["c"] == [{"device": 0, "peer": "a", "address": "10.0.0.1"}, {"device": 0, "peer": "b", "address": "10.0.0.2"}]


def test_addresses_leave_out_ports_that_are_down():
    facts = {"hccn": {"NPU0": {"device": 0, "link": "UP", "ipaddr": "10.0.0.1"},
                      "NPU1": {"device": 1, "link": "DOWN", "ipaddr": "10.0.1.1"}, "NPU2": {"device": 2, "link": "UP"}}}
    assert V.hccn_addresses(facts) == {"0": "10.0.0.1"}


def test_real_pings_pass_and_a_lost_one_is_named_by_host_npu_and_address():
    loop = _body("910b3-8npu-ping-loop-mindie-deepseekv3.txt")
    chunks = ["device " + c for c in loop.split("device ") if c]
    ok = [{"device": i, "address": "11.12.165.80", "rc": 0, "output": chunks[i]} for i in range(8)]
    pairs = {"node1": [{"device": i, "peer": "node4", "address": "11.12.165.80"} for i in range(8)]}
    checks = V.hccn_ping_checks(pairs, {"node1": {"pings": ok}})["node1"]
    assert len(checks) == 8 and all(c["ok"] for c in checks), checks
    lossy = dict(ok[0], output="device 0 PING 11.12.165.80\n" + _body("mindie-doc-ping-partial-loss.txt"), rc=1)
    bad = V.hccn_ping_checks({"node1": pairs["node1"][:1]}, {"node1": {"pings": [lossy]}})["node1"][0]
    assert not bad["ok"] and bad["id"] == "fabric.hccn_ping.NPU0.node4"
    assert bad["expected"] == "NPU0 of node1 reaches NPU0 of node4 (11.12.165.80): 3 of 3 replies"
    assert bad["found"] == "2 of 3 replies (33.33% packet loss): recv time out seq=O"
    missing = V.hccn_ping_checks({"node1": pairs["node1"][:1]}, {})["node1"][0]
    assert not missing["ok"] and missing["found"].startswith("not run")
