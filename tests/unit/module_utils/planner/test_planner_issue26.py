"""Plans the engines will accept (issue 26): each class of check, from a shape that passed before.

Every test starts from a sample inventory and writes the shape a new user would write; before the
check it planned (or planned wrong), now it plans right or is refused naming the variable.
"""

from __future__ import annotations

import pytest
from llmbctl.planner import PlanError, plan_inventory
from planner_helpers import REPO, load_inventory, memory_fit

DATA = str(REPO / "data")


def _plan(name: str, **overrides):
    hv, groups = load_inventory(name)
    for host in hv.values():
        host.update(overrides)
    return plan_inventory(hv, groups, DATA)


def _problems(name: str, **overrides):
    with pytest.raises(PlanError) as err:
        _plan(name, **overrides)
    return err.value.problems


# ------------------------------------------------ 6. values from the command line (-e key=value)
def test_extra_var_text_plans_like_the_integer():
    """`-e llmb_pipeline_parallel=2` gives the text '2': converted as the roles' argument specs do."""
    as_int = _plan("h800", llmb_pipeline_parallel=2).to_list()
    as_text = _plan("h800", llmb_pipeline_parallel="2").to_list()
    assert as_text == as_int
    assert any("--pipeline-parallel-size" in s["argv"] for h in as_text for s in h["services"])


def test_extra_var_text_that_does_not_convert_names_the_variable():
    (p,) = [p for p in _problems("h800", llmb_pipeline_parallel="two") if p.check == "type"]
    assert "llmb_pipeline_parallel" in p.message and "'two' does not convert" in p.fix


# ------------------------------------------------ 7. messages name the variable and the valid set
def test_unshipped_engine_version_names_the_variable_and_the_shipped_releases():
    (p,) = [p for p in _problems("h100", llmb_engine_version="0.99.9") if p.check == "engine-version"]
    assert p.message.startswith("llmb_engine_version: 0.99.9 is not shipped; shipped for vllm: ")
    assert "0.19.1" in p.message


# ------------------------------------------------ 3. memory per device under every parallelism
# Kimi-K2-Thinking (INT4): total_size_bytes 594,852,970,496; routed experts 384 x 60 layers x 3 x
# 7168 x 2048 = 1,014,686,023,680 params x (0.5 + 2/32) bytes = 570,760,888,320 bytes; the rest,
# 24,092,082,176 bytes, is attention, shared experts, dense MLP and embeddings in BF16.
THINKING_TOTAL = 594_852_970_496
THINKING_EXPERTS = 570_760_888_320
THINKING_REST = THINKING_TOTAL - THINKING_EXPERTS
GIB = 1024**3


def test_expert_bytes_from_the_profile_quantization():
    from llmbctl.catalog import Catalog
    from llmbctl.planner import memory

    model = Catalog(DATA).model("kimi-k2-thinking").raw
    experts, formula = memory.expert_bytes(model)
    assert experts == THINKING_EXPERTS
    assert "0.5625 bytes (int4)" in formula


def test_memory_tp_splits_everything():
    fit = memory_fit(_plan("h200", llmb_decode_context_parallel=1))  # seed 003: TP8 on H200
    assert fit.weights_bytes == THINKING_TOTAL / 8
    # 140.4 GiB x 0.9 - 69.25 GiB - 10 GiB = 47.11 GiB (seed 003 log: 46.80 GiB, +0.7%)
    assert round(fit.kv_available_bytes / GIB, 2) == 47.11


def test_memory_dcp_multiplies_tokens_not_weights():
    tp = memory_fit(_plan("h200", llmb_decode_context_parallel=1))
    dcp = memory_fit(_plan("h200"))
    assert dcp.weights_bytes == tp.weights_bytes
    assert dcp.kv_tokens == tp.kv_tokens * 8


def test_memory_tp_pp_splits_everything_by_both():
    planned = _plan("sim")
    fit = memory_fit(planned)
    assert fit.weight_shards == 16 and fit.weights_bytes == fit.total_bytes / 16


def test_memory_dp_ep_holds_the_replicated_part_whole():
    """Before: 594.9 GB / 16 = 34.62 GiB a rank; true: 24.09 GB + 570.76 GB / 16 = 55.66 GiB."""
    fit = memory_fit(_plan("h800-dp-ep"))
    assert fit.weights_bytes == THINKING_REST + THINKING_EXPERTS / 16
    assert round(fit.weights_bytes / GIB, 2) == 55.66
    assert fit.weights_bytes - THINKING_TOTAL / 16 > 20 * GIB  # the "about 20 GiB"


