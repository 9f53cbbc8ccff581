"""The table of the inventory variables the planner reads (``KNOBS``) and of the toolkit-wide ones it
does not (``TOOLKIT_KNOBS``): name, type, default, range, format and the sentence the docs and the
sample inventories show for each."""

from __future__ import annotations

from typing import Any

from ..engines import registry
from ..layout import COMPILE_CACHE_DIR
from .disaggvars import check_disaggregation
from .values import PARALLEL_MAX, TIMEOUT_MAX, Knob


def engine_names() -> tuple[str, ...]:
    """llmb_engine's values: the engine registry (llmbctl.engines.registry), the one list of engines."""
    return registry.engine_names()


PRESETS_DIR_HINT = "data/presets/<name>.yml"


def _port(name: str, default: int, doc: str) -> Knob:
    return Knob(name, "int", default, doc, min=1, max=65535)


def _parallel(name: str, default: int | None, doc: str) -> Knob:
    return Knob(name, "int", default, doc, min=1, max=PARALLEL_MAX)


def _timeout(name: str, default: int, doc: str) -> Knob:
    return Knob(name, "int", default, doc, min=1, max=TIMEOUT_MAX)


KNOBS: tuple[Knob, ...] = (
    # shared with every stage -----------------------------------------------------------
    Knob(
        "llmb_platform",
        "str",
        None,
        "platform profile, data/platforms/<name>.yml",
        required=True,
        format="name",
    ),
    Knob("llmb_model", "str", None, "model profile, data/models/<name>.yml", required=True, format="name"),
    Knob("llmb_engine", "str", None, "inference engine", choices=engine_names, required=True),
    Knob(
        "llmb_engine_version",
        "str",
        None,
        "engine release, one of the shipped data/engines/<engine>-<version>.yml "
        "(default: the newest shipped; list: scripts/launch-plan --engine-versions)",
        format="version",
    ),
    Knob(
        "llmb_install",
        "str",
        "host",
        "host: uv venv + systemd units; container: image + docker",
        choices=("host", "container"),
    ),
    Knob("llmb_model_dir", "str", None, "weights directory on every node", required=True, format="path"),
    Knob(
        "llmb_cluster_iface",
        "str",
        None,
        "NIC for NCCL/GLOO/HCCL/VLLM_HOST_IP; required with 2+ nodes",
        format="iface",
    ),
    Knob(
        "llmb_head",
        "str",
        None,
        "host that is Ray head / DP rank 0 / node rank 0 / mpirun launcher "
        "(default: first host of accel_nodes)",
    ),
    Knob(
        "llmb_node_ip",
        "str",
        None,
        "this node's cluster address (default: ansible_host)",
        per_host=True,
        format="address",
    ),
    Knob(
        "llmb_rdma_rails",
        "list",
        None,
        "this node's RDMA rails for NCCL_IB_HCA (verify's tag fabric records them in host_vars/<host>/llmb_rdma.yml)",
        per_host=True,
        elements="iface",
    ),
    Knob(
        "llmb_rdma_gid_index",
        "int",
        None,
        "RoCE GID index for NCCL_IB_GID_INDEX (recorded by verify's tag fabric on RoCE)",
        per_host=True,
        min=0,
        max=255,
    ),
    # parallelism -----------------------------------------------------------------------
    _parallel("llmb_tensor_parallel", None, "TP size (default: devices per node)"),
    _parallel(
        "llmb_pipeline_parallel", 1,
        "PP size; TP x PP larger than one node runs across the nodes (vLLM: llmb_vllm_multinode)",
    ),
    Knob(
        "llmb_vllm_multinode",
        "str",
        None,
        "vLLM TP x PP across nodes: native (vLLM's own --nnodes/--node-rank/--master-addr launch, "
        "--headless on every node but rank 0) or ray (a Ray cluster under vllm serve) "
        "(default: native where the release's flag set has it, else ray)",
        choices=("native", "ray"),
    ),
    _parallel(
        "llmb_data_parallel", 1, "DP size; >1 on several nodes runs rank 0 + --headless ranks (vLLM)"
    ),
    _parallel("llmb_data_parallel_local", None, "DP ranks per node (default: DP / number of nodes)"),
    _parallel("llmb_decode_context_parallel", 1, "DCP size (vLLM -dcp); must divide TP"),
    Knob("llmb_expert_parallel", "bool", False, "vLLM --enable-expert-parallel"),
    _parallel("llmb_expert_parallel_size", None, "EP size for SGLang --ep-size / TRT-LLM --ep_size"),
    # ports and addresses ---------------------------------------------------------------
    Knob("llmb_api_host", "str", "0.0.0.0", "address the OpenAI API server binds", format="address"),
    Knob(
        "llmb_api_key",
        "str",
        None,
        "API key clients send as a Bearer token (vault it); the engine reads it from its 0600 env file",
        needs_plain=False,
    ),
    Knob(
        "llmb_confine_listeners",
        "bool",
        True,
        "bind the listeners an engine puts on every interface with no option to choose (Ray's GCS, the "
        "torch.distributed store of SGLang's --dist-init-addr) to the node's cluster address, through the "
        "llmb-bindto preload the serve role builds (docs/ports.md); false leaves them on every interface",
    ),
    _port("llmb_api_port", 8000, "OpenAI API port"),
    _port("llmb_ray_port", 6379, "Ray GCS port on the head (Ray mode)"),
    _port("llmb_ray_dashboard_port", 8265, "Ray dashboard port on the head (Ray mode)"),
    _port("llmb_dp_rpc_port", 13345, "vLLM --data-parallel-rpc-port (DP on several nodes)"),
    _port("llmb_sglang_dist_port", 50000, "SGLang --dist-init-addr port (several nodes)"),
    _port("llmb_vllm_master_port", 29501, "vLLM --master-port on node rank 0 (native multi-node launch)"),
    Knob(
        "llmb_disaggregation",
        "dict",
        None,
        "SGLang prefill/decode disaggregation: prefill and decode groups (child groups of accel_nodes) "
        "with their parallelism, memory fraction, context length and tuning, and the router (docs/disaggregation.md)",
        schema=lambda name, value: check_disaggregation(name, value),
    ),
    Knob(
        "llmb_ib_device",
        "str",
        None,
        "this node's RDMA device(s) for the disaggregated KV transfer, e.g. mlx5_0 or mlx5_0,mlx5_1 "
        "(default: llmb_disaggregation.ib_device, else the verify stage's active ibstat ports)",
        per_host=True,
        format="ib_device",
    ),
    Knob(
        "llmb_cpu_amx",
        "bool",
        None,
        "this node's CPU has Intel AMX (amx_tile, amx_int8, amx_bf16): KTransformers' AMX rules "
        "(default: the verify stage's lscpu flags; without them, no AMX rules)",
        per_host=True,
    ),
    Knob(
        "llmb_ktransformers_rules",
        "str",
        None,
        "KTransformers' GPU/CPU split: a rules file the release ships for the model, by GPU count, e.g. "
        "DeepSeek-V3-Chat-multi-gpu-4.yaml (default: one GPU, the AMX rules where the CPU has AMX)",
        format="name",
    ),
    _port("llmb_sshd_port", 2233, "sshd inside the engine container for mpirun (TRT-LLM)"),
    Knob(
        "llmb_ssh_mesh_dir",
        "str",
        "/etc/llmb/ssh-mesh",
        "node dir of the ssh_mesh stage's key, known_hosts, ssh_config and sshd_config (mounted into TRT-LLM containers)",
        format="path",
    ),
    # model serving ---------------------------------------------------------------------
    Knob(
        "llmb_served_model_name",
        "str",
        None,
        "name clients send as 'model' (default: model profile's)",
        format="served_name",
    ),
    Knob(
        "llmb_preset",
        "str",
        None,
        "tuning preset, data/presets/<name>.yml (long-context | low-latency | high-throughput | none)",
        format="name",
    ),
    Knob(
        "llmb_engine_args",
        "dict",
        {},
        "engine flags as name: value (true = switch on, false = --no-...)",
        keys="flag_name",
    ),
    Knob(
        "llmb_engine_extra_args",
        "list",
        [],
        "engine flags as raw argv tokens, appended last",
        elements="scalar",
    ),
    Knob(
        "llmb_engine_flags_unchecked",
        "list",
        [],
        "flags the pinned flag set lacks but the release has",
        elements="flag_name",
    ),
    Knob(
        "llmb_engine_env",
        "dict",
        {},
        "extra environment (null value removes a default)",
        keys="env_key",
        values="scalar",
    ),
    Knob(
        "llmb_compile_cache_dir",
        "str",
        COMPILE_CACHE_DIR,
        "compile and kernel caches: each engine service gets <dir>/<service> (torch inductor, Triton, "
        "vLLM's cache root, FlashInfer / DeepGEMM JIT); a variable set null in llmb_engine_env is left out)",
        format="path",
    ),
    Knob(
        "llmb_engine_venv",
        "str",
        None,
        "host install: engine venv (default /opt/llmb/venvs/<engine>-<version>)",
        format="path",
    ),
    # containers ------------------------------------------------------------------------
    Knob(
        "llmb_container_image",
        "str",
        None,
        "container install: image (default from the flag set's images)",
        format="image",
    ),
    Knob(
        "llmb_container_name",
        "str",
        None,
        "container name (default llmb-<engine>)",
        format="container_name",
    ),
    Knob(
        "llmb_container_model_dir",
        "str",
        None,
        "weights path inside the container "
        "(default: derived from llmb_container_mounts, else llmb_model_dir mounted at the same path)",
        format="path",
    ),
    Knob(
        "llmb_container_mounts",
        "list",
        [],
        "extra mounts, docker -v syntax 'src:dst[:ro]'",
        elements="token",
    ),
    Knob("llmb_container_devices", "list", [], "extra devices, docker --device syntax", elements="token"),
    Knob(
        "llmb_container_nvidia_gpus",
        "str",
        "gpus",
        "how NVIDIA GPUs reach engine containers: gpus (--gpus all) | cdi (--device nvidia.com/gpu=all) | "
        "devices (--device /dev/nvidia*)",
        choices=("gpus", "cdi", "devices"),
    ),
    Knob(
        "llmb_container_options",
        "dict",
        {},
        "docker options over the platform defaults: network, ipc, "
        "shm_size, privileged, cap_add, security_opt, group_add, ulimits, gpus, workdir, entrypoint, "
        "restart",
    ),
    Knob(
        "llmb_config_dir",
        "str",
        "/etc/llmb",
        "host directory for generated engine config files",
        format="path",
    ),
    Knob(
        "llmb_trtllm_extra_llm_api_options",
        "dict",
        None,
        "TRT-LLM extra LLM API options (default: seed 004's)",
    ),
    # health ----------------------------------------------------------------------------
    _timeout("llmb_health_timeout_s", 1800, "how long the API may take to become healthy (model load)"),
    _timeout("llmb_ready_timeout_s", 300, "how long a Ray head / DP master / sshd may take to listen"),
)

