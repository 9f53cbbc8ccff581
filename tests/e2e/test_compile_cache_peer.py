"""Issue 23 point 6 on the simulated cluster, after test_site.py: the same vLLM service (llmb-vllm) on two
nodes (vLLM's native multi-node launch: node rank 0 and a --headless rank 1, one plan digest once the
per-node argv is left out). A warm cache planted on node1 and node2's emptied: the serve stage fills node2's
from node1 through the relay (verified, marker last), the relay unit is gone after it, and a re-run copies
nothing again.
The stage must run for it: node2 plays a rebuilt node (its serve record removed with its cache).

Run alone: LLMB_E2E_CLUSTER=peer23-e2e pytest tests/e2e/test_site.py::test_site_converges_all_stages \
    tests/e2e/test_compile_cache_peer.py
"""

from __future__ import annotations

import hashlib
import json
import os

CACHE = "/var/cache/llmb/compile/llmb-vllm"
MARKER = f"{CACHE}/.llmb-cache-peer.json"
KERNEL = os.urandom(4096)


def _serve(cluster):
    run = cluster.playbook("playbooks/serve.yml", "-e", "llmb_vllm_multinode=native")
    assert run.rc == 0, run.out[-4000:]
    return run


def test_a_cold_node_takes_the_warm_nodes_cache(cluster):
    _serve(cluster)  # both nodes run llmb-vllm (rank 0 and the headless rank 1)
    cluster.node("node1", "mkdir", "-p", f"{CACHE}/torch_compile_cache/abc/rank_0_0")
    cluster.node("node1", "python3", "-c", f"open('{CACHE}/torch_compile_cache/abc/rank_0_0/k.bin', 'wb').write(bytes.fromhex('{KERNEL.hex()}'))")
    cluster.node("node1", "chmod", "-R", "u=rwX,go=rX", CACHE)
    # node2 as a rebuilt node: no cache and no serve record (an emptied cache alone on a converged cluster
    # is not seen: the serve stage's fast-path gate does not watch the cache)
    cluster.node("node2", "rm", "-rf", CACHE, "/var/lib/llmb/stages/serve.json")
    _serve(cluster)
    marker = json.loads(cluster.node("node2", "cat", MARKER).stdout)
    assert marker["peer"] == "node1" and marker["files"] == 1 and marker["bytes"] == len(KERNEL)
    got = cluster.node("node2", "sha256sum", f"{CACHE}/torch_compile_cache/abc/rank_0_0/k.bin").stdout.split()[0]
    assert got == hashlib.sha256(KERNEL).hexdigest()
    state = cluster.node("node1", "systemctl", "show", "-p", "ActiveState", "--value", "llmb-cache-relay-llmb-vllm", check=False)
    assert state.stdout.strip() != "active"
    # converged: node1 warm, node2 peer: nothing is copied again (the marker stays as it was)
    before = cluster.node("node2", "stat", "-c", "%Y", MARKER).stdout
    _serve(cluster)
    assert cluster.node("node2", "stat", "-c", "%Y", MARKER).stdout == before
    back = cluster.playbook("playbooks/serve.yml")  # the sample's Ray launch again
    assert back.rc == 0, back.out[-4000:]
