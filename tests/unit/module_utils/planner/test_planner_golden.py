"""Golden tests: each sample inventory's plan holds every flag, env var, device and mount of its recipe.

The recipe commands below are quoted from ../shared/seeds/ (file and section named on each);
placeholders ($MODEL_PATH, $MASTER_IP, <HOST1>, ...) are replaced by the inventory's hosts and
paths ("hosts and paths aside"). Flags are compared in canonical form through the pinned flag
set, so `-dcp 8` matches `--decode-context-parallel-size 8` and `--disable-log-requests` matches
its vLLM 0.19 spelling `--no-enable-log-requests`.
"""

from __future__ import annotations

import pytest
import yaml
from planner_helpers import (
    assert_container_matches,
    assert_recipe_flags,
    assert_serve_flags,
    by_host,
    canonical_pairs,
    flagset_of,
    only_service,
    parse_docker_run,
    recipe_tokens,
    service,
)

# ---------------------------------------------------------------------------- seed 000
SEED_000_SETTINGS = (
    # seed 000 "Configuration Details" + "Launch the Server" (Uvicorn on 0.0.0.0:8000), the client
    # examples' model name, and "vLLM 0.8.5+ includes --reasoning-parser kimi_k2"
    "vllm serve MODEL --tensor-parallel-size 8 --max-model-len 262144 --max-num-seqs 4 "
    "--max-num-batched-tokens 32768 --enable-chunked-prefill --enable-prefix-caching "
    "--gpu-memory-utilization 0.95 --reasoning-parser kimi_k2 --served-model-name kimi-k2-thinking "
    "--host 0.0.0.0 --port 8000"
    # deliberate: the sample adds DCP 8, without which one 256k sequence of KV (17.16 GiB a rank)
    # cannot fit beside the weights on an H100 (planner/memory.py); the engine refuses at start
    " --decode-context-parallel-size 8"
)




def test_h100_long_context_seed_000(planned, data):
    plan = planned("h100")
    svc = only_service(plan, "llmb-vllm")
    fs = flagset_of(data, "vllm", "0.19.1")
    model = "/home/ubuntu/models/Kimi-K2-Thinking"
    assert svc["argv"][:3] == ["/opt/llmb/venvs/vllm-0.19.1/bin/vllm", "serve", model]
    assert_serve_flags(fs, svc["argv"], recipe_tokens(SEED_000_SETTINGS, {"MODEL": model}), 2, model)
    assert svc["kind"] == "systemd" and svc["health"]["port"] == 8000
    assert svc["api"] == {
        "base_url": "http://10.0.0.11:8000/v1",
        "served_model_name": "kimi-k2-thinking",
        "reasoning": True,
        "tool_calls": True,
    }


# ---------------------------------------------------------------------------- seed 003
SEED_003_TP8_DCP8 = """vllm serve moonshotai/Kimi-K2-Thinking \
  --tensor-parallel-size 8 \
  --decode-context-parallel-size 8 \
  --enable-auto-tool-choice \
  --tool-call-parser kimi_k2 \
  --reasoning-parser kimi_k2  \
  --trust-remote-code"""


def test_h200_tp8_dcp8_seed_003(planned, data):
    svc = only_service(planned("h200"), "llmb-vllm")
    model = "/data/models/Kimi-K2-Thinking"
    fs = flagset_of(data, "vllm", "0.19.1")
    tokens = recipe_tokens(SEED_003_TP8_DCP8, {"moonshotai/Kimi-K2-Thinking": model})
    assert_serve_flags(fs, svc["argv"], tokens, 2, model)
    # the recipe serves under the hub id (the 404 FAQ of seed 001): keep that name
    assert ("--served-model-name", ("moonshotai/Kimi-K2-Thinking",)) in canonical_pairs(fs, svc["argv"][2:])[
        0
    ]


# ---------------------------------------------------------------------------- seed 002 TP+PP
SEED_002_TP_PP = (
    "vllm serve moonshotai/Kimi-K2-Instruct --trust-remote-code --tokenizer-mode auto --tensor-parallel-size 8 "
    "--pipeline-parallel-size 2 --dtype bfloat16 --quantization fp8 --max-model-len 2048 --max-num-seqs 1 "
    "--max-num-batched-tokens 1024 --enable-chunked-prefill --disable-log-requests --kv-cache-dtype fp8 -dcp 8"
)


