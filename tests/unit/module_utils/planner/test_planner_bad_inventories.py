"""Bad inventories fail in preflight, before any host is contacted, saying what is wrong and the fix.

Each case starts from a sample inventory, breaks one thing, and checks the problem's check id,
that the message names what is wrong (with the numbers where there are numbers), and that a fix
is given. The planner never opens a connection: these inventories point at TEST-NET addresses.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest
import yaml
from llmb.planner import PlanError, check, plan_inventory
from planner_helpers import REPO, load_inventory


def set_all(**kv):
    def _apply(hv, groups):
        for host in hv.values():
            host.update(kv)

    return _apply


def set_host(host, **kv):
    def _apply(hv, groups):
        hv[host].update(kv)

    return _apply


def drop(key):
    def _apply(hv, groups):
        for host in hv.values():
            host.pop(key, None)

    return _apply


def chain(*fns):
    def _apply(hv, groups):
        for fn in fns:
            fn(hv, groups)

    return _apply


def no_group(hv, groups):
    groups.pop("accel_nodes")


CASES = [
    # id, inventory, change, check, substrings of the message
    (
        "tp-larger-than-devices",
        "h100",
        set_all(llmb_tensor_parallel=16),
        "parallelism",
        ["TP x PP = 16 x 1 = 16 devices", "1 node x 8"],
    ),
    (
        "dcp-not-dividing-tp",
        "h200",
        set_all(llmb_decode_context_parallel=3),
        "parallelism",
        ["DCP 3 does not divide TP 8"],
    ),
    (
        "loopback-dp-address-two-nodes",
        "h800-dp-ep",
        set_host("gpu-h800-01", llmb_node_ip="127.0.0.1"),
        "network",
        ["loopback address 127.0.0.1", "--data-parallel-address"],
    ),
    (
        "loopback-sglang-master",
        "h200-sglang",
        set_host("gpu-h200-01", llmb_node_ip="localhost"),
        "network",
        ["--dist-init-addr"],
    ),
    ("missing-model", "h100", drop("llmb_model"), "required", ["llmb_model is not set"]),
    ("unknown-model", "h100", set_all(llmb_model="kimi-k3"), "model", ["data/models/kimi-k3.yml"]),
    (
        "unknown-platform",
        "h100",
        set_all(llmb_platform="h900-hgx8"),
        "platform",
        ["unknown platform 'h900-hgx8'"],
    ),
    (
        "instruct-fp8-does-not-fit-one-h100-node",
        "h100",
        set_all(llmb_model="kimi-k2-instruct"),
        "memory-fit",
        ["1,029.0 GB of weights", "TP 8 x PP 1 = 8 devices", "128.6 GB per device", "x 0.95"],
    ),
    ("port-collision-api-and-ray", "h800", set_all(llmb_api_port=6379), "ports", ["port 6379 is used twice"]),
    ("port-out-of-range", "h100", set_all(llmb_api_port=70000), "ports", ["out of range"]),
    (
        "unknown-engine-flag",
        "h100",
        set_all(llmb_engine_args={"enable-turbo-mode": True}),
        "engine-flag-unknown",
        ["--enable-turbo-mode is not a flag of vllm 0.19.1", "unrecognized arguments"],
    ),
    (
        "removed-engine-flag",
        "h100",
        set_all(llmb_engine_extra_args=["--enable-reasoning"]),
        "engine-flag-removed",
        ["--enable-reasoning was removed"],
    ),
    (
        "planner-owned-flag",
        "h100",
        set_all(llmb_engine_args={"tensor-parallel-size": 4}),
        "engine-flag-owned",
        ["--tensor-parallel-size is set by the planner"],
    ),
    (
        "flag-value-type",
        "h100",
        set_all(llmb_engine_args={"max-num-seqs": "many"}),
        "engine-flag-value",
        ["--max-num-seqs", "an integer"],
    ),
    (
        "string-where-int",
        "h100",
        set_all(llmb_tensor_parallel="8"),
        "type",
        ["llmb_tensor_parallel must be an integer"],
    ),
    ("unknown-engine", "h100", set_all(llmb_engine="tgi"), "choice", ["llmb_engine has an unknown value"]),
    (
        "engine-wrong-vendor",
        "h100",
        set_all(llmb_engine="vllm-ascend", llmb_engine_version="0.20.2rc1", llmb_install="container"),
        "engine-platform",
        ["vllm-ascend does not run on h100-hgx8"],
    ),
    ("ascend-host-install", "a3", set_all(llmb_install="host"), "install", ["container image only"]),
    ("no-accel-nodes-group", "h100", no_group, "hosts", ["no hosts in group accel_nodes"]),
    ("head-not-in-group", "h800", set_all(llmb_head="gpu-h800-99"), "head", ["'gpu-h800-99'"]),
    (
        "no-cluster-iface-two-nodes",
        "h800",
        drop("llmb_cluster_iface"),
        "network",
        ["llmb_cluster_iface is required with 2 nodes"],
    ),
    ("unknown-preset", "h100", set_all(llmb_preset="turbo"), "preset", ["unknown tuning preset 'turbo'"]),
    (
        "engine-version-without-flag-set",
        "h100",
        set_all(llmb_engine_version="0.8.5.post1"),
        "engine-version",
        ["no flag set for vllm 0.8.5.post1"],
    ),
    (
        "dp-not-spread-evenly",
        "h800-dp-ep",
        set_all(llmb_data_parallel=15, llmb_data_parallel_local=None),
        "parallelism",
        ["DP 15 cannot be spread evenly over 2 nodes"],
    ),
    (
        "dp-local-too-many-devices",
        "h800-dp-ep",
        set_all(llmb_tensor_parallel=2),
        "parallelism",
        ["TP x PP x DP-local = 2 x 1 x 8 = 16 devices"],
    ),
    (
        "tp-pp-leaves-a-node-idle",
        "h800",
        set_all(llmb_pipeline_parallel=1, llmb_decode_context_parallel=1),
        "parallelism",
        ["fill 1 node(s) of 8, but accel_nodes has 2 hosts"],
    ),
    (
        "value-differs-between-nodes",
        "h800",
        set_host("gpu-h800-02", llmb_model_dir="/other"),
        "consistency",
        ["llmb_model_dir differs between gpu-h800-01 and gpu-h800-02"],
    ),
    (
        "same-address-twice",
        "h800",
        set_host("gpu-h800-02", llmb_node_ip="192.168.100.11"),
        "addresses",
        ["same address"],
    ),
    (
        "parser-unknown-to-engine",
        "h200-trtllm",
        set_all(llmb_engine_args={"reasoning_parser": "kimi_k2"}),
        "engine-parser",
        ["--reasoning_parser kimi_k2 is not a parser of trtllm 1.1.0"],
    ),
    (
        "trtllm-data-parallel",
        "h200-trtllm",
        set_all(llmb_data_parallel=2),
        "parallelism",
        ["trtllm-serve has no data-parallel flag"],
    ),
    (
        "container-option-typo",
        "a3",
        set_all(llmb_container_options={"shmsize": "1g"}),
        "container",
        ["unknown key 'shmsize'"],
    ),
    (
        "ray-over-containers",
        "h800",
        set_all(llmb_install="container"),
        "install",
        ["Ray is planned for host installs only"],
    ),
    (
        "ep-size-for-vllm",
        "h100",
        set_all(llmb_expert_parallel_size=8),
        "parallelism",
        ["vLLM derives the expert parallel size"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_inventory_is_refused_with_what_and_fix(case):
    _, name, change, check_id, needles = case
    hv, groups = load_inventory(name)
    for host in hv.values():  # prove nothing is contacted: addresses nobody answers on
        if (
            not str(host.get("llmb_node_ip", "")).startswith("127.")
            and host.get("llmb_node_ip") != "localhost"
        ):
            host["ansible_host"] = "192.0.2.1"
    change(hv, groups)
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(REPO / "data"))
    matching = [p for p in err.value.problems if p.check == check_id]
    assert matching, f"no {check_id} problem in:\n{err.value.report()}"
    text = "\n".join(p.message for p in matching)
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    assert all(p.fix for p in matching), err.value.report()
    report = err.value.report()
    assert "no host was contacted" in report and "fix:" in report


def test_at_least_fifteen_cases():
    assert len(CASES) >= 15


def test_every_problem_is_listed_at_once():
    hv, groups = load_inventory("h100")
    for host in hv.values():
        host.update(
            llmb_engine_args={"enable-turbo-mode": True, "tensor-parallel-size": 2},
            llmb_model="kimi-k2-instruct",
        )
    problems = check(hv, groups, str(REPO / "data"))
    assert {"engine-flag-unknown", "engine-flag-owned", "memory-fit"} <= {p.check for p in problems}


def test_planning_opens_no_socket(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the planner tried to open a network connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for name in ("h800", "h200-trtllm", "a3"):
        hv, groups = load_inventory(name)
        plan_inventory(hv, groups, str(REPO / "data"))


@pytest.fixture
def data_copy(tmp_path):
    target = tmp_path / "data"
    shutil.copytree(REPO / "data", target)
    return target


def _edit_model(data_dir, name, fn):
    path = data_dir / "models" / f"{name}.yml"
    doc = yaml.safe_load(path.read_text())
    fn(doc)
    path.write_text(yaml.safe_dump(doc))


def test_engine_without_kimi_k2_needs_the_model_type_patch(data_copy):
    _edit_model(data_copy, "kimi-k2-instruct", lambda d: d["config_patches"].pop("trtllm"))
    hv, groups = load_inventory("h200-trtllm")
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(data_copy))
    (problem,) = [p for p in err.value.problems if p.check == "model-type"]
    assert "does not know model_type 'kimi_k2'" in problem.message and "deepseek_v3" in problem.fix


def test_ascend_needs_the_quantization_targets_patch(data_copy):
    _edit_model(data_copy, "kimi-k2-thinking", lambda d: d["config_patches"].pop("vllm-ascend"))
    hv, groups = load_inventory("a3")
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(data_copy))
    (problem,) = [p for p in err.value.problems if p.check == "model-config"]
    assert "quantization_config.config_groups.group_0.targets" in problem.found


def test_launch_plan_check_exits_1_with_the_report(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "h100", inv)
    serve = inv / "group_vars" / "all" / "serve.yml"
    serve.write_text(serve.read_text().replace("llmb_tensor_parallel: 8", "llmb_tensor_parallel: 16"))
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "launch-plan"), "-i", str(inv), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no host was contacted" in proc.stderr and "[parallelism]" in proc.stderr and "fix:" in proc.stderr
