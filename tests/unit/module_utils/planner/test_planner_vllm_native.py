"""vLLM's own multi-node launch (issue 23): TP x PP across nodes as --nnodes/--node-rank/--master-addr/
--master-port with --headless on every node but rank 0; Ray only where the inventory asks
(llmb_vllm_multinode: ray) or the release has no native launch; the master port checked and confined
like the other ports of a plan."""

from __future__ import annotations

import shutil

import pytest
from llmbctl import deployment as D
from llmbctl.planner import PlanError, plan_inventory
from planner_helpers import REPO, load_inventory


def _plan(name: str = "sim", data: str | None = None, **overrides):
    hv, groups = load_inventory(name)
    for host in hv.values():
        host.pop("llmb_vllm_multinode", None)  # the sample keeps Ray; these tests choose
        host.update(overrides)
    return plan_inventory(hv, groups, data or str(REPO / "data"))


def _hosts(planned) -> dict[str, dict]:
    return {h["host"]: h for h in planned.to_list()}


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("version", ["0.19.1", "0.23.0", "0.26.0", "0.32.0", "0.33.0"])
def test_tp_pp_across_nodes_plans_the_native_launch_by_default_where_the_release_has_it(version):
    hosts = _hosts(_plan(llmb_engine_version=version))
    (head,), (other,) = hosts["node1"]["services"], hosts["node2"]["services"]
    assert not any(s["name"] == "llmb-ray" for h in hosts.values() for s in h["services"])
    for svc in (head, other):
        argv = svc["argv"]
        assert (_value(argv, "--nnodes"), _value(argv, "--master-addr"), _value(argv, "--master-port")) == \
            ("2", "172.30.0.11", "29501")
        assert (_value(argv, "--tensor-parallel-size"), _value(argv, "--pipeline-parallel-size")) == ("8", "2")
        assert "--distributed-executor-backend" not in argv and "RAY_ADDRESS" not in svc["env"]
    assert (_value(head["argv"], "--node-rank"), _value(other["argv"], "--node-rank")) == ("0", "1")
    assert "--headless" not in head["argv"] and "--headless" in other["argv"]
    # rank 0 first, ready once its store listens; the headless node after it
    assert (head["role"], head["order"], other["role"], other["order"]) == ("node-rank-0", 10, "node-headless", 20)
    assert head["ready"]["type"] == "tcp" and head["ready"]["port"] == 29501
    assert other["depends_on"] == ["node1/llmb-vllm"] and other["ready"]["type"] == "started"
    # only rank 0 serves the API
    assert head["health"] and head["api"] and not other["health"] and not other["api"]


def test_the_master_port_is_a_port_of_the_plan_confined_to_the_cluster_address():
    hosts = _hosts(_plan(llmb_vllm_master_port=29600))
    (head,) = hosts["node1"]["services"]
    assert {"port": 29600, "purpose": "vllm-master"} in head["ports"]
    # the torch store binds every interface: the llmb-bindto preload keeps it on the cluster address
    assert head["env"]["LLMB_BIND_ADDRESS"] == "172.30.0.11" and head["env"]["LLMB_BIND_PORTS"] == "29600"
    assert "LLMB_BIND_PORTS" not in hosts["node2"]["services"][0]["env"]
    hv, groups = load_inventory("sim")
    for h in hv.values():
        h.pop("llmb_vllm_multinode", None)
    doc = D.resolve(hv, groups)
    assert doc["ports"]["vllm_master"] == 29501


def test_a_master_port_equal_to_another_port_is_refused_naming_both():
    with pytest.raises(PlanError) as err:
        _plan(llmb_vllm_master_port=8000)
    text = err.value.report()
    assert "port 8000 is used twice on node1" in text and "llmb_vllm_master_port=8000" in text


def test_ray_where_the_inventory_asks_for_it():
    hosts = _hosts(_plan(llmb_vllm_multinode="ray"))
    names = {h: [s["name"] for s in hp["services"]] for h, hp in hosts.items()}
    assert names == {"node1": ["llmb-ray", "llmb-vllm"], "node2": ["llmb-ray"]}
    api = hosts["node1"]["services"][1]
    assert _value(api["argv"], "--distributed-executor-backend") == "ray" and "--nnodes" not in api["argv"]


def test_the_seed_samples_that_use_ray_keep_ray():
    for name in ("h800", "mi300x-2x8", "sim"):
        hv, groups = load_inventory(name)
        planned = plan_inventory(hv, groups)
        roles = {s["role"] for h in planned.to_list() for s in h["services"]}
        assert {"ray-head", "ray-worker"} <= roles, name


@pytest.fixture
def data_without_native(tmp_path):
    """data/ whose vLLM 0.19.1 set lacks --nnodes (a release before vLLM's own multi-node launch)."""
    data = tmp_path / "data"
    shutil.copytree(REPO / "data", data)
    path = data / "engines" / "vllm-0.19.1.yml"
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith('"--nnodes"')]
    path.write_text("\n".join(lines) + "\n")
    return str(data)


def test_without_a_native_launch_the_default_is_ray(data_without_native):
    hosts = _hosts(_plan(data=data_without_native, llmb_engine_version="0.19.1"))
    assert [s["name"] for s in hosts["node1"]["services"]] == ["llmb-ray", "llmb-vllm"]


def test_native_asked_of_a_release_without_it_is_refused_with_the_reason(data_without_native):
    with pytest.raises(PlanError) as err:
        _plan(data=data_without_native, llmb_engine_version="0.19.1", llmb_vllm_multinode="native")
    (problem,) = err.value.problems
    assert "vllm 0.19.1 has no multi-node launch of its own: its flag set lacks --nnodes" in problem.message
    assert "llmb_vllm_multinode: ray" in problem.fix


def test_the_ranks_split_evenly_over_the_nodes():
    # TP 8 over 2 nodes of 8 devices: 4 ranks on each (Ray's layout wants whole nodes)
    planned = _plan(llmb_pipeline_parallel=1)
    assert _value(_hosts(planned)["node2"]["services"][0]["argv"], "--tensor-parallel-size") == "8"
    assert "native: 2 node(s), TP 8 x PP 1 x DP 1, 4 of 8 devices per node" in planned.notes
    with pytest.raises(PlanError) as err:
        _plan(llmb_tensor_parallel=3, llmb_pipeline_parallel=1, llmb_decode_context_parallel=1)
    assert "cannot be split evenly over 2 nodes" in err.value.report()


def test_an_unknown_multinode_value_is_refused_naming_the_variable():
    with pytest.raises(PlanError) as err:
        _plan(llmb_vllm_multinode="mpi")
    assert "llmb_vllm_multinode" in err.value.report()


def test_the_native_group_restarts_together_the_headless_node_waiting_for_the_master_port():
    """llmb.serve.group_view from the deployment document: one group (llmb-group.target) whose head
    is node rank 0; the headless node's unit waits for the head's master port before it starts."""
    from llmb.serve import group_view

    hv, groups = load_inventory("sim")
    for h in hv.values():
        h.pop("llmb_vllm_multinode", None)
    doc = D.resolve(hv, groups)
    head = group_view(doc, "node1", ["llmb-group"], "/etc/llmb/ssh_config")
    member = group_view(doc, "node2", ["llmb-group"], "/etc/llmb/ssh_config")
    assert head["is_head"] and head["members"] == ["172.30.0.12"] and head["units"] == ["llmb-vllm"]
    assert not member["is_head"] and member["head_address"] == "172.30.0.11"
    assert member["waits"] == {"llmb-vllm": [["172.30.0.11", 29501]]}