def test_h800_tp8_pp2_dcp8_over_ray_seed_002(planned, data):
    plan = planned("h800")
    hosts = by_host(plan)
    head, worker = hosts["gpu-h800-01"], hosts["gpu-h800-02"]
    model = "/data/models/Kimi-K2-Instruct"
    fs = flagset_of(data, "vllm", "0.19.1")
    api = service(head, "llmb-vllm")
    assert_serve_flags(
        fs, api["argv"], recipe_tokens(SEED_002_TP_PP, {"moonshotai/Kimi-K2-Instruct": model}), 2, model
    )
    # the removed flag is translated, never passed through
    assert "--disable-log-requests" not in api["argv"] and "--no-enable-log-requests" in api["argv"]
    assert any("--disable-log-requests" in n and "--no-enable-log-requests" in n for n in plan.notes)
    assert ("--distributed-executor-backend", "ray") in canonical_pairs(fs, api["argv"][2:])[0]
    # "start ray on node 0 and node 1": head, then worker, then the API server
    ray_head, ray_worker = service(head, "llmb-ray", "ray-head"), service(worker, "llmb-ray", "ray-worker")
    assert ray_head["argv"][1:4] == ["start", "--head", "--port"] and "--block" in ray_head["argv"]
    assert "--address" in ray_worker["argv"]
    assert ray_worker["argv"][ray_worker["argv"].index("--address") + 1] == "192.168.100.11:6379"
    assert ray_head["order"] < ray_worker["order"] < api["order"]
    assert set(api["depends_on"]) == {"gpu-h800-01/llmb-ray", "gpu-h800-02/llmb-ray"}
    assert [s["name"] for s in worker["services"]] == ["llmb-ray"]
    # communicators bind the cluster NIC on both nodes; each node announces its own address
    for hp, addr in ((head, "192.168.100.11"), (worker, "192.168.100.12")):
        for svc in hp["services"]:
            assert svc["env"]["NCCL_SOCKET_IFNAME"] == "ens7f0np0"
            assert svc["env"]["GLOO_SOCKET_IFNAME"] == "ens7f0np0"
            assert svc["env"]["VLLM_HOST_IP"] == addr


# ---------------------------------------------------------------------------- seed 002/004 DP+EP
SEED_002_DP_NODE0 = (
    "vllm serve moonshotai/Kimi-K2-Instruct --port 8000 --served-model-name kimi-k2 --trust-remote-code "
    "--data-parallel-size 16 --data-parallel-size-local 8 --data-parallel-address $MASTER_IP "
    "--data-parallel-rpc-port $PORT --enable-expert-parallel --max-num-batched-tokens 8192 --max-num-seqs 256 "
    "--gpu-memory-utilization 0.85 --enable-auto-tool-choice --tool-call-parser kimi_k2"
)
SEED_002_DP_NODE1 = (
    "vllm serve moonshotai/Kimi-K2-Instruct --headless --data-parallel-start-rank 8 --port 8000 "
    "--served-model-name kimi-k2 --trust-remote-code --data-parallel-size 16 --data-parallel-size-local 8 "
    "--data-parallel-address $MASTER_IP --data-parallel-rpc-port $PORT --enable-expert-parallel "
    "--max-num-batched-tokens 8192 --max-num-seqs 256 --gpu-memory-utilization 0.85 --enable-auto-tool-choice "
    "--tool-call-parser kimi_k2"
    # deliberate: seed 002's own advice, without which one 128k sequence does not fit (planner/memory.py)
    " --max-model-len 65536"
)


def test_h800_dp16_ep_headless_seed_002(planned, data):
    hosts = by_host(planned("h800-dp-ep"))
    # deliberate: the INT4 checkpoint; the recipe's FP8 one needs 72.2 GiB a rank under DP16 + EP
    # (every rank holds the 14.1 GB replicated part whole), over H800 x 0.85 (planner/memory.py)
    model = "/data/models/Kimi-K2-Thinking"
    subst = {"moonshotai/Kimi-K2-Instruct": model, "$MASTER_IP": "192.168.100.11", "$PORT": "13345"}
    fs = flagset_of(data, "vllm", "0.19.1")
    rank0 = service(hosts["gpu-h800-01"], "llmb-vllm", "dp-rank")
    headless = service(hosts["gpu-h800-02"], "llmb-vllm", "dp-headless")
    assert_serve_flags(fs, rank0["argv"], recipe_tokens(SEED_002_DP_NODE0, subst), 2, model)
    assert_serve_flags(fs, headless["argv"], recipe_tokens(SEED_002_DP_NODE1, subst), 2, model)
    assert "--headless" not in rank0["argv"]
    assert rank0["order"] < headless["order"] and headless["depends_on"] == ["gpu-h800-01/llmb-vllm"]
    assert rank0["ready"]["port"] == 13345 and rank0["health"]["url"] == "http://192.168.100.11:8000/health"
    assert headless["health"] is None and headless["api"] is None


