"""The controller's choice of a peer for each cold compile cache (llmbctl.compilecache)."""

import pytest
from llmbctl.compilecache import PeerPlanError, common_argv, peer_plan, service_digest

CACHE = "/var/cache/llmb/compile/llmb-vllm"


def svc(rank=0, addr="10.0.0.1", head="10.0.0.1", extra=(), env=None, name="llmb-vllm"):
    argv = ["vllm", "serve", "/opt/llmb/models/kimi", "--tensor-parallel-size", "4", "--nnodes", "4",
            f"--node-rank={rank}", "--master-addr", head, "--host", addr, *extra]
    if rank:
        argv.append("--headless")
    e = {"VLLM_HOST_IP": addr, "NCCL_SOCKET_IFNAME": f"veth{rank}", "CUDA_VISIBLE_DEVICES": f"{2 * rank},{2 * rank + 1}",
         "VLLM_CACHE_ROOT": f"{CACHE}/vllm"}
    e.update(env or {})
    return {"name": name, "image": None, "argv": argv, "env": e, "cache_dir": CACHE}


def plans(n, **kw):
    return {f"n{i + 1}": {"host": f"n{i + 1}", "services": [svc(rank=i, addr=f"10.0.0.{i + 1}", **kw)]} for i in range(n)}


def test_per_node_argv_and_env_leave_the_digest_alone():
    assert common_argv(svc(rank=1)["argv"]) == common_argv(svc(rank=0)["argv"])
    assert "--headless" not in common_argv(svc(rank=1)["argv"])
    assert service_digest(svc(rank=0)) == service_digest(svc(rank=3, addr="10.0.0.9"))


def test_rank_0s_bindto_preload_and_interfaces_leave_the_digest_alone():
    # what the e2e found on the native launch: only rank 0 binds a listener (the master port)
    head = svc(env={"LD_PRELOAD": "/opt/llmb/lib/llmb-bindto.so", "LLMB_BIND_ADDRESS": "10.0.0.1",
                    "LLMB_BIND_PORTS": "29501", "TP_SOCKET_IFNAME": "eth0"})
    assert service_digest(head) == service_digest(svc(rank=1, addr="10.0.0.2", env={"TP_SOCKET_IFNAME": "eth1"}))
    assert service_digest(svc(env={"LD_PRELOAD": "/opt/other.so"})) != service_digest(svc())


def test_what_the_engine_compiles_changes_the_digest():
    base = service_digest(svc())
    assert service_digest(svc(extra=["--max-model-len", "8192"])) != base
    assert service_digest(svc(env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})) != base
    assert service_digest(dict(svc(), image="vllm:0.26.0")) != base


def test_cold_hosts_take_the_warm_one():
    st = {"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": "cold"}, "n3": {"llmb-vllm": "cold"}}
    p = peer_plan(st, plans(3))
    assert set(p["receivers"]) == {"n2", "n3"}
    assert p["receivers"]["n2"]["llmb-vllm"]["source"] == "n1"
    assert p["receivers"]["n2"]["llmb-vllm"]["digest"] == service_digest(svc())
    assert p["senders"] == {"n1": ["llmb-vllm"]}


def test_senders_are_spread_and_the_seed_goes_first():
    st = {"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": "warm"}, "n3": {"llmb-vllm": "cold"},
          "n4": {"llmb-vllm": "cold"}, "n5": {"llmb-vllm": "cold"}}
    p = peer_plan(st, plans(5))
    src = [p["receivers"][h]["llmb-vllm"]["source"] for h in ("n3", "n4", "n5")]
    assert src == ["n1", "n2", "n1"]
    p = peer_plan(st, plans(5), seed="n2")
    assert [p["receivers"][h]["llmb-vllm"]["source"] for h in ("n3", "n4", "n5")] == ["n2", "n1", "n2"]


def test_a_peer_copy_is_never_a_source_and_other_plans_are_not_mixed():
    st = {"n1": {"llmb-vllm": "peer"}, "n2": {"llmb-vllm": "cold"}}
    assert peer_plan(st, plans(2)) == {"receivers": {}, "senders": {}}
    pl = plans(2)
    pl["n1"]["services"][0]["argv"] += ["--max-model-len", "8192"]
    st = {"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": "cold"}}
    assert peer_plan(st, pl) == {"receivers": {}, "senders": {}}


def test_converged_run_and_the_knob_off_plan_nothing():
    warm = {"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": "peer"}}
    assert peer_plan(warm, plans(2)) == {"receivers": {}, "senders": {}}
    st = {"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": "cold"}}
    assert peer_plan(st, plans(2), enabled=False) == {"receivers": {}, "senders": {}}


def test_only_the_same_service_name():
    pl = plans(2)
    pl["n2"]["services"][0]["name"] = "llmb-sglang"
    st = {"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-sglang": "cold"}}
    assert peer_plan(st, pl) == {"receivers": {}, "senders": {}}


@pytest.mark.parametrize("states, plans_, seed, word", [
    ({"n1": {"llmb-vllm": "hot"}}, plans(1), None, "hot"),
    ({"n1": ["warm"]}, plans(1), None, "n1"),
    ({}, {"n1": {"services": "x"}}, None, "services"),
    ({}, plans(1), "n9", "n9"),
])
def test_bad_input_names_the_host_and_value(states, plans_, seed, word):
    with pytest.raises(PeerPlanError, match=word):
        peer_plan(states, plans_, seed=seed)


def test_a_start_is_as_cold_as_its_coldest_node():
    """The 2x H200 peer run: node1 (rank 0, the health check) warm, node2 rebuilt and filled from node1: the
    group's start is a peer start; any cold node makes it cold; a service only some hosts run, or a state
    not known, is its own."""
    from llmbctl.compilecache import group_states

    assert group_states({"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": "peer"}}) == \
        {"n1": {"llmb-vllm": "peer"}, "n2": {"llmb-vllm": "peer"}}
    assert group_states({"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": "peer"}, "n3": {"llmb-vllm": "cold"}})["n1"] \
        == {"llmb-vllm": "cold"}
    assert group_states({"n1": {"llmb-vllm": "warm", "router": "cold"}, "n2": {"llmb-vllm": "warm"}, "n3": {}}) == \
        {"n1": {"llmb-vllm": "warm", "router": "cold"}, "n2": {"llmb-vllm": "warm"}, "n3": {}}
    assert group_states({"n1": {"llmb-vllm": "warm"}, "n2": {"llmb-vllm": None}})["n1"] == {"llmb-vllm": "warm"}
    with pytest.raises(PeerPlanError, match="n2: compile cache state"):
        group_states({"n1": {}, "n2": ["cold"]})
