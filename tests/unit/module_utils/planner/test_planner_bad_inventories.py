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
from llmbctl.planner import PlanError, check, plan_inventory
from llmbctl.planner.inventory import Vaulted
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
    ("unknown-model", "h100", set_all(llmb_model="kimi-k9"), "model", ["data/models/kimi-k9.yml"]),
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
    ("port-out-of-range", "h100", set_all(llmb_api_port=70000), "range", ["llmb_api_port is 70000, out of range"]),
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
        set_all(llmb_tensor_parallel="8 GPUs"),
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
        ["llmb_engine_version: 0.8.5.post1 is not shipped; shipped for vllm: "],
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
        "nvidia-gpus-on-amd",
        "mi300x",
        set_all(llmb_container_nvidia_gpus="cdi"),
        "container",
        ["llmb_container_nvidia_gpus: cdi is for NVIDIA platforms"],
    ),
    (
        "nvidia-gpus-twice",
        "h200-trtllm",
        set_all(llmb_container_nvidia_gpus="devices", llmb_container_options={"gpus": "all"}),
        "container",
        ["llmb_container_options.gpus (all) asks for --gpus"],
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


def test_launch_plan_check_exits_2_with_the_report(tmp_path):
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
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no host was contacted" in proc.stderr and "[parallelism]" in proc.stderr and "fix:" in proc.stderr


# --------------------------------------------------------------------------------------------
# Every input checked (issue 12): one named bad inventory per row, the check it must fail, the
# exact fragment the problem's text must hold, and the variable it must name.


def set_env(**env):
    return set_all(llmb_engine_env=env)


def on_host_only(host, **kv):
    """Set variables in one host's own vars (hosts.yml / host_vars): returns the host_set."""

    def _apply(hv, groups):
        hv[host].update(kv)
        return {host: sorted(kv)}

    return _apply


def args(**kv):
    return set_all(llmb_engine_args={k.replace("_", "-"): v for k, v in kv.items()})


def extra(*tokens):
    return set_all(llmb_engine_extra_args=list(tokens))


class _AnsibleTaggedFloat(float):
    """Stands in for the tagged float Ansible hands over (its class name must never be shown)."""


NAN, INF = float("nan"), float("inf")

INPUT_CASES = [
    # id, inventory, change, check, fragment of the problem's text, variable it names
    # injection: control characters anywhere, env keys
    ("newline-in-extra-arg", "h100", extra("--max-model-len", "2048\nExecStartPre=/bin/sh"), "characters",
     "contains the control character '\\n'", "llmb_engine_extra_args[1]"),
    ("newline-in-served-name", "h100", set_all(llmb_served_model_name="kimi\nExecStart=/bin/sh"), "characters",
     "line feed, U+000A", "llmb_served_model_name"),
    ("newline-in-env-key", "h100", set_env(**{"A\nB": "1"}), "characters", "key 'A\\nB'", "llmb_engine_env"),
    ("space-in-env-key", "h100", set_env(**{"MY VAR": "1"}), "format",
     "is not an environment variable name", "llmb_engine_env"),
    ("env-key-starts-with-digit", "h100", set_env(**{"1X": "1"}), "format", "^[A-Za-z_][A-Za-z0-9_]*$",
     "llmb_engine_env"),
    ("tab-in-env-value", "h100", set_env(X="a\tb"), "characters", "tab, U+0009", "llmb_engine_env"),
    ("newline-in-ssh-mesh-dir", "h200-trtllm", set_all(llmb_ssh_mesh_dir="/etc/llmb/m\nrm -rf /"), "characters",
     "control character", "llmb_ssh_mesh_dir"),
    ("shell-in-ssh-mesh-dir", "h200-trtllm", set_all(llmb_ssh_mesh_dir="/etc/llmb/m;reboot"), "format",
     "is not an absolute, normalized path", "llmb_ssh_mesh_dir"),
    ("escape-in-engine-arg-value", "h100", args(chat_template="a\x1bb"), "characters", "escape, U+001B",
     "llmb_engine_args"),
    ("newline-in-engine-arg-key", "h100", set_all(llmb_engine_args={"max-model-len\n": 5}), "characters",
     "control character", "llmb_engine_args"),
    ("cr-in-container-mount", "a3", set_all(llmb_container_mounts=["/a:/b\r"]), "characters",
     "carriage return, U+000D", "llmb_container_mounts[0]"),
    ("line-separator-in-served-name", "h100", set_all(llmb_served_model_name="a\u2028b"), "characters",
     "control character", "llmb_served_model_name"),
    ("delete-in-cluster-iface", "h800", set_all(llmb_cluster_iface="eth0\x7f"), "characters",
     "control character", "llmb_cluster_iface"),
    # vault
    ("vaulted-served-name-no-secret", "h100", set_all(llmb_served_model_name=Vaulted("t1")), "vault",
     "is vaulted and no vault secret was given", "llmb_served_model_name"),
    ("vaulted-model-dir-wrong-secret", "h100", set_all(llmb_model_dir=Vaulted("t2", error="Decryption failed")),
     "vault", "the vault secret given does not open it", "llmb_model_dir"),
    # numbers: memory fractions, parallelism, ports, timeouts
    ("gpu-memory-utilization-zero", "h100", args(gpu_memory_utilization=0), "engine-flag-value",
     "needs a fraction of device memory greater than 0 and at most 1", "llmb_engine_args"),
    ("gpu-memory-utilization-nan", "h100", args(gpu_memory_utilization=NAN), "range", "not a finite number",
     "llmb_engine_args"),
    ("gpu-memory-utilization-two", "h100", args(gpu_memory_utilization=2.0), "engine-flag-value",
     "greater than 0 and at most 1", "llmb_engine_args"),
    ("gpu-memory-utilization-inf", "h100", args(gpu_memory_utilization=INF), "range", "not a finite number",
     "llmb_engine_args"),
    ("gpu-memory-utilization-negative", "h100", args(gpu_memory_utilization=-0.5), "engine-flag-value",
     "greater than 0 and at most 1", "llmb_engine_args"),
    ("gpu-memory-utilization-text-nan", "h100", args(gpu_memory_utilization="nan"), "engine-flag-value",
     "needs a finite number", "llmb_engine_args"),
    ("mem-fraction-static-above-one", "h200-sglang", args(mem_fraction_static=1.5), "engine-flag-value",
     "greater than 0 and at most 1", "llmb_engine_args"),
    ("tensor-parallel-zero", "h100", set_all(llmb_tensor_parallel=0), "range", "0 is not 'unset'",
     "llmb_tensor_parallel"),
    ("tensor-parallel-negative", "h100", set_all(llmb_tensor_parallel=-8), "range", "is -8, out of range",
     "llmb_tensor_parallel"),
    ("pipeline-parallel-zero", "h800", set_all(llmb_pipeline_parallel=0), "range", "from 1 to 65536",
     "llmb_pipeline_parallel"),
    ("data-parallel-huge", "h800-dp-ep", set_all(llmb_data_parallel=10**12), "range", "out of range",
     "llmb_data_parallel"),
    ("tensor-parallel-float", "h100", set_all(llmb_tensor_parallel=8.0), "type", "found:    8.0 (float)",
     "llmb_tensor_parallel"),
    ("tensor-parallel-tagged-float", "h100", set_all(llmb_tensor_parallel=_AnsibleTaggedFloat(2.0)), "type",
     "2.0 (float)", "llmb_tensor_parallel"),
    ("tensor-parallel-bool", "h100", set_all(llmb_tensor_parallel=True), "type", "True (bool)",
     "llmb_tensor_parallel"),
    ("tensor-parallel-nan", "h100", set_all(llmb_tensor_parallel=NAN), "range", "not a finite number",
     "llmb_tensor_parallel"),
    ("api-port-zero", "h100", set_all(llmb_api_port=0), "range", "from 1 to 65535", "llmb_api_port"),
    ("ray-port-text", "h800", set_all(llmb_ray_port="63 79"), "type", "'63 79' does not convert to an integer",
     "llmb_ray_port"),
    ("health-timeout-zero", "h100", set_all(llmb_health_timeout_s=0), "range", "is 0, out of range",
     "llmb_health_timeout_s"),
    ("ready-timeout-negative", "h800", set_all(llmb_ready_timeout_s=-5), "range", "out of range",
     "llmb_ready_timeout_s"),
    ("health-timeout-huge", "h100", set_all(llmb_health_timeout_s=10**12), "range", "from 1 to 604800",
     "llmb_health_timeout_s"),
    ("sshd-port-float", "h200-trtllm", set_all(llmb_sshd_port=2233.5), "type", "2233.5 (float)",
     "llmb_sshd_port"),
    # planner-owned flags, any spelling, any route
    ("unchecked-smuggles-tp", "h100",
     set_all(llmb_engine_flags_unchecked=["--tensor-parallel-size"], llmb_engine_args={"tensor-parallel-size": 4}),
     "engine-flag-owned", "may not be given in llmb_engine_flags_unchecked", "llmb_tensor_parallel"),
    ("unchecked-smuggles-tp-underscore", "h100", set_all(llmb_engine_flags_unchecked=["tensor_parallel_size"]),
     "engine-flag-owned", "which the planner sets from the inventory", "llmb_engine_flags_unchecked"),
    ("extra-args-short-tp", "h100", extra("-tp", "4"), "engine-flag-owned",
     "--tensor-parallel-size is set by the planner", "llmb_engine_extra_args"),
    ("extra-args-underscore-tp", "h100", extra("--tensor_parallel_size", "4"), "engine-flag-owned",
     "--tensor-parallel-size is set by the planner", "llmb_engine_extra_args"),
    ("extra-args-tp-equals", "h100", extra("--tensor-parallel-size=8"), "engine-flag-owned",
     "--tensor-parallel-size is set by the planner", "llmb_engine_extra_args"),
    ("sglang-unchecked-tp-size", "h200-sglang", set_all(llmb_engine_flags_unchecked=["--tp"]),
     "engine-flag-owned", "it is --tp-size", "llmb_engine_flags_unchecked"),
    ("trtllm-extra-args-tp-size", "h200-trtllm", extra("--tp_size", "4"), "engine-flag-owned",
     "--tp_size is set by the planner", "llmb_engine_extra_args"),
    ("unchecked-known-flag-bypasses-fit", "h100",
     set_all(llmb_engine_flags_unchecked=["--gpu-memory-utilization"], llmb_engine_args={"gpu-memory-utilization": 2.0}),
     "engine-flag-value", "is for flags the pinned flag set lacks", "llmb_engine_flags_unchecked"),
    ("unchecked-with-value", "h100", set_all(llmb_engine_flags_unchecked=["--foo=1"]), "format",
     "is not a flag name", "llmb_engine_flags_unchecked[0]"),
    ("disable-log-requests-false", "h800", args(disable_log_requests=False), "engine-flag-value",
     "to turn it on write enable-log-requests: true (renders --enable-log-requests)", "llmb_engine_args"),
    # lists and mappings where one value belongs
    ("list-for-scalar-flag", "h100", args(kv_cache_dtype=["fp8", "auto"]), "engine-flag-value",
     "one value, not a list", "llmb_engine_args"),
    ("mapping-for-int-flag", "h100", args(max_model_len={"a": 1}), "engine-flag-value",
     "one value, not a mapping", "llmb_engine_args"),
    ("nested-list-in-extra-args", "h100", extra(["--max-model-len", "2048"]), "type",
     "must be a string or a number", "llmb_engine_extra_args[0]"),
    ("bool-in-extra-args", "h100", extra(True), "type", "True (bool)", "llmb_engine_extra_args[0]"),
    ("list-as-env-value", "h100", set_env(X=[1, 2]), "type", "must be a string or a number",
     "llmb_engine_env"),
    ("nested-list-for-list-flag", "h100", args(cudagraph_capture_sizes=[[1]]), "engine-flag-value",
     "a list of single values", "llmb_engine_args"),
    ("switch-given-a-list", "h100", args(enable_chunked_prefill=["x"]), "engine-flag-value",
     "must be true or false", "llmb_engine_args"),
    # unknown and misplaced variables
    ("misspelled-tensor-parallel", "h100", set_all(llmb_tensor_paralel=8), "unknown-variable",
     "did you mean llmb_tensor_parallel?", "llmb_tensor_paralel"),
    ("misspelled-engine-args", "h100", set_all(llmb_enigne_args={"max-model-len": 4}), "unknown-variable",
     "did you mean llmb_engine_args?", "llmb_enigne_args"),
    ("misspelled-weights-strategy", "h100", set_all(weights_stratgy="relay"), "unknown-variable",
     "did you mean weights_strategy?", "weights_stratgy"),
    ("misspelled-serve-timeout", "h100", set_all(serve_helth_timeout_s=10), "unknown-variable",
     "did you mean serve_health_timeout_s?", "serve_helth_timeout_s"),
    ("unknown-ssh-mesh-name", "h800", set_all(ssh_mesh_prot=22), "unknown-variable", "did you mean ssh_mesh_port?",
     "ssh_mesh_prot"),
    ("head-set-on-one-host", "h800", on_host_only("gpu-h800-02", llmb_head="gpu-h800-02"), "scope",
     "is set on host gpu-h800-02", "llmb_head"),
    ("model-dir-set-on-one-host", "h800", on_host_only("gpu-h800-01", llmb_model_dir="/data/m"), "scope",
     "but it is cluster-wide", "llmb_model_dir"),
    ("stage-int-as-text", "h100", set_all(weights_max_workers="eight"), "type", "'eight' (string)",
     "weights_max_workers"),
    ("stage-choice", "h100", set_all(weights_strategy="torrent"), "choice", "shared | each | relay",
     "weights_strategy"),
    ("stage-port-zero", "h100", set_all(weights_relay_port=0), "range", "from 1 to 65535", "weights_relay_port"),
    ("stage-bool-as-text", "h100", set_all(verify_fail="maybe"), "type", "must be true or false", "verify_fail"),
    ("stage-timeout-negative", "h100", set_all(ssh_mesh_check_timeout_s=-1), "range", "out of range",
     "ssh_mesh_check_timeout_s"),
    # formats: addresses, paths, names
    ("node-ip-not-an-address", "h800", set_host("gpu-h800-02", llmb_node_ip="not an address"), "format",
     "is not an IP address or an RFC 1123 host name", "llmb_node_ip"),
    ("ansible-host-not-an-address", "h100", set_all(ansible_host="bad host!"), "format",
     "ansible_host) is not an IP address", "llmb_node_ip"),
    ("model-dir-empty", "h100", set_all(llmb_model_dir=""), "format", "is not an absolute, normalized path",
     "llmb_model_dir"),
    ("model-dir-relative", "h100", set_all(llmb_model_dir="models/kimi"), "format", "found:    'models/kimi'",
     "llmb_model_dir"),
    ("model-dir-dotdot", "h100", set_all(llmb_model_dir="/data/../etc"), "format", "no '.' or '..' segments",
     "llmb_model_dir"),
    ("model-dir-space", "h100", set_all(llmb_model_dir="/data/my models"), "format", "normalized path",
     "llmb_model_dir"),
    ("served-name-dotdot", "h100", set_all(llmb_served_model_name="../etc/passwd"), "format",
     "is not a model name without whitespace", "llmb_served_model_name"),
    ("served-name-inner-dotdot", "h100", set_all(llmb_served_model_name="org/../x"), "format",
     "'.'/'..' segments", "llmb_served_model_name"),
    ("served-name-space", "h100", set_all(llmb_served_model_name="kimi k2"), "format", "without whitespace",
     "llmb_served_model_name"),
    ("container-name-space", "a3", set_all(llmb_container_name="llmb vllm"), "format",
     "[a-zA-Z0-9][a-zA-Z0-9_.-]*", "llmb_container_name"),
    ("container-name-leading-dash", "a3", set_all(llmb_container_name="-x"), "format", "Docker container name",
     "llmb_container_name"),
    ("container-image-space", "a3", set_all(llmb_container_image="repo/img:1 --privileged"), "format",
     "image reference", "llmb_container_image"),
    ("api-host-shell", "h100", set_all(llmb_api_host="0.0.0.0;reboot"), "format", "RFC 1123", "llmb_api_host"),
    ("cluster-iface-two-words", "h800", set_all(llmb_cluster_iface="eth0 eth1"), "format",
     "network interface name", "llmb_cluster_iface"),
    ("platform-path-escape", "h100", set_all(llmb_platform="../h100-hgx8"), "format", "a file name under data/",
     "llmb_platform"),
    ("preset-with-slash", "h100", set_all(llmb_preset="x/y"), "format", "a file name under data/", "llmb_preset"),
    ("engine-version-shell", "h100", set_all(llmb_engine_version="0.19.1 && id"), "format", "a release like",
     "llmb_engine_version"),
    ("config-dir-relative", "h100", set_all(llmb_config_dir="etc/llmb"), "format", "absolute", "llmb_config_dir"),
    ("venv-trailing-dot", "h100", set_all(llmb_engine_venv="/opt/llmb/./venv"), "format", "normalized",
     "llmb_engine_venv"),
    # types of whole values
    ("mount-not-a-string", "a3", set_all(llmb_container_mounts=[5]), "type", "5 (int)", "llmb_container_mounts[0]"),
    ("env-as-list", "h100", set_all(llmb_engine_env=["A=1"]), "type", "must be a mapping", "llmb_engine_env"),
    ("engine-args-as-list", "h100", set_all(llmb_engine_args=["--max-model-len", 4]), "type",
     "must be a mapping", "llmb_engine_args"),
    ("expert-parallel-as-text", "h100", set_all(llmb_expert_parallel="maybe"), "type", "'maybe' (string)",
     "llmb_expert_parallel"),
    ("install-unknown", "h100", set_all(llmb_install="bare-metal"), "choice", "host | container", "llmb_install"),
    ("nvidia-gpus-unknown", "h200-trtllm", set_all(llmb_container_nvidia_gpus="runtime"), "choice",
     "gpus | cdi | devices", "llmb_container_nvidia_gpus"),
    ("date-as-run-id", "h100", set_all(llmb_run_id=__import__("datetime").date(2026, 1, 2)), "type",
     "(date)", "llmb_run_id"),
]


def _problems_of(name, change):
    hv, groups = load_inventory(name)
    for host in hv.values():
        host["ansible_host"] = "192.0.2.1" if "llmb_node_ip" in host else host.get("ansible_host", "192.0.2.1")
    host_set = change(hv, groups)
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(REPO / "data"), host_set=host_set)
    return err.value