# ---------------------------------------------------------------------------- seed 001 A3
SEED_001_DOCKER_RUN = """docker run --rm \
--name $NAME \
--net=host \
--shm-size=1g \
--device /dev/davinci0 \
--device /dev/davinci1 \
--device /dev/davinci2 \
--device /dev/davinci3 \
--device /dev/davinci4 \
--device /dev/davinci5 \
--device /dev/davinci6 \
--device /dev/davinci7 \
--device /dev/davinci8 \
--device /dev/davinci9 \
--device /dev/davinci10 \
--device /dev/davinci11 \
--device /dev/davinci12 \
--device /dev/davinci13 \
--device /dev/davinci14 \
--device /dev/davinci15 \
--device /dev/davinci_manager \
--device /dev/devmm_svm \
--device /dev/hisi_hdc \
-v /usr/local/dcmi:/usr/local/dcmi \
-v /usr/local/Ascend/driver/tools/hccn_tool:/usr/local/Ascend/driver/tools/hccn_tool \
-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi \
-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/ \
-v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info \
-v /etc/ascend_install.info:/etc/ascend_install.info \
-v /mnt/sfs_turbo/.cache:/home/cache \
-it $IMAGE bash"""
# seed 001 section 5.1 "Parameter and Environment Variable Descriptions" and the FAQ's served name
SEED_001_ENV = {
    "HCCL_BUFFSIZE": "1024",
    "TASK_QUEUE_ENABLE": "1",
    "OMP_PROC_BIND": "false",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
}
SEED_001_SERVE = (
    "vllm serve MODEL --tensor-parallel-size 16 --max-model-len 8192 --max-num-batched-tokens 8192 "
    "--max-num-seqs 12 --gpu-memory-utilization 0.9 --trust-remote-code --enable-expert-parallel "
    "--no-enable-prefix-caching --served-model-name moonshotai/Kimi-K2-Thinking --port 8000"
)


def test_a3_vllm_ascend_container_seed_001(planned, data):
    (host,) = planned("a3").to_list()
    svc = service(host, "vllm-ascend")
    assert svc["kind"] == "container"
    assert svc["image"] == "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3"
    items = parse_docker_run(SEED_001_DOCKER_RUN, {"$NAME": "vllm-ascend", "$IMAGE": "IMAGE"})
    assert_container_matches(svc, items)
    assert sum(1 for d in svc["devices"] if d.startswith("/dev/davinci") and d[12:].isdigit()) == 16
    for key, value in SEED_001_ENV.items():
        assert svc["env"][key] == value
    model = "/home/cache/Kimi-K2-Thinking"
    fs = flagset_of(data, "vllm-ascend", "0.20.2rc1")
    assert svc["argv"][:3] == ["vllm", "serve", model]
    assert_serve_flags(fs, svc["argv"], recipe_tokens(SEED_001_SERVE, {"MODEL": model}), 2, model)
    assert svc["container"]["entrypoint"] == "vllm" and svc["container"]["command"] == svc["argv"][1:]
    # seed 001 section 3.1: quantization targets Linear -> MoE before vllm-ascend loads the model
    assert host["model"]["config_patches"] == [
        {
            "path": "quantization_config.config_groups.group_0.targets",
            "value": ["MoE"],
            "expect": ["Linear"],
            "key": "vllm-ascend",
        }
    ]