def test_memory_dp_ep_fp8_recipe_on_h800_is_refused():
    """Seed 002's DP16 + EP with the FP8 checkpoint on H800 passed with a warning; every rank holds
    14.07 GB + 1,014.93 GB / 16 = 72.18 GiB of weights, over 79.6 GiB x 0.85 = 67.70 GiB."""
    problems = _problems("h800-dp-ep", llmb_model="kimi-k2-instruct")
    (p,) = [p for p in problems if p.check == "memory-fit"]
    assert "(72.18 GiB)" in p.message and "67.70 GiB" in p.message


def test_memory_pd_groups_dp_attention_holds_attention_per_attention_group():
    """4P12D prefill TP32 / DP32 with DP attention: attention TP 1, so 14.07 GB + 1,014.93 GB / 32."""
    planned = _plan("h200-4p12d")
    (prefill,) = [n for n in planned.notes if "--context-length 131,072" in n and "memory" in n]
    assert "TP 32 / DP 32 attention" in prefill and "(42.64 GiB)" in prefill
    (decode,) = [n for n in planned.notes if "--context-length 2,176" in n and "memory" in n]
    assert "(22.95 GiB)" in decode


# ------------------------------------------------ 4. model limits
def test_context_over_the_model_limit_is_refused_with_the_numbers():
    """h800-dp-ep's Kimi-K2-Thinking allows 262,144; 300,000 passed before (the engine refuses)."""
    problems = _problems("h800-dp-ep", llmb_engine_args={"max-model-len": 300000})
    (p,) = [p for p in problems if p.check == "model-limit"]
    assert "--max-model-len 300,000 is over kimi-k2-thinking's context limit 262,144" in p.message
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in p.fix


def test_context_over_the_limit_in_a_pd_group_is_refused():
    hv, groups = load_inventory("h200-1p1d")
    for host in hv.values():
        dis = host["llmb_disaggregation"]
        host["llmb_disaggregation"] = {**dis, "decode": {**dis["decode"], "context_length": 400000}}
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA)
    (p,) = [p for p in err.value.problems if p.check == "model-limit"]
    assert p.message.startswith("the decode group") and "--context-length 400,000" in p.message


def test_tensor_parallel_not_dividing_the_heads_is_refused():
    """TP 12 on a 16-NPU A3 node: 64 heads / 12 passed before; vLLM refuses at start."""
    problems = _problems("a3", llmb_tensor_parallel=12)
    (p,) = [p for p in problems if p.check == "model-limit"]
    assert "TP 12 = 12 does not divide the 64 attention heads" in p.message
    assert "1, 2, 4, 8, 16, 32, 64" in p.expected


# ------------------------------------------------ 5. duplicate keys in the inventory's YAML
def _copy_inventory(tmp_path, name):
    import shutil

    dest = tmp_path / name
    shutil.copytree(REPO / "inventories" / name, dest)
    return dest


@pytest.mark.parametrize(
    "where, text, key",
    [
        ("group_vars/all/llmb.yml", "\nllmb_tensor_parallel: 4\nllmb_tensor_parallel: 8\n", "llmb_tensor_parallel"),
        ("host_vars/gpu-h100-01.yml", "llmb_node_ip: 10.0.0.1\nllmb_node_ip: 10.0.0.2\n", "llmb_node_ip"),
        ("hosts.yml", None, "all.children.accel_nodes.hosts.gpu-h100-01.ansible_host"),
    ],
)
def test_duplicate_key_is_refused_naming_file_line_and_key(tmp_path, where, text, key):
    import subprocess
    import sys

    inv = _copy_inventory(tmp_path, "h100")
    path = inv / where
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:  # a second ansible_host under the host in hosts.yml
        lines = path.read_text().splitlines()
        i = next(i for i, line in enumerate(lines) if "ansible_host:" in line)
        lines.insert(i + 1, lines[i])
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text((path.read_text() if path.exists() else "") + text)
    lines = path.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip().startswith(key.rsplit(".", 1)[-1] + ":")) + 1
    for extra in ([], ["--deployment"]):
        out = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "launch-plan"), "-i", str(inv), "--check", *extra],
            capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 2, out.stderr
        assert f"[yaml-duplicate-key] {path}:{last}: the key {key} is given twice" in out.stderr, out.stderr


# ------------------------------------------------ 2. addresses of either family
def _plan_v6(name: str, hosts: list[str], **overrides):
    hv, groups = load_inventory(name)
    for i, h in enumerate(hosts):
        hv[h]["llmb_node_ip"] = f"fd00::{11 + i}"
    for host in hv.values():
        host.update(overrides)
    return plan_inventory(hv, groups, DATA)


def _argv(planned, host, name):
    (h,) = [h for h in planned.to_list() if h["host"] == host]
    return next(s for s in h["services"] if s["name"] == name)


