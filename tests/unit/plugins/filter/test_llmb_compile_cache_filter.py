"""The serve role's compile cache peer copy wiring: the filters over hostvars, and the tasks that use them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[4]
spec = importlib.util.spec_from_file_location("llmb_cc_filter", REPO / "plugins/filter/llmb_compile_cache.py")
f = importlib.util.module_from_spec(spec)
spec.loader.exec_module(f)

CACHE = "/var/cache/llmb/compile/llmb-vllm"


def hv(state, rank, sent=None):
    svc = {"name": "llmb-vllm", "argv": ["vllm", "serve", "m", f"--node-rank={rank}"], "env": {}, "cache_dir": CACHE}
    out = {"llmb_deployment": {"host": {"plan": {"address": f"10.0.0.{rank + 1}", "services": [svc]}}}}
    if state is not None:
        out["__serve_compile_cache"] = {"state": {"llmb-vllm": state}}
    if sent is not None:
        out["__serve_cache_send"] = {"manifests": {"llmb-vllm": sent}}
    return out


FILES = [{"path": "triton/k.cubin", "size": 5, "sha256": "a" * 64}]


def test_peers_from_hostvars_and_jobs_from_the_senders_manifest():
    hostvars = {"n1": hv("warm", 0, {"files": FILES, "unservable": [], "url": "http://10.0.0.1:18190"}),
                "n2": hv("cold", 1), "n3": hv(None, 2)}
    peers = f.llmb_compile_cache_peers(["n1", "n2", "n3"], hostvars)
    assert peers["senders"] == {"n1": ["llmb-vllm"]} and list(peers["receivers"]) == ["n2"]
    services = hostvars["n2"]["llmb_deployment"]["host"]["plan"]["services"]
    jobs = f.llmb_compile_cache_jobs(peers["receivers"]["n2"], hostvars, "__serve_cache_send", services)
    assert jobs == {"llmb-vllm": {"cache_dir": CACHE, "url": "http://10.0.0.1:18190", "source": "n1",
                                  "digest": peers["receivers"]["n2"]["llmb-vllm"]["digest"], "files": FILES}}
    assert f.llmb_compile_cache_peers(["n1", "n2"], hostvars, enabled=False) == {"receivers": {}, "senders": {}}


def test_a_source_that_could_not_serve_leaves_the_receiver_cold():
    hostvars = {"n1": hv("warm", 0, {"files": FILES, "unservable": ["x: mode 0600"], "url": "http://10.0.0.1:18190"}),
                "n2": hv("cold", 1)}
    peers = f.llmb_compile_cache_peers(["n1", "n2"], hostvars)
    assert f.llmb_compile_cache_jobs(peers["receivers"]["n2"], hostvars, "__serve_cache_send", []) == {}


def test_the_report_says_peer_for_a_cache_filled_in_this_run():
    assert f.llmb_compile_cache_after({"llmb-vllm": "cold", "b": "warm"}, {"received": {"llmb-vllm": {}}}) == {
        "llmb-vllm": "peer", "b": "warm"}
    assert f.llmb_compile_cache_after({"llmb-vllm": "cold"}, {}) == {"llmb-vllm": "cold"}


def test_the_role_runs_nothing_more_on_a_converged_host():
    install = yaml.safe_load((REPO / "roles/serve/tasks/install.yml").read_text())
    # imported (static: no task round of its own), the file tests/device/serve-nodes.yml runs too
    assert any(t.get("ansible.builtin.import_tasks") == "compile_cache.yml" for t in install)
    tasks = yaml.safe_load((REPO / "roles/serve/tasks/compile_cache.yml").read_text())
    inc = next(t for t in tasks if "ansible.builtin.include_tasks" in t)
    assert inc["ansible.builtin.include_tasks"]["file"] == "cache_peer.yml"
    # included only where the peer plan names the host (a converged run names none) and the knob is on
    assert inc["when"][0] == "serve_compile_cache_from_peer | bool"
    assert "_serve_cache_peers.senders" in inc["when"][-1] and "_serve_cache_peers.receivers" in inc["when"][-1]
    assert "llmb_compile_cache_peers" in inc["vars"]["_serve_cache_peers"]
    (block,) = yaml.safe_load((REPO / "roles/serve/tasks/cache_peer.yml").read_text())
    calls = block["block"] + block["always"]
    assert [t["llmb_compile_cache_peer"]["state"] for t in calls] == ["serving", "received", "stopped"]
    assert block["always"][0]["when"] == "inventory_hostname in _serve_cache_peers.senders"