def test_a3_2x16_dp2_rank0_and_headless_vllm_ascend_containers_seeds_001_002(planned, data):
    """Two A3 nodes, each seed 001's container with TP16, as DP rank 0 (the API) + a headless rank
    (seeds 002/004 "Data Parallelism"); HCCL_IF_IP is each node's own address."""
    hosts = by_host(planned("a3-2x16"))
    items = parse_docker_run(SEED_001_DOCKER_RUN, {"$NAME": "vllm-ascend", "$IMAGE": "IMAGE"})
    fs = flagset_of(data, "vllm-ascend", "0.20.2rc1")
    model = "/home/cache/Kimi-K2-Thinking"
    for name, role, addr in (("a3-node-01", "dp-rank", "192.168.103.11"), ("a3-node-02", "dp-headless", "192.168.103.12")):
        box = service(hosts[name], "vllm-ascend", role)
        assert box["kind"] == "container" and box["image"] == "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3"
        assert_container_matches(box, items)
        for key, value in SEED_001_ENV.items():
            assert box["env"][key] == value
        assert box["env"]["HCCL_IF_IP"] == addr and box["env"]["HCCL_SOCKET_IFNAME"] == "enp189s0f0"
        assert_serve_flags(fs, box["argv"], recipe_tokens(SEED_001_SERVE, {"MODEL": model}), 2, model)
        pairs, _ = canonical_pairs(fs, box["argv"][2:])
        for want in (("--data-parallel-size", 2), ("--data-parallel-size-local", 1),
                     ("--data-parallel-address", "192.168.103.11"), ("--data-parallel-rpc-port", 13345)):
            assert want in pairs, want
    rank0 = service(hosts["a3-node-01"], "vllm-ascend", "dp-rank")
    headless = service(hosts["a3-node-02"], "vllm-ascend", "dp-headless")
    assert "--headless" not in rank0["argv"] and rank0["health"]["url"] == "http://192.168.103.11:8000/health"
    assert headless["argv"][headless["argv"].index("--data-parallel-start-rank") + 1] == "1"
    assert "--headless" in headless["argv"] and headless["health"] is None
    assert rank0["order"] < headless["order"] and headless["depends_on"] == ["a3-node-01/vllm-ascend"]


# ---------------------------------------------------------------------------- seeds 002/003 ROCm
SEED_003_ROCM_DOCKER = """docker run -d -it \
  --ipc=host \
  --entrypoint /bin/bash \
  --network=host \
  --privileged \
  --cap-add=CAP_SYS_ADMIN \
  --device=/dev/kfd \
  --device=/dev/dri \
  --device=/dev/mem \
  --group-add video \
  --cap-add=SYS_PTRACE \
  --security-opt seccomp=unconfined \
  -v /:/work \
  -e SHELL=/bin/bash \
  -p 8000:8000 \
  --name Kimi-K2-Thinking \
  vllm/vllm-openai-rocm:latest"""
SEED_003_ROCM_ENV = {"SAFETENSORS_FAST_GPU": "1", "VLLM_USE_V1": "1", "VLLM_USE_TRITON_FLASH_ATTN": "0"}
SEED_003_ROCM_SERVE = """vllm serve moonshotai/Kimi-K2-Thinking \
  --tensor-parallel-size 8 \
  --no-enable-prefix-caching \
  --enable-auto-tool-choice \
  --tool-call-parser kimi_k2 \
  --reasoning-parser kimi_k2 \
  --trust-remote-code"""


def test_mi300x_rocm_container_seeds_002_003(planned, data):
    svc = only_service(planned("mi300x"), "Kimi-K2-Thinking")
    assert_container_matches(
        svc, parse_docker_run(SEED_003_ROCM_DOCKER, {}), image_repo="vllm/vllm-openai-rocm"
    )
    for key, value in SEED_003_ROCM_ENV.items():
        assert svc["env"][key] == value
    model = "/work/data/models/Kimi-K2-Thinking"  # llmb_model_dir seen through -v /:/work
    fs = flagset_of(data, "vllm", "0.19.1")
    assert_serve_flags(
        fs, svc["argv"], recipe_tokens(SEED_003_ROCM_SERVE, {"moonshotai/Kimi-K2-Thinking": model}), 2, model
    )
    # --entrypoint /bin/bash: the engine argv follows a constant script as its positional parameters
    # (deliberate plan change, issue 10: no second quoting place, argv stays a list)
    assert svc["container"]["command"] == ["-c", 'exec "$@"', "bash", *svc["argv"]]


# ---------------------------------------------------------------------------- seeds 002/003 ROCm, 2 nodes
# seed 002 "ROCm" Option B docker run (its --name), "Tensor Parallelism + pipeline-parallelism" sizes,
# and its ROCm serve command
SEED_002_ROCM_DOCKER = SEED_003_ROCM_DOCKER.replace("--name Kimi-K2-Thinking", "--name kimi-K2")
SEED_002_ROCM_SERVE = """vllm serve moonshotai/Kimi-K2-Instruct \
  --tensor-parallel-size 8 \
  --pipeline-parallel-size 2 \
  --no-enable-prefix-caching \
  --trust-remote-code"""


