"""nccl-tests 2.19.6 outputs from the lent 4x H200 (docs/examples/serve-real-multinode/fabric/): the
project's parsers and checks on the real captures - one node of 4 GPUs (NVLink) and 2 emulated nodes
x 2 GPUs through mpirun (NET/Socket between them)."""

from __future__ import annotations

import json
from pathlib import Path

from llmb.hw import parse
from llmb.hw.fabric import parse_nccl_debug
from llmbctl import verify as V

FABRIC = Path(__file__).resolve().parents[4] / "docs" / "examples" / "serve-real-multinode" / "fabric"


def test_one_node_all_reduce_of_4_h200_passes_the_h200_x4_threshold():
    sweep = parse((FABRIC / "one-node-sweep.txt").read_text(), "nccl-tests")
    assert len(sweep["rows"]) == 28 and sweep["rows"][0]["size_bytes"] == 8
    assert sweep["rows"][-1]["size_bytes"] == 1 << 30 and sweep["out_of_bounds"] == 0
    assert 340 < sweep["peak_busbw_gbps"] < 400 and sweep["avg_busbw_gbps"] < 150  # small sizes pull it down
    checks = V.bandwidth_checks(sweep, V.load_profile("h200-x4"))
    assert [(c["id"], c["ok"], c["found"]) for c in checks] == [("bandwidth.allreduce", True, "355.7 GB/s")]
    probe = parse((FABRIC / "one-node-probe.txt").read_text(), "nccl-tests")
    assert [r["size_bytes"] for r in probe["rows"]] == [256 << 20, 512 << 20, 1 << 30]


def test_cross_node_all_reduce_reads_socket_between_the_emulated_nodes():
    out = json.loads((FABRIC / "cross-node-probe.json").read_text())
    assert out["rc"] == 0 and out["cmd"][out["cmd"].index("-H") + 1] == "node1:2,10.99.0.2:2"
    dbg = parse_nccl_debug(out["output"])
    assert [(r["rank"], r["host"], r["device"]) for r in dbg["ranks"]] == [
        (0, "node1", 0), (1, "node1", 1), (2, "node2", 0), (3, "node2", 1)]
    assert {h: r["transport"] for h, r in dbg["hosts"].items()} == {"node1": "socket", "node2": "socket"}
    perf = parse(out["output"], "nccl-tests")
    assert perf["out_of_bounds"] == 0 and 1 < perf["peak_busbw_gbps"] < 20
    checks = V.fabric_checks(V.load_profile("h200-x2"),
                             {"node1": {"hostname": "node1", "rails": [], "next": "node2"},
                              "node2": {"hostname": "node2", "rails": [], "next": "node1"}}, allreduce=out)
    assert [(c["id"], c["ok"]) for c in checks["node1"]] == [("fabric.transport", False), ("fabric.allreduce", True)]
    assert checks["node2"][0]["found"].startswith("socket (network Socket")