KNOB_BY_NAME = {k.name: k for k in KNOBS}

def _toolkit_knob(name: str, type_: str, default: Any, doc: str, **more: Any) -> Knob:
    """A variable of another stage or script (stage "run"): the planner neither reads it nor needs it plain."""
    return Knob(name, type_, default, doc, stage="run", needs_plain=False, **more)


# llmb_* variables of the whole toolkit that the planner does not read (other stages, scripts)
TOOLKIT_KNOBS: tuple[Knob, ...] = (
    _toolkit_knob("llmb_run_id", "str", None, "run identifier (artifacts/<run id>/)", format="name"),
    _toolkit_knob("llmb_artifacts_dir", "str", None, "results directory on the controller"),
    _toolkit_knob("llmb_sim_cluster", "str", None, "scripts/sim-cluster: the simulated cluster's name"),
    _toolkit_knob("llmb_sim_profile", "str", None, "scripts/sim-cluster: the simulated platform"),
    _toolkit_knob("llmb_recover_host", "str", None, "playbooks/recover.yml: the node to rebuild (-e)"),
    _toolkit_knob("llmb_recover_hostkey", "str", None, "playbooks/recover.yml: SHA256 fingerprint of the replaced "
                  "node's new host key to accept (-e)"),
    _toolkit_knob("llmb_stage_started", "str", None,
                  "playbooks/_run.yml: when the stage started (the report's durations)"),
    _toolkit_knob("llmb_report_stages", "list", None, "playbooks/report.yml: the stages the run was to complete"),
    _toolkit_knob("llmb_repin", "bool", False, "stage 0: resolve the model commit and image digests again (-e)"),
    _toolkit_knob("llmb_rollback_to", "int", None, "stage 0: re-apply the deployment of lock history entry N "
                  "(<inventory>/llmb.lock.history/, llmb rollback) instead of planning (-e)", min=1),
    _toolkit_knob("llmb_model_revision", "str", None, "stage 0: the model's revision, a 40-hex commit or a branch/tag "
                  "(default: the profile's revision); a branch is resolved at the hub and locked in llmb.lock.json",
                  format="token"),
    _toolkit_knob("engine_image_pins", "dict", {}, "stage 0: image -> {digest, id} pinned by the site (no registry "
                  "asked); else the tag is resolved at the registry and locked in llmb.lock.json"),
    _toolkit_knob("llmb_accel", "dict", None, "fact: the verify stage's accelerator facts (kept in the fact cache)"),
    _toolkit_knob("llmb_stage_needs_plan", "str", None, "playbooks/_run.yml: the stage that needs the launch plan"),
    _toolkit_knob("llmb_deployment_doc", "dict", None, "playbooks/_run.yml: the resolved deployment document (fact)"),
    _toolkit_knob("llmb_fast_rerun", "bool", True, "stages engine, weights, ssh_mesh, serve: end a stage at once where "
                  "its inputs and every node's state are those recorded at its last converged run (docs/scale.md); "
                  "false runs every task"),
)