def test_mi300x_2x8_tp8_pp2_ray_in_rocm_containers_seeds_002_003(planned, data):
    hosts = by_host(planned("mi300x-2x8"))
    head, worker = hosts["mi300x-01"], hosts["mi300x-02"]
    items = parse_docker_run(SEED_002_ROCM_DOCKER, {})
    # -p 8000:8000 is the API's, served by `vllm serve` in the head's container (checked below)
    assert ("port", 8000) in items
    items = [i for i in items if i != ("port", 8000)]
    boxes = {}
    for hp, role, addr in ((head, "ray-head", "192.168.104.11"), (worker, "ray-worker", "192.168.104.12")):
        box = service(hp, "kimi-K2", role)
        assert box["kind"] == "container" and box["image"] == "vllm/vllm-openai-rocm:v0.19.1"
        assert_container_matches(box, items, image_repo="vllm/vllm-openai-rocm")
        assert {"/dev/kfd", "/dev/dri", "/dev/mem"} <= set(box["devices"])
        assert box["env"]["SAFETENSORS_FAST_GPU"] == "1"
        # run_cluster.sh: every container announces its own node's address
        assert box["env"]["VLLM_HOST_IP"] == addr and box["env"]["NCCL_SOCKET_IFNAME"] == "ens7f0np0"
        assert box["argv"][:2] == ["ray", "start"] and "--block" in box["argv"]
        assert box["argv"][box["argv"].index("--node-ip-address") + 1] == addr
        assert box["container"]["command"] == ["-c", 'exec "$@"', "bash", *box["argv"]]
        boxes[role] = box
    assert boxes["ray-head"]["ready"] == {"type": "tcp", "host": "192.168.104.11", "port": 6379, "timeout_s": 300}
    worker_box = boxes["ray-worker"]
    assert worker_box["argv"][worker_box["argv"].index("--address") + 1] == "192.168.104.11:6379"
    assert worker_box["ready"]["type"] == "connected" and worker_box["depends_on"] == ["mi300x-01/kimi-K2"]
    assert [s["name"] for s in worker["services"]] == ["kimi-K2"]
    # `vllm serve` runs in the head's container (docker exec from a unit), after both Ray nodes
    api = service(head, "kimi-K2-serve", "api")
    assert api["kind"] == "exec" and api["exec_in"] == "kimi-K2" and api["image"] is None
    assert boxes["ray-head"]["order"] < worker_box["order"] < api["order"]
    assert set(api["depends_on"]) == {"mi300x-01/kimi-K2", "mi300x-02/kimi-K2"}
    argv = api["argv"]
    assert argv[:2] == ["/usr/bin/docker", "exec"]
    names = [argv[i + 1] for i, a in enumerate(argv[: argv.index("kimi-K2")]) if a == "-e"]
    assert names == sorted(api["env"]) and "RAY_ADDRESS" in names
    assert not any("=" in n for n in names)  # values come from the unit's environment, never argv
    inner = argv[argv.index("vllm") :]
    assert inner[:3] == ["vllm", "serve", "/work/data/models/Kimi-K2-Instruct"]
    fs = flagset_of(data, "vllm", "0.19.1")
    model = "/work/data/models/Kimi-K2-Instruct"
    assert_serve_flags(fs, inner, recipe_tokens(SEED_002_ROCM_SERVE, {"moonshotai/Kimi-K2-Instruct": model}), 2, model)
    assert ("--distributed-executor-backend", "ray") in canonical_pairs(fs, inner[2:])[0]
    assert api["env"]["RAY_ADDRESS"] == "192.168.104.11:6379" and api["env"]["VLLM_HOST_IP"] == "192.168.104.11"
    assert api["stop_argv"][:3] == ["/usr/bin/docker", "exec", "kimi-K2"]
    assert api["health"]["url"] == "http://192.168.104.11:8000/health"
    assert {"port": 8000, "purpose": "api"} in api["ports"]


# ---------------------------------------------------------------------------- seed 004 SGLang
SEED_004_SGLANG = (
    "python -m sglang.launch_server --model-path $MODEL_PATH --tp 16 --dist-init-addr $MASTER_IP:50000 "
    "--nnodes 2 --node-rank {rank} --trust-remote-code --tool-call-parser kimi_k2"
)