def test_host_port_brackets_ipv6_only():
    from llmb.ports import host_port, http_url

    assert host_port("fd00::11", 50000) == "[fd00::11]:50000"
    assert host_port("[fd00::11]", 1) == "[fd00::11]:1"
    assert host_port("10.0.0.1", 8000) == "10.0.0.1:8000"
    assert host_port("node-1.example", 8000) == "node-1.example:8000"
    assert http_url("fd00::11", 8000, "/v1") == "http://[fd00::11]:8000/v1"


def test_sglang_dist_init_addr_and_urls_bracket_ipv6():
    """`--dist-init-addr fd00::11:50000` was planned; SGLang 0.5.5 (server_args.py, configure_ipv6)
    reads "[fd00::11]:50000"."""
    planned = _plan_v6("h200-sglang", ["gpu-h200-01", "gpu-h200-02"])
    for host in ("gpu-h200-01", "gpu-h200-02"):
        svc = _argv(planned, host, "llmb-sglang")
        argv = svc["argv"]
        assert argv[argv.index("--dist-init-addr") + 1] == "[fd00::11]:50000"
    head = _argv(planned, "gpu-h200-01", "llmb-sglang")
    assert head["api"]["base_url"] == "http://[fd00::11]:8000/v1"
    assert head["health"]["url"].startswith("http://[fd00::11]:8000/")


def test_ray_address_brackets_ipv6():
    """Ray 2.51.1 parses "[fd00::11]:6379" (ray/_common/network_utils.parse_address)."""
    planned = _plan_v6("h800", ["gpu-h800-01", "gpu-h800-02"])
    worker = _argv(planned, "gpu-h800-02", "llmb-ray")["argv"]
    assert worker[worker.index("--address") + 1] == "[fd00::11]:6379"
    vllm = _argv(planned, "gpu-h800-01", "llmb-vllm")
    assert vllm["env"]["RAY_ADDRESS"] == "[fd00::11]:6379"


def test_trtllm_ipv6_cluster_address_is_refused_with_the_reason():
    hv, groups = load_inventory("h200-trtllm")
    hv["gpu-h200-02"]["llmb_node_ip"] = "fd00::12"
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA)
    (p,) = [p for p in err.value.problems if p.check == "network"]
    assert "trtllm cannot use the IPv6 cluster address fd00::12 of gpu-h200-02" in p.message
    assert "host:slots" in p.message and "llmb_node_ip" in p.fix


# ------------------------------------------------ 1. cross-service agreement (prefill/decode)
def _pd(change, sample="h200-1p1d"):
    """The sample's inventory with ``change`` applied to a copy of every host's llmb_disaggregation."""
    hv, groups = load_inventory(sample)
    for host in hv.values():
        dis = {k: (dict(v) if isinstance(v, dict) else v) for k, v in host["llmb_disaggregation"].items()}
        change(dis)
        host["llmb_disaggregation"] = dis
    return hv, groups


def _router_argv(planned):
    return next(s["argv"] for h in planned.to_list() for s in h["services"] if s["name"] == "llmb-sglang-router")


def test_router_reads_the_bootstrap_port_the_prefill_group_binds():
    """The prefill group's engine_args moves the bootstrap port; the router kept 8998 before."""
    def change(dis):
        dis.pop("bootstrap_port")
        dis["prefill"]["engine_args"] = {"disaggregation-bootstrap-port": 9100}

    hv, groups = _pd(change)
    planned = plan_inventory(hv, groups, DATA)
    argv = _router_argv(planned)
    assert argv[argv.index("--prefill") + 2] == "9100"
    prefill = next(s for h in planned.to_list() for s in h["services"] if s["name"] == "llmb-sglang-prefill")
    assert {"port": 9100, "purpose": "disaggregation-bootstrap"} in prefill["ports"]


def test_groups_with_different_transfer_backends_are_refused_naming_both():
    def change(dis):
        dis["decode"]["engine_args"] = {"disaggregation-transfer-backend": "nixl"}

    hv, groups = _pd(change)
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA)
    (p,) = [p for p in err.value.problems if p.check == "disaggregation"]
    assert "disagree on --disaggregation-transfer-backend: mooncake (the release's default) and nixl" in p.message
    assert "llmb_disaggregation.decode.engine_args" in p.message


def test_backend_set_at_both_levels_is_refused_not_dropped():
    def change(dis):
        dis["transfer_backend"] = "mooncake"
        dis["prefill"]["engine_args"] = {"disaggregation-transfer-backend": "nixl"}

    hv, groups = _pd(change)
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA)
    msgs = [p.message for p in err.value.problems if p.check == "disaggregation"]
    assert any("is nixl in llmb_disaggregation.prefill.engine_args" in m
               and "but llmb_disaggregation.transfer_backend is mooncake" in m for m in msgs), msgs