@pytest.mark.parametrize("case", INPUT_CASES, ids=[c[0] for c in INPUT_CASES])
def test_bad_input_names_the_variable_and_the_fix(case):
    _, name, change, check_id, fragment, variable = case
    err = _problems_of(name, change)
    matching = [p for p in err.problems if p.check == check_id]
    assert matching, f"no {check_id} problem in:\n{err.report()}"
    texts = [p.format() for p in matching]
    hit = [t for t in texts if fragment in t]
    assert hit, f"{fragment!r} not in:\n" + "\n".join(texts)
    assert any(variable in t for t in hit), f"{variable} not named in:\n" + "\n".join(hit)
    assert all(p.fix for p in matching), err.report()
    report = err.report()
    assert "no host was contacted" in report and "_Ansible" not in report


def test_at_least_sixty_named_bad_inputs():
    assert len(INPUT_CASES) >= 60
    assert len({c[0] for c in INPUT_CASES}) == len(INPUT_CASES)


def test_a_vaulted_value_is_never_shown():
    hv, groups = load_inventory("h800")
    hv["gpu-h800-02"]["llmb_served_model_name"] = Vaulted("a")
    hv["gpu-h800-01"]["llmb_served_model_name"] = Vaulted("b")
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(REPO / "data"))
    assert "<vaulted>" in err.value.report()
    assert {"vault"} <= {p.check for p in err.value.problems}


def test_group_level_problem_is_listed_once_without_a_host():
    hv, groups = load_inventory("h800")
    for host in hv.values():
        host["llmb_tensor_paralel"] = 8
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(REPO / "data"))
    (problem,) = [p for p in err.value.problems if p.check == "unknown-variable"]
    assert problem.host is None


def test_same_vaulted_ciphertext_on_every_host_is_one_value():
    hv, groups = load_inventory("h800")
    for host in hv.values():
        host["weights_hf_token"] = Vaulted("same-ciphertext")
    plan_inventory(hv, groups, str(REPO / "data"))  # opaque stage secret: fine, plan unchanged
