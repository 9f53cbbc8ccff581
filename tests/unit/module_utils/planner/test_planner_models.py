"""Today's models (issue #24 points 1 and 2): Kimi-K2.5 / K2.6 / K2.7-Code and Kimi-K3 profiles, the
catalog's model x release x platform refusals, and the memory fit of a hybrid (KDA + MLA) model with a
vision tower. Every expected figure below is worked by hand from the profiles' config.json facts."""

from __future__ import annotations

import copy

import pytest
from llmbctl.catalog import Catalog
from llmbctl.planner import memory, plan_inventory
from llmbctl.planner.model import PlanError
from planner_helpers import REPO, load_inventory, memory_fit

DATA = str(REPO / "data")
CAT = Catalog(REPO / "data")
GIB = 1024**3
K3 = CAT.model("kimi-k3").raw
K26 = CAT.model("kimi-k2.6").raw


# ----------------------------------------------------------------------------- hand arithmetic


def test_vllm_pp_partition_gives_the_remainder_to_the_ranks_before_the_last():
    assert memory.pp_partition(93, 2) == [47, 46]
    assert memory.pp_partition(61, 4) == [15, 15, 16, 15]
    assert memory.pp_partition(93, 4) == [23, 23, 24, 23]
    assert sum(memory.pp_partition(93, 3)) == 93


def test_k3_layer_schedule_is_24_mla_and_69_kda():
    kv = K3["kv_cache"]
    assert len(kv["full_attn_layers"]) == 24 and kv["num_hidden_layers"] == 93
    assert memory.hybrid_layers(kv, 1) == (24, 69)
    # PP 2: layers 1-47 hold MLA layers 4, 8, ..., 44 (11) and 36 KDA; 48-93 hold 48, ..., 92, 93 (13) and 33
    assert memory.hybrid_layers(kv, 2) == (13, 36)


def test_kda_state_per_sequence_is_constant_and_split_by_tp():
    # per layer at TP 1: recurrent 96 x 128 x 128 x 4 bytes = 6,291,456; conv 3 x 96 x 128 x 3 x 2 = 221,184
    state, formula = memory.linear_state(K3, 1, 1)
    assert state == 69 * (96 * 128 * 128 * 4 + 3 * 96 * 128 * 3 * 2) == 449_372_160
    assert "69 KDA layers" in formula
    # TP 8: 12 heads a rank -> 786,432 + 27,648 = 814,080 bytes a layer
    assert memory.linear_state(K3, 8, 1)[0] == 69 * 814_080 == 56_171_520
    # PP 2: the rank with 36 KDA layers
    assert memory.linear_state(K3, 8, 2)[0] == 36 * 814_080
    # an MLA-only model has none
    assert memory.linear_state(K26, 8, 1) is None


def test_mla_layers_only_grow_with_length_on_a_hybrid():
    bpt, layers, formula = memory.kv_per_token(K3, None, 1)
    assert (bpt, layers) == ((512 + 64) * 24 * 2, 24) == (27_648, 24)
    assert "24 MLA layers" in formula
    assert memory.kv_per_token(K3, "fp8", 2)[0] == 576 * 13 * 1


def test_vision_tower_placement():
    vision = 942_287_840  # MoonViT + projector, BF16 (K2.5's safetensors listing)
    assert memory.vision_share(K26, {"--mm-encoder-tp-mode": "data"}, 8) == (vision, vision, pytest.approx(
        "whole on every rank: --mm-encoder-tp-mode data"))
    total, dev, how = memory.vision_share(K26, {}, 8)
    assert (total, dev) == (vision, vision / 8) and "split by TP 8" in how
    total, dev, how = memory.vision_share(K26, {"--language-model-only": True}, 8)
    assert (total, dev) == (vision, 0.0) and "--language-model-only" in how
    assert memory.vision_share(CAT.model("kimi-k2-thinking").raw, {}, 8) == (0.0, 0.0, "")


def test_expert_bytes_of_k3_use_the_latent_width():
    experts, text = memory.expert_bytes(K3)
    params = 896 * 92 * 3 * 3584 * 3072
    assert params == 2_722_740_830_208
    assert experts == pytest.approx(params * (0.5 + 1 / 32))  # MXFP4: 4 bits + an E8M0 byte per 32
    assert "experts 896 x 92 MoE layers" in text


# ----------------------------------------------------------------------------- plans