# ------------------------------------------------ 8. the limits lifted
def test_ktransformers_rules_file_for_four_gpus():
    """--optimize_config_path was planner-owned with no knob: one GPU only."""
    planned = _plan("ktransformers", llmb_ktransformers_rules="DeepSeek-V3-Chat-multi-gpu-4.yaml")
    (host,) = planned.to_list()
    argv = next(s["argv"] for s in host["services"] if s["name"] == "llmb-ktransformers")
    path = argv[argv.index("--optimize_config_path") + 1]
    assert path.endswith("/site-packages/ktransformers/optimize/optimize_rules/DeepSeek-V3-Chat-multi-gpu-4.yaml")


def test_ktransformers_rules_not_shipped_lists_them_by_gpu_count():
    (p,) = [p for p in _problems("ktransformers", llmb_ktransformers_rules="DeepSeek-V3-Chat-multi-gpu-16.yaml")
            if p.check == "choice"]
    assert "is not a rules file ktransformers 0.3.2 ships" in p.message
    assert "4 GPUs: DeepSeek-V3-Chat-multi-gpu-4.yaml" in p.message and "8 GPUs: DeepSeek-V3-Chat-multi-gpu-8.yaml" in p.message


def test_ktransformers_rules_for_more_gpus_than_the_node_has():
    problems = _problems("ktransformers", llmb_platform="h200-x2",
                         llmb_ktransformers_rules="DeepSeek-V3-Chat-multi-gpu-4.yaml")
    (p,) = [p for p in problems if p.check == "parallelism"]
    assert "DeepSeek-V3-Chat-multi-gpu-4.yaml places modules on 4 GPUs; h200-x2 has 2 a node" in p.message
    assert "DeepSeek-V3-Chat-multi-gpu.yaml" in p.expected


def _pd4(change):
    return _pd(change, "h200-4p12d")


def test_two_prefill_instances_behind_one_router():
    """4P12D's four prefill nodes as two independent TP16 instances (it was one cluster only)."""
    def change(dis):
        dis["prefill"].update(instances=2, tensor_parallel=16, data_parallel=16)

    hv, groups = _pd4(change)
    planned = plan_inventory(hv, groups, DATA)
    hosts = planned.to_list()
    heads = [h["host"] for h in hosts for s in h["services"]
             if s["name"] == "llmb-sglang-prefill" and s.get("health")]
    assert len(heads) == 2
    argv = _router_argv(planned)
    prefill_at = [i for i, t in enumerate(argv) if t == "--prefill"]
    assert len(prefill_at) == 2 and argv.count("--decode") == 1
    addresses = {h["host"]: h["address"] for h in hosts}
    for i, head in zip(prefill_at, heads, strict=True):
        assert argv[i + 1] == f"http://{addresses[head]}:30000" and argv[i + 2] == "8998"
    router = next(s for h in hosts for s in h["services"] if s["name"] == "llmb-sglang-router")
    assert len(router["depends_on"]) == 3
    # each instance is its own cluster: node rank 0 and its own --dist-init-addr
    inits = {s["argv"][s["argv"].index("--dist-init-addr") + 1] for h in hosts for s in h["services"]
             if s["name"] == "llmb-sglang-prefill"}
    assert len(inits) == 2


def test_instances_that_do_not_split_the_group_are_refused():
    hv, groups = _pd4(lambda dis: dis["prefill"].update(instances=3))
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA)
    (p,) = [p for p in err.value.problems if "instances" in p.message]
    assert "4 node(s), which do not split into 3 instances" in p.message and "1, 2, 4" in p.expected


def test_ep_size_not_dividing_the_experts_is_refused():
    """4P12D's decode with 90 redundant experts: 474 / 96 passed before; SGLang asserts at start."""
    def change(dis):
        dis["decode"]["engine_args"] = {**dis["decode"]["engine_args"], "ep-num-redundant-experts": 90}

    hv, groups = _pd4(change)
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA)
    (p,) = [p for p in err.value.problems if p.check == "model-limit"]
    assert "EP size 96 (TP 96 (--moe-a2a-backend deepep)) does not divide the 474 experts" in p.message
    assert p.message.startswith("the decode group")


def test_vllm_dp_address_stays_bare_for_ipv6():
    """vLLM takes --data-parallel-address as a bare host and brackets it itself (get_tcp_uri)."""
    planned = _plan_v6("h800-dp-ep", ["gpu-h800-01", "gpu-h800-02"])
    for host in ("gpu-h800-01", "gpu-h800-02"):
        argv = _argv(planned, host, "llmb-vllm")["argv"]
        assert argv[argv.index("--data-parallel-address") + 1] == "fd00::11"
    api = _argv(planned, "gpu-h800-01", "llmb-vllm")["api"]
    assert api["base_url"] == "http://[fd00::11]:8000/v1"
