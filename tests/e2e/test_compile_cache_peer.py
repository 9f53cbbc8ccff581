"""Issue 23 point 6 on the simulated cluster, after test_site.py: the same vLLM service (llmb-vllm) on two
nodes (vLLM's native multi-node launch: node rank 0 and a --headless rank 1, one plan digest once the
per-node argv is left out). Each node's engine double keeps its torch.compile cache per rank as vLLM 0.26.0
does (tests/enginesim/vllm_cli.compile_graphs). node2 rebuilt (its cache and serve record removed): the
serve stage fills its cache from node1's through the relay (verified, marker last), the relay unit is gone
after it, node2's engine still compiles its own ranks (a peer of the same group holds none of them, as on
the real engine), and a re-run copies nothing again.

Run alone: LLMB_E2E_CLUSTER=peer23-e2e pytest tests/e2e/test_site.py::test_site_converges_all_stages \
    tests/e2e/test_compile_cache_peer.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from llmb.report import collect

ROOT = Path(__file__).resolve().parents[2]
CACHE = "/var/cache/llmb/compile/llmb-vllm"
MARKER = f"{CACHE}/.llmb-cache-peer.json"
ADOPTED = f"{CACHE}/.llmb-cache-peer.adopted.json"  # the marker once the group started whole on the copy
GRAPHS = f"{CACHE}/vllm/torch_compile_cache"


def _serve(cluster, run_id):
    run = cluster.playbook("playbooks/serve.yml", "-e", "llmb_vllm_multinode=native", env={"LLMB_RUN_ID": run_id})
    assert run.rc == 0, run.out[-4000:]
    return run


def _rank_dirs(cluster, node):
    found = cluster.node(node, "find", GRAPHS, "-name", "graph.bin", check=False).stdout.split()
    return sorted(p.split("/")[-3] for p in found)


def _files(cluster, node):
    out = cluster.node(node, "find", CACHE, "-type", "f", "!", "-name", ".llmb-cache-peer.json", "-printf", "%P %s\n").stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def test_a_cold_node_takes_the_warm_nodes_cache(cluster):
    rid = f"e2e-starts-{int(time.time() * 1000)}"  # one artifacts directory for the three runs: one start history
    _serve(cluster, rid)  # both nodes run llmb-vllm (rank 0 and the headless rank 1); each compiles its ranks
    mine = _rank_dirs(cluster, "node1")
    assert mine and all(d.endswith("_0") for d in mine), mine
    sent = _files(cluster, "node1")
    # node2 as a rebuilt node: no cache and no serve record (an emptied cache alone on a converged cluster
    # is not seen: the serve stage's fast-path gate does not watch the cache)
    # and nothing of it running: the group stops (its members start again in plan order)
    for node in ("node2", "node1"):
        cluster.node(node, "systemctl", "stop", "llmb-vllm")
    cluster.node("node2", "rm", "-rf", CACHE, "/var/lib/llmb/stages/serve.json")
    _serve(cluster, rid)
    # the group started whole on the copy: node2 adopted it (warm from now on, its provenance kept)
    assert cluster.node("node2", "test", "-e", MARKER, check=False).returncode != 0
    marker = json.loads(cluster.node("node2", "cat", ADOPTED).stdout)
    assert marker["peer"] == "node1" and marker["files"] == len(sent)
    assert marker["bytes"] == sum(int(v) for v in sent.values())
    got = _files(cluster, "node2")
    assert all(got.get(path) == size for path, size in sent.items()), "node1's files not all on node2"
    # the copy held node1's ranks only: node2's engine compiled its own, beside them; node1's loaded its own
    n1 = cluster.node("node1", "systemctl", "show", "-p", "InvocationID", "--value", "llmb-vllm").stdout.strip()
    log1 = cluster.node("node1", "journalctl", f"_SYSTEMD_INVOCATION_ID={n1}", "-o", "cat", check=False).stdout
    assert "Directly load the compiled graph(s)" in log1 and "Compiling a graph" not in log1, log1[-2000:]
    theirs = sorted(set(_rank_dirs(cluster, "node2")) - set(mine))
    assert theirs and not set(theirs) & set(mine), theirs
    run_id = cluster.node("node2", "systemctl", "show", "-p", "InvocationID", "--value", "llmb-vllm").stdout.strip()
    log = cluster.node("node2", "journalctl", f"_SYSTEMD_INVOCATION_ID={run_id}", "-o", "cat", check=False).stdout
    assert "Compiling a graph" in log and "Directly load" not in log, log[-2000:]
    state = cluster.node("node1", "systemctl", "show", "-p", "ActiveState", "--value", "llmb-cache-relay-llmb-vllm", check=False)
    assert state.stdout.strip() != "active"
    # converged: node1 warm, node2 warm (adopted): nothing is copied again (the marker stays as it was)
    before = cluster.node("node2", "stat", "-c", "%Y", ADOPTED).stdout
    _serve(cluster, rid)
    assert cluster.node("node2", "stat", "-c", "%Y", ADOPTED).stdout == before
    # the serve section's start history (one run id: one artifacts directory): llmb-vllm on node1 started in
    # the first two runs (the third converged and started nothing, the history carried over), the second time
    # as a peer start: its own cache was warm, but its group's node2 took a peer's copy (the group's coldest);
    # node2's headless rank has no health check, so no time to healthy
    rec = json.loads((ROOT / "artifacts" / rid / "serve" / "node1.json").read_text())
    assert rec["healthy"] == [] and [s["service"] for s in rec["starts"]] == ["llmb-vllm", "llmb-vllm"], rec
    assert rec["starts"][-1]["compile_cache"] == "peer", rec["starts"]
    assert rec["compile_cache"] == {} or rec["compile_cache"].get("llmb-vllm") == "warm", rec
    assert all(s["since_start_s"] is not None for s in rec["starts"]), rec["starts"]  # systemd knew each start
    (vllm,) = collect(ROOT / "artifacts" / rid)["serve"]["starts"]["node1"]
    assert sum(g["count"] for g in vllm["groups"]) == 2 and "peer" in {g["compile_cache"] for g in vllm["groups"]}
    back = cluster.playbook("playbooks/serve.yml")  # the sample's Ray launch again
    assert back.rc == 0, back.out[-4000:]