def test_h200_sglang_tp16_two_nodes_seed_004(planned, data):
    hosts = by_host(planned("h200-sglang"))
    fs = flagset_of(data, "sglang", "0.5.5")
    subst = {"$MODEL_PATH": "/data/models/Kimi-K2-Instruct", "$MASTER_IP": "192.168.101.11"}
    for rank, name in enumerate(("gpu-h200-01", "gpu-h200-02")):
        svc = service(hosts[name], "llmb-sglang")
        assert svc["argv"][0] == "/opt/llmb/venvs/sglang-0.5.5/bin/python"
        assert svc["argv"][1:3] == ["-m", "sglang.launch_server"]
        recipe = recipe_tokens(SEED_004_SGLANG.format(rank=rank), subst)
        assert_recipe_flags(fs, recipe[3:], svc["argv"][3:])
        assert svc["env"]["NCCL_SOCKET_IFNAME"] == "ens7f0np0"
    head = service(hosts["gpu-h200-01"], "llmb-sglang")
    assert head["health"] and head["ready"]["port"] == 50000
    assert service(hosts["gpu-h200-02"], "llmb-sglang")["health"] is None


# ---------------------------------------------------------------------------- seed 004 TRT-LLM
SEED_004_TRT_DOCKER = (
    "docker run -it --name ${NAME}_host1 --ipc=host --gpus=all --network host --privileged --ulimit memlock=-1 "
    "--ulimit stack=67108864 -v ${PWD}:/workspace -v <YOUR_MODEL_DIR>:/models/DeepSeek-V3 -w /workspace ${IMAGE}"
)
SEED_004_EXTRA_CONFIG = """cuda_graph_config:
  padding_enabled: true
  batch_sizes:
    - 1
    - 2
    - 4
    - 8
    - 16
    - 32
    - 64
    - 128
print_iter_log: true
enable_attention_dp: true
"""
SEED_004_MPIRUN = """mpirun -np 16 \
-H <HOST1>:8,<HOST2>:8 \
-mca plm_rsh_args "-p 2233" \
--allow-run-as-root \
trtllm-llmapi-launch trtllm-serve serve \
--backend pytorch \
--tp_size 16 \
--ep_size 8 \
--kv_cache_free_gpu_memory_fraction 0.95 \
--trust_remote_code \
--max_batch_size 128 \
--max_num_tokens 4096 \
--extra_llm_api_options /path/to/TensorRT-LLM/extra-llm-api-config.yml \
--port 8000 \
<YOUR_MODEL_DIR>"""