def _plan(name: str, hosts: int | None = None, **overrides):
    hv, groups = load_inventory(name)
    if hosts is not None:  # more nodes of the same shape: 10.0.4.1N
        first = next(iter(hv.values()))
        names = [f"node-{i:02d}" for i in range(1, hosts + 1)]
        hv = {}
        for i, n in enumerate(names):
            h = copy.deepcopy(first)
            h["inventory_hostname"] = n
            h["ansible_host"] = f"10.0.4.{11 + i}"
            h["llmb_node_ip"] = f"192.168.104.{11 + i}"
            hv[n] = h
        groups = {"all": list(names), "accel_nodes": list(names)}
    for host in hv.values():
        host.update(copy.deepcopy(overrides))
    return plan_inventory(hv, groups, DATA)


CONTAINERLESS = {"llmb_container_options": {}, "llmb_container_devices": [], "llmb_container_mounts": [],
                 "llmb_engine_env": {}}


def test_k26_on_one_h200_node_fits_with_the_figures_printed():
    planned = _plan("h200", llmb_model="kimi-k2.6", llmb_engine_version="0.32.0", llmb_decode_context_parallel=1)
    fit = memory_fit(planned)
    device = 143_771 * 1024**2  # h200-hgx8 memory_mib
    vision = 942_287_840
    weights = (595_175_093_043 - vision) / 8 + vision  # text split by TP 8, vision whole (--mm-encoder-tp-mode data)
    assert fit.weights_bytes == pytest.approx(weights)
    kv = device * 0.92 - weights - 10 * GIB  # vLLM 0.32.0's --gpu-memory-utilization default 0.92
    assert fit.kv_available_bytes == pytest.approx(kv)
    assert fit.kv_tokens == int(kv // (70_272 * 64)) * 64 == 750_400
    assert fit.fits and fit.max_model_len == 262_144
    note = next(n for n in planned.notes if n.startswith("memory:"))
    for term in ("140.4 GiB x 0.92", "594.2 GB of text-model weights / (TP 8 x PP 1 = 8 devices)",
                 "vision tower 0.94 GB (whole on every rank: --mm-encoder-tp-mode data)", "= 75.2 GB per device",
                 "headroom 10.0 GiB", "KV 49.11 GiB", "(512 + 64) x 61 layers x 2 bytes = 70,272",
                 "750,400 tokens per instance"):
        assert term in note, term


def test_k26_text_only_frees_the_vision_tower():
    with_tower = memory_fit(_plan("h200", llmb_model="kimi-k2.6", llmb_engine_version="0.32.0",
                            llmb_decode_context_parallel=1))
    text_only = memory_fit(_plan("h200", llmb_model="kimi-k2.6", llmb_engine_version="0.32.0",
                           llmb_decode_context_parallel=1,
                           llmb_engine_args={"language-model-only": True}))
    assert with_tower.weights_bytes - text_only.weights_bytes == pytest.approx(942_287_840)


def test_k3_on_one_h200_node_is_refused_with_every_term():
    with pytest.raises(PlanError) as err:
        _plan("h200", llmb_model="kimi-k3", llmb_engine_version="0.32.0", llmb_decode_context_parallel=1)
    probs = [p for p in err.value.problems if p.check == "memory-fit"]
    assert len(probs) == 1 and len(err.value.problems) == 1
    text = probs[0].message
    # 1.6e12 - 0.94e9 text bytes / 8 + 0.94e9 / 8 = 200.0 GB = 186.26 GiB > 140.4 x 0.92 = 129.17 GiB
    for term in ("140.4 GiB x 0.92 (--gpu-memory-utilization) = 129.17 GiB",
                 "1,599.1 GB of text-model weights / (TP 8 x PP 1 = 8 devices)",
                 "vision tower 0.12 GB (split by TP 8)", "= 200.0 GB per device (186.26 GiB)",
                 "headroom 10.0 GiB", "KV -67.10 GiB", "(512 + 64) x 24 MLA layers x 2 bytes = 27,648 bytes",
                 "69 KDA layers x (96 heads / TP 8 x 128 x 128 x 4 bytes + 3 x 96 x 128 / TP 8 x 3 x 2 bytes) "
                 "= 56,171,520 bytes",
                 # vLLM 0.32.0's hybrid cache: the 768-token block (a multiple of 128 whose 884,736-byte page
                 # holds one KDA layer's 814,080-byte state), 24 MLA + 72 KDA slots (3 padding), one request
                 # 1,366 + 3 blocks of 24 pages: 24 x 884,736 x 1,369 = 27.07 GiB
                 "attention block 768 tokens", "3 padding layers", "24 layers share each block on a rank",
                 "1,366 MLA + 3 x 1 KDA = 1,369 blocks (24 x 884,736 x 1,369 blocks = 27.07 GiB needed)",
                 "KV -67.10 GiB / 21,233,664 = 0 blocks",
                 "one sequence of --max-model-len 1,048,576 needs 27.07 GiB per rank"):
        assert term in text, term
    assert "llmb_tensor_parallel or llmb_pipeline_parallel" in probs[0].fix


def test_k3_plans_on_two_h200_nodes_native_multinode():
    planned = _plan("mi300x-2x8", llmb_platform="h200-hgx8", llmb_model="kimi-k3", llmb_engine_version="0.32.0",
                    llmb_vllm_multinode="native", llmb_engine_args={"gpu-memory-utilization": 0.95},
                    **CONTAINERLESS)
    fit = memory_fit(planned)
    assert (planned.topology.tp, planned.topology.pp) == (8, 2)
    device = 143_771 * 1024**2
    weights = (1.6e12 - 942_287_840) / 16 + 942_287_840 / 8
    assert fit.weights_bytes == pytest.approx(weights)
    state = 36 * 814_080  # the PP rank with 36 KDA layers, 12 heads a TP rank
    assert fit.state_bytes == state
    kv = device * 0.95 - weights - 10 * GIB
    # vLLM's hybrid cache: a 768-token block (884,736-byte page); PP rank 1 holds 13 of the MLA group's 24
    # layers, rank 0 12 of each KDA group's 23 or 24 (layers[i::3]): 13 pages a block on the worst rank
    blocks = int(kv // (884_736 * 13))
    lay = fit.hybrid
    assert (lay.block_tokens, lay.tensors, lay.num_blocks, lay.blocks_per_request) == (768, 13, blocks, 1366 + 3)
    assert fit.kv_tokens == int(blocks / 1369 * 1_048_576)  # vLLM >= 0.23: concurrency x max-model-len
    assert lay.attention_tokens == (blocks - 1 - 3) * 768
    assert fit.fits and fit.max_model_len == 1_048_576


def test_k3_plans_on_four_h100_nodes():
    planned = _plan("mi300x-2x8", hosts=4, llmb_platform="h100-hgx8", llmb_model="kimi-k3",
                    llmb_engine_version="0.32.0", llmb_vllm_multinode="native", llmb_pipeline_parallel=4,
                    llmb_engine_args={"gpu-memory-utilization": 0.97, "max-model-len": 32768}, **CONTAINERLESS)
    fit = memory_fit(planned)
    assert (planned.topology.tp, planned.topology.pp) == (8, 4)
    # 1.6 TB / 32 = 50.0 GB = 46.6 GiB a device against 79.6 GiB x 0.97 = 77.3 GiB
    assert fit.weights_bytes == pytest.approx((1.6e12 - 942_287_840) / 32 + 942_287_840 / 8)
    assert fit.fits and fit.kv_available_bytes / GIB == pytest.approx(
        (81_559 * 1024**2 * 0.97 - fit.weights_bytes) / GIB - 10)


def test_k3_plans_on_one_mi355x_node():
    fit = memory_fit(_plan("mi355x", llmb_model="kimi-k3", llmb_engine_version="0.32.0",
                     llmb_engine_args={"gpu-memory-utilization": 0.95}))
    assert fit.weights_bytes == pytest.approx((1.6e12 - 942_287_840) / 8 + 942_287_840 / 8)
    assert fit.fits and fit.state_bytes == 56_171_520


# ----------------------------------------------------------------------------- catalog refusals


def _problems(**overrides):
    with pytest.raises(PlanError) as err:
        _plan("h200", llmb_decode_context_parallel=1, **overrides)
    return err.value.problems


def test_k3_before_vllm_027_is_refused_naming_the_variable_and_the_releases():
    probs = _problems(llmb_model="kimi-k3", llmb_engine_version="0.26.0")
    engine = [p for p in probs if p.check in ("model-engine", "engine-parser")]
    assert any("needs vllm 0.27.0 or newer" in p.message for p in engine)
    assert any("does not register KimiK3ForConditionalGeneration" in p.message for p in engine)
    assert {p.message.split(" parser ")[1].split()[0] for p in engine if p.check == "engine-parser"} == {"kimi_k3"}
    for p in engine:
        assert "llmb_engine_version" in p.fix and "0.32.0" in p.fix, p.fix
        assert p.found.startswith("llmb_engine_version: 0.26.0")
    # the architecture refusal says it all: no second 'model_type' problem
    assert not [p for p in probs if p.check == "model-type"]


def test_k3_on_a_cuda12_build_is_refused():
    problems = CAT.model_release_problems(CAT.model("kimi-k3"), "sglang", "0.5.5", "nvidia")
    cuda = [p for p in problems if "CUDA 13" in p["message"]]
    assert cuda and "580.65.06" in cuda[0]["message"] and "CUDA 12 build" in cuda[0]["message"]
    assert "llmb_engine_version" in cuda[0]["fix"] and "0.5.23" in cuda[0]["fix"]
    # the same release on AMD is not a CUDA question
    assert not [p for p in CAT.model_release_problems(CAT.model("kimi-k3"), "sglang", "0.5.5", "amd")
                if "CUDA" in p["message"]]


def test_a_parser_the_release_does_not_register_is_refused():
    problems = CAT.model_release_problems(CAT.model("kimi-k3"), "vllm", "0.26.0", "nvidia")
    parsers = [p for p in problems if p["check"] == "engine-parser"]
    assert len(parsers) == 2 and all("kimi_k3" in p["message"] for p in parsers)
    # the parsers come from the generated sets: where a set registers kimi_k3, nothing is said
    assert not CAT.model_release_problems(CAT.model("kimi-k3"), "vllm", "0.32.0", "nvidia")
    assert not CAT.model_release_problems(CAT.model("kimi-k3"), "sglang", "0.5.23", "nvidia")


def test_k3_without_a_release_that_knows_it_says_so():
    problems = CAT.model_release_problems(CAT.model("kimi-k3"), "vllm-ascend", "0.20.2rc1", "ascend")
    assert problems and all("no shipped vllm-ascend release" in p["fix"] for p in problems)


@pytest.mark.parametrize("name", ["kimi-k2.5", "kimi-k2.6", "kimi-k2.7-code", "kimi-k3"])
def test_profiles_record_their_sources_and_modality(name):
    raw = CAT.model(name).raw
    text = (REPO / "data" / "models" / f"{name}.yml").read_text()
    assert "vllm-project/recipes models/moonshotai/" in text and " @ " in text  # source and commit
    assert raw["modality"]["vision"] is True and raw["modality"]["text_only_flag"] == "--language-model-only"
    assert raw["served_model_name"] == raw["repo_id"]
    assert raw["max_position_embeddings"] in (262_144, 1_048_576)


# ----------------------------------------------------------------------------- modality vs smoke (#26 point 4)


def _api(planned) -> dict:
    apis = [s.api for hp in planned.hosts for s in hp.services if s.api]
    assert apis
    return apis[0]


K26_H200 = {"llmb_model": "kimi-k2.6", "llmb_engine_version": "0.32.0", "llmb_decode_context_parallel": 1}


def test_a_vision_model_gets_an_image_in_the_smoke_test():
    assert _api(_plan("h200", **K26_H200))["vision"] is True


def test_a_text_only_serve_of_a_vision_model_sends_no_image():
    api = _api(_plan("h200", llmb_engine_args={"language-model-only": True}, **K26_H200))
    assert "vision" not in api
    assert "vision" not in _api(_plan("h200", serve_smoke_image="never", **K26_H200))


def test_a_text_model_keeps_its_api_block():
    api = _api(_plan("h200", llmb_decode_context_parallel=1))
    assert set(api) == {"base_url", "served_model_name", "reasoning", "tool_calls"}


@pytest.mark.parametrize("overrides,why", [
    ({"llmb_decode_context_parallel": 1}, "has no vision tower"),
    ({**K26_H200, "llmb_engine_args": {"language-model-only": True}}, "served text-only (--language-model-only)"),
])
def test_an_image_smoke_on_a_text_serve_is_refused_at_stage_0(overrides, why):
    with pytest.raises(PlanError) as err:
        _plan("h200", serve_smoke_image="always", **overrides)
    probs = [p for p in err.value.problems if p.check == "modality"]
    assert len(probs) == 1 and why in probs[0].message
    assert probs[0].found == "serve_smoke_image: always" and "serve_smoke_image: auto" in probs[0].fix


def test_an_image_smoke_on_a_vision_model_is_planned():
    assert _api(_plan("h200", serve_smoke_image="always", **K26_H200))["vision"] is True


def test_a_bad_smoke_image_value_names_the_variable():
    with pytest.raises(PlanError) as err:
        _plan("h200", serve_smoke_image="sometimes", **K26_H200)
    assert any("serve_smoke_image" in p.message or "serve_smoke_image" in str(p.found) for p in err.value.problems)


def test_a_model_no_patch_can_load_names_the_engines_that_register_it():
    with pytest.raises(PlanError) as err:
        plan_inventory(*_trtllm_k3(), DATA)
    (prob,) = [p for p in err.value.problems if p.check == "model-type"]
    assert "deepseek_v3" not in prob.fix  # the K2 workaround does not load K3
    assert "registers KimiK3ForConditionalGeneration" in prob.fix and "vllm 0.32.0" in prob.fix
    assert "sglang 0.5.23" in prob.fix


def _trtllm_k3():
    hv, groups = load_inventory("h200-trtllm")
    for h in hv.values():
        h["llmb_model"] = "kimi-k3"
    return hv, groups


@pytest.mark.parametrize("patch,field", [
    ({"modality": {"vision": "yes"}}, "modality.vision"),
    ({"requires": {"engines": {"vllm": {"min_version": 27}}}}, "requires.engines.vllm.min_version"),
    ({"requires": {"nvidia": {"cuda_major": "13", "driver_min": "580"}}}, "requires.nvidia.cuda_major"),
    ({"requires": {"amd": {}}}, "requires.amd"),
])
def test_a_malformed_requires_or_modality_names_the_field(tmp_path, patch, field):
    import yaml
    from llmbctl.catalog import CatalogError

    doc = dict(K3, **patch)
    (tmp_path / "m.yml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CatalogError) as err:
        Catalog(models_dir=tmp_path).model("m")
    assert field in str(err.value)


def test_k3_under_dp_and_expert_parallel_keeps_the_replicated_part_on_every_rank():
    text = 1.6e12 - 942_287_840  # the vision tower is placed on its own (vision_share)
    experts = 896 * 92 * 3 * 3584 * 3072 * (0.5 + 1 / 32)  # 1,446.5 GB of routed experts
    # DP 16 + EP (TP 1): every rank holds the whole rest (152.6 GB) beside 1/16 of the experts
    w, shards, how = memory.weights_per_device(text, "vllm", 1, 1, 16, True, K3)
    assert shards == 16 and w == pytest.approx((text - experts) + experts / 16)
    assert w / 1e9 == pytest.approx(243.0, abs=0.1)  # over an H200's 150.7 GB: DEP needs bigger devices
    assert "replicated 152.6 GB / (TP 1 x PP 1)" in how
    # TP 8 x DP 2 + EP: the rest split 8 ways, the experts 16 ways
    w, _, _ = memory.weights_per_device(text, "vllm", 8, 1, 2, True, K3)
    assert w == pytest.approx((text - experts) / 8 + experts / 16)


@pytest.mark.parametrize("image,refused", [
    ("vllm/vllm-openai:kimi-k3-cu129", True),   # a CUDA 12.9 build: a driver < R580 is enough for it, not for K3
    ("vllm/vllm-openai:kimi-k3", False),        # the recipe's cu130 image
    ("registry.local:5000/vllm-openai:v0.33.0-cu130", False),
])
def test_k3_in_a_cuda12_image_is_refused_naming_the_variable(image, refused):
    kw = dict(llmb_platform="h200-hgx8", llmb_model="kimi-k3", llmb_engine_version="0.33.0",
              llmb_vllm_multinode="native", llmb_container_image=image, **CONTAINERLESS)
    if not refused:
        _plan("mi300x-2x8", **kw)
        return
    with pytest.raises(PlanError) as err:
        _plan("mi300x-2x8", **kw)
    (prob,) = err.value.problems
    assert prob.found == f"llmb_container_image: {image}" and "CUDA 12.9 build" in prob.message
    assert "580.65.06" in prob.message


def test_kimi_linear_hybrid_layout_by_hand():
    kl = CAT.model("kimi-linear-48b-a3b-instruct").raw
    assert memory.hybrid_layers(kl["kv_cache"], 1) == (7, 20)
    # PP 2: vLLM splits 27 layers 14 + 13; layers 1-14 hold MLA 4, 8, 12 and 11 KDA, 15-27 hold 16, 20, 24, 27 and 9
    assert memory.pp_partition(27, 2) == [14, 13]
    assert memory.hybrid_layers(kl["kv_cache"], 2) == (4, 11)
    # 20 KDA layers x (32 x 128 x 128 x 4 + 3 x 32 x 128 x 3 x 2) = 20 x 2,170,880
    assert memory.linear_state(kl, 1, 1)[0] == 43_417_600
    assert memory.kv_per_token(kl, None, 1)[0] == 576 * 7 * 2