def test_h200_trtllm_mpirun_sshd_seed_004(planned, data):
    plan = planned("h200-trtllm")
    hosts = by_host(plan)
    head, other = hosts["gpu-h200-01"], hosts["gpu-h200-02"]
    subst = {
        "${NAME}_host1": "llmb-trtllm",
        "${PWD}": "/opt/llmb/trtllm-workspace",
        "<YOUR_MODEL_DIR>:/models/DeepSeek-V3": "/data/models/Kimi-K2-Instruct:/models/Kimi-K2-Instruct:ro",
        "${IMAGE}": "IMAGE",
    }
    items = parse_docker_run(SEED_004_TRT_DOCKER, subst)
    for hp in (head, other):
        box = service(hp, "llmb-trtllm", "sshd")
        assert_container_matches(box, items)
        # deliberate plan change (issue 12): the script is constant, the mesh directory its "$1"
        assert box["argv"] == [
            "/bin/sh",
            "-c",
            'mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f "$1/sshd_config"',
            "sh",
            "/etc/llmb/ssh-mesh",
        ]
        assert box["container"]["sshd"]["port"] == 2233  # the port lives in the mesh's sshd_config
        assert "/etc/llmb/ssh-mesh:/etc/llmb/ssh-mesh:ro" in box["mounts"]
        assert {"port": 2233, "purpose": "sshd"} in box["ports"]
        (cfg,) = box["config_files"]
        assert yaml.safe_load(cfg["content"]) == yaml.safe_load(SEED_004_EXTRA_CONFIG)
        assert f"{cfg['path'].rsplit('/', 1)[0]}:{cfg['path'].rsplit('/', 1)[0]}:ro" in box["mounts"]
    launcher = service(head, "llmb-trtllm-launcher", "mpirun-launcher")
    assert launcher["kind"] == "mpirun" and launcher["exec_in"] == "llmb-trtllm"
    assert [s["name"] for s in other["services"]] == ["llmb-trtllm"]
    recipe = recipe_tokens(
        SEED_004_MPIRUN,
        {
            "<HOST1>": "192.168.101.11",
            "<HOST2>": "192.168.101.12",
            "/path/to/TensorRT-LLM/extra-llm-api-config.yml": "/etc/llmb/trtllm/extra-llm-api-config.yml",
            "<YOUR_MODEL_DIR>": "/models/Kimi-K2-Instruct",
        },
    )
    argv = launcher["argv"]
    # mpirun options of the recipe, in place
    for pair in (
        ["-np", "16"],
        ["-H", "192.168.101.11:8,192.168.101.12:8"],
        ["-mca", "plm_rsh_args", "-F /etc/llmb/ssh-mesh/ssh_config -p 2233"],
    ):
        assert any(argv[i : i + len(pair)] == pair for i in range(len(argv))), pair
    assert "--allow-run-as-root" in argv
    cut = argv.index("trtllm-llmapi-launch")
    assert argv[cut : cut + 3] == ["trtllm-llmapi-launch", "trtllm-serve", "serve"]
    rcut = recipe.index("trtllm-llmapi-launch")
    fs = flagset_of(data, "trtllm", "1.1.0")
    want_pos, got_pos = assert_recipe_flags(fs, recipe[rcut + 3 :], argv[cut + 3 :])
    assert want_pos == got_pos == ["/models/Kimi-K2-Instruct"] and argv[-1] == "/models/Kimi-K2-Instruct"
    # the exported communicator settings reach every rank
    assert ["-x", "NCCL_SOCKET_IFNAME"] in [argv[i : i + 2] for i in range(len(argv))]
    # seed 004 "Others": TRT-LLM has no kimi_k2 model type
    assert head["model"]["config_patches"][0]["path"] == "model_type"
    assert launcher["api"]["tool_calls"] is False  # no tool-call parser in trtllm-serve
    assert launcher["order"] > service(head, "llmb-trtllm")["order"]
    assert set(launcher["depends_on"]) == {"gpu-h200-01/llmb-trtllm", "gpu-h200-02/llmb-trtllm"}


# ---------------------------------------------------------------------------- simulated cluster
def test_sim_is_tp8_pp2_over_ray(planned, data):
    hosts = by_host(planned("sim"))
    assert list(hosts) == ["node1", "node2"]
    api = service(hosts["node1"], "llmb-vllm", "api")
    fs = flagset_of(data, "vllm", "0.19.1")
    pairs, pos = canonical_pairs(fs, api["argv"][2:])
    for want in (
        ("--tensor-parallel-size", 8),
        ("--pipeline-parallel-size", 2),
        ("--distributed-executor-backend", "ray"),
        ("--served-model-name", ("kimi-k2-sim",)),
        ("--reasoning-parser", "kimi_k2"),
        ("--enable-auto-tool-choice", True),
    ):
        assert want in pairs
    assert pos == ["/opt/llmb/models/kimi-k2-sim"]
    assert service(hosts["node2"], "llmb-ray", "ray-worker")["env"]["VLLM_HOST_IP"] == "172.30.0.12"


@pytest.mark.parametrize(
    "name",
    ["h100", "h200", "h800", "h800-dp-ep"]
    + ["a3", "a3-2x16", "mi300x", "mi300x-2x8", "h200-sglang", "h200-trtllm", "sim"],
)
def test_every_planned_engine_argv_is_accepted_by_its_flag_set(planned, data, name):
    plan = planned(name)
    fs = plan.ctx.flagset
    for hp in plan.to_list():
        for svc in hp["services"]:
            argv = svc["argv"]
            if svc["role"] in ("ray-head", "ray-worker", "sshd"):
                continue
            if svc["kind"] == "mpirun":
                argv = argv[argv.index("trtllm-serve") :]
            if svc["kind"] == "exec":
                argv = argv[argv.index("vllm") :]
            start = {"vllm": 2, "vllm-ascend": 2, "sglang": 3, "trtllm": 2}[plan.ctx.engine]
            pairs, _ = canonical_pairs(fs, argv[start:])  # raises on a flag the release lacks
            assert pairs
