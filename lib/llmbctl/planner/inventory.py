"""The inventory variables the planner reads, their types, ranges and formats, and how they are read.

``KNOBS`` is the single table of the serve stage's variables; the sample inventories document
every one of them (a unit test holds them to it) and docs/launch-plan.md describes them.
Variables shared with other stages keep the names agreed for the whole toolkit: llmb_platform,
llmb_model, llmb_engine, llmb_engine_version, llmb_install, llmb_model_dir, llmb_cluster_iface,
llmb_node_ip / ansible_host, llmb_head and the group accel_nodes.

Every ``llmb_*`` variable and every stage variable (``weights_*``, ``verify_*``, ``ssh_mesh_*``,
``engine_host_*``, ``engine_image_*``, ``bench_*``, ``serve_*``, ``accuracy_*``) of every host is checked here,
before anything else is planned: the name must be known (a misspelling gets "did you mean"), the
value must have the declared type, range and format, no string anywhere in an ``llmb_*`` value may
hold a control character, and a cluster-wide knob may not be set on one host. The stage variables'
names and types are read from roles/*/meta/argument_specs.yml, so the two never disagree.

Where a value was set (group or host) is told by the caller as ``host_set``: for each host the
names set on the host itself (hosts.yml host entry or host_vars/). scripts/launch-plan records
them while it merges the inventory; the filter plugin asks Ansible's inventory for them.
"""

from __future__ import annotations

import datetime
import difflib
import ipaddress
import math
import os
import posixpath
import re
import unicodedata
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from llmbctl import REPO_ROOT

from ..engines import registry
from .model import Problem

GROUP = "accel_nodes"


def engine_names() -> tuple[str, ...]:
    """llmb_engine's values: the engine registry (llmbctl.engines.registry), the one list of engines."""
    return registry.engine_names()


PRESETS_DIR_HINT = "data/presets/<name>.yml"

# variable name prefixes of the stages whose roles declare their options in meta/argument_specs.yml
STAGE_PREFIXES = ("weights_", "verify_", "ssh_mesh_", "engine_host_", "engine_image_", "bench_", "serve_",
                  "accuracy_")
ROLES_DIR = REPO_ROOT / "roles"

# Role variables whose value the deployment document holds (stage 0 decides it once; the roles read
# it from llmb_deployment). Set in an inventory they would override the document without a word, so
# check_variables refuses them and names what to set instead. The Molecule scenarios and the perf
# harnesses that run a role alone may still hand them in with LLMB_ROLE_TEST_VARS=1 in the
# environment (a test-only route: an inventory cannot set an environment variable).
DOC_OWNED: dict[str, tuple[str, str]] = {
    "engine_host_engine": ("engine.name", "llmb_engine"),
    "engine_host_version": ("engine.version", "llmb_engine_version"),
    "engine_host_venv": ("engine.venv", "llmb_engine_venv"),
    "engine_host_packages": ("hosts.<host>.packages", "llmb_engine (the plan names the packages each planned service runs)"),
    "engine_host_channel": ("engine.channel", "llmb_platform (the channel follows the platform's vendor)"),
    "engine_image_image": ("engine.image.ref", "llmb_container_image"),
    "engine_image_digest": ("engine.image.digest", "engine_image_pins ({IMAGE: {digest: sha256:...}})"),
    "engine_image_id": ("engine.image.id", "engine_image_pins ({IMAGE: {id: sha256:...}})"),
    "weights_model": ("model.profile", "llmb_model"),
    "weights_repo_id": ("model.repo_id", "llmb_model (a profile under data/models/ names the repository)"),
    "weights_revision": ("model.commit", "llmb_model_revision (resolved and locked in llmb.lock.json)"),
    "weights_allow_patterns": ("model.allow_patterns", "llmb_model (the profile's files.allow_patterns)"),
    "weights_dir": ("model.dir", "llmb_model_dir"),
    "weights_config_patches": ("hosts.<host>.config_patches", "llmb_model (the profile's config patches)"),
    "ssh_mesh_dir": ("dirs.ssh_mesh", "llmb_ssh_mesh_dir"),
    "ssh_mesh_container_sshd": ("engine.name", "llmb_engine (trtllm runs the container sshd)"),
    "ssh_mesh_container_port": ("ports.sshd", "llmb_sshd_port"),
    "verify_platform": ("platform.name", "llmb_platform"),
    "verify_run_id": ("run.id", "llmb_run_id (LLMB_RUN_ID)"),
    "verify_artifacts_dir": ("run.artifacts_dir", "llmb_artifacts_dir (LLMB_ARTIFACTS_DIR)"),
}
ROLE_TEST_VARS_ENV = "LLMB_ROLE_TEST_VARS"


def doc_owned_problem(name: str) -> Problem:
    """The refusal of a role variable that would override the deployment document."""
    field_, instead = DOC_OWNED[name]
    knob = instead.split(" ", 1)[0]
    return Problem(
        check="document-owned",
        message=f"{name} is set in the inventory, but its value is the deployment document's {field_}: "
        f"the role reads the document, and {name} would silently override it",
        found=name,
        expected=f"{knob} (the document's {field_} is resolved from it once, in stage 0)",
        fix=f"remove {name} and set {instead} instead",
    )


PARALLEL_MAX = 65536  # devices in one deployment: 8,192 nodes of 8
TIMEOUT_MAX = 7 * 86400
VAULT_FIX = (
    "give the vault password: scripts/launch-plan --vault-password-file FILE (or --vault-id ID@FILE, "
    "or ANSIBLE_VAULT_PASSWORD_FILE), ansible-playbook --vault-password-file FILE"
)


@dataclass(frozen=True)
class Knob:
    name: str
    type: str  # str | int | float | bool | list | dict | any
    default: Any
    doc: str
    choices: tuple[str, ...] | Any = None  # or a function returning them (read through .allowed)
    required: bool = False
    nullable: bool = True
    per_host: bool = False
    min: float | None = None
    max: float | None = None
    format: str | None = None  # a key of FORMATS, for str values
    elements: str | None = None  # list: "str" | "scalar" | "int" | "dict" | a key of FORMATS
    keys: str | None = None  # dict: a key of FORMATS its keys must match
    values: str | None = None  # dict: "scalar" (str, number, bool or null)
    stage: str = "serve"  # serve (the planner's), run (toolkit-wide), or the role that declares it
    needs_plain: bool = True  # the planner reads the plain value (a vaulted one needs the password)
    schema: Any = None  # a function(name, value) -> problems of a nested value (after the type check)

    @property
    def allowed(self) -> tuple[str, ...] | None:
        return tuple(self.choices()) if callable(self.choices) else self.choices


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
)


class Vaulted:
    """A vault-encrypted value whose secret was not given (or did not open it): opaque, never shown.

    ``token`` tells equal ciphertexts apart from different ones (for the cross-host comparison);
    ``error`` is set when a secret was given but could not decrypt the value.
    """

    __slots__ = ("error", "token")

    def __init__(self, token: str = "", error: str | None = None):
        self.token = token
        self.error = error

    def __repr__(self) -> str:
        return "<vaulted>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vaulted) and bool(self.token) and self.token == other.token

    def __hash__(self) -> int:
        return hash(self.token)


# formats of string values ------------------------------------------------------------------
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*\Z")
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/+@%=,~-]+\Z")
_IFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}\Z")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
_CONTAINER = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*\Z")
_FLAG_NAME = re.compile(r"-{0,2}[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN = re.compile(r"\S+\Z")
_IB_DEVICE = re.compile(r"[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64}){0,63}\Z")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")


def is_path(value: str) -> bool:
    """Absolute, normalized (no '.', '..' or empty segments), of safe characters."""
    if not value.startswith("/") or not _PATH_CHARS.match(value):
        return False
    body = value.rstrip("/") or "/"
    return posixpath.normpath(body) == body and ".." not in body.split("/") and "." not in body.split("/")


def is_address(value: str) -> bool:
    """An IPv4/IPv6 literal or an RFC 1123 host name."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    if not value or len(value) > 253:
        return False
    labels = value[:-1].split(".") if value.endswith(".") else value.split(".")
    return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()


def is_served_name(value: str) -> bool:
    if not value or value.startswith("/") or any(c.isspace() for c in value):
        return False
    return not any(seg in ("", ".", "..") for seg in value.split("/"))


FORMATS: dict[str, tuple[Any, str]] = {
    "name": (
        lambda v: bool(_NAME.match(v)) and ".." not in v,
        "a name of letters, digits, '.', '_' and '-' (a file name under data/)",
    ),
    "version": (
        lambda v: bool(_VERSION.match(v)),
        "a release like 0.19.1 (letters, digits, '.', '+', '_', '-')",
    ),
    "path": (
        is_path,
        "an absolute, normalized path (no '.' or '..' segments, no '//') of letters, digits and ._/+@%=,~-",
    ),
    "address": (is_address, "an IP address or an RFC 1123 host name"),
    "iface": (lambda v: bool(_IFACE.match(v)), "a network interface name (1-15 of letters, digits, ._:@-)"),
    "image": (lambda v: bool(_IMAGE.match(v)), "an image reference like registry/repo:tag (no spaces)"),
    "container_name": (
        lambda v: bool(_CONTAINER.match(v)),
        "a Docker container name: [a-zA-Z0-9][a-zA-Z0-9_.-]*",
    ),
    "served_name": (
        is_served_name,
        "a model name without whitespace, leading '/' or '.'/'..' segments (e.g. kimi-k2 or org/model)",
    ),
    "flag_name": (lambda v: bool(_FLAG_NAME.match(v)), "a flag name like max-model-len or --max-model-len"),
    "env_key": (lambda v: bool(_ENV_KEY.match(v)), "an environment variable name: ^[A-Za-z_][A-Za-z0-9_]*$"),
    "token": (lambda v: bool(_TOKEN.match(v)), "one word without spaces"),
    "ib_device": (lambda v: bool(_IB_DEVICE.match(v)), "RDMA device names like mlx5_0 or mlx5_0,mlx5_1"),
}

_ARTICLE = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "a mapping",
    "any": "a value",
    "scalar": "a string or a number",
}


def _article(kind: str) -> str:
    return _ARTICLE.get(kind, "a string")


def _expected(knob: Knob) -> str:
    if knob.allowed:
        return " | ".join(knob.allowed)
    text = _article(knob.type)
    if knob.min is not None or knob.max is not None:
        text += f" from {_num(knob.min)} to {_num(knob.max)}" if knob.max is not None else f" >= {knob.min}"
    if knob.format:
        text += ": " + FORMATS[knob.format][1]
    return text


def _num(x: float | None) -> str:
    return "" if x is None else (str(int(x)) if float(x).is_integer() else str(x))


def type_name(value: Any) -> str:
    """The plain YAML type of a value, for messages (never an internal class name)."""
    if value is None:
        return "null"
    if isinstance(value, Vaulted):
        return "vaulted"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "date"
    return "unsupported value"


def shown(value: Any, limit: int = 80) -> str:
    """A value as a message shows it: repr (control characters escaped), shortened, vault opaque."""
    if isinstance(value, Vaulted):
        return "<vaulted>"
    try:
        text = repr(plain(value))
    except Exception:  # a value that cannot even be shown is named by its type
        text = f"<{type_name(value)}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plain(value: Any, vault: Any = None) -> Any:
    """Ansible hands over tagged str/int/float and lazy containers; turn them into plain Python.

    The one converter of inventory values (the planner, the deployment and scripts/launch-plan).
    ``vault``: what to make of a vault-encrypted value (scripts/launch-plan passes its own, which
    decrypts it when a secret was given, else gives a ``Vaulted``); without it the value is left to
    Ansible (stage 0 reads decrypted values)."""
    if value is None or isinstance(value, Vaulted):
        return value
    if vault is not None and (
        type(value).__name__ == "EncryptedString" or (isinstance(value, dict) and set(value) == {"__ansible_vault"})
    ):
        return vault(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {(k if isinstance(k, Vaulted) else str(k)): plain(v, vault) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, vault) for v in value]
    return value




def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _bad_char(text: str) -> str | None:
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return ch
    return None


_CHAR_NAMES = {"\n": "line feed", "\r": "carriage return", "\t": "tab", "\x1b": "escape", "\x7f": "delete",
               "\x00": "NUL", "\u2028": "line separator", "\u2029": "paragraph separator"}


def _char_name(ch: str) -> str:
    return f"{_CHAR_NAMES.get(ch, 'control character')}, U+{ord(ch):04X}"


def _walk_strings(value: Any, where: str) -> list[tuple[str, str, Any]]:
    """(where, problem kind, offending value) for control characters and non-finite numbers, nested."""
    out: list[tuple[str, str, Any]] = []
    if isinstance(value, str):
        if _bad_char(value) is not None:
            out.append((where, "control", value))
    elif isinstance(value, float) and not math.isfinite(value):
        out.append((where, "finite", value))
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and _bad_char(k) is not None:
                out.append((f"{where} key {k!r}", "control", k))
            out.extend(_walk_strings(v, f"{where}[{k!r}]"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_walk_strings(v, f"{where}[{i}]"))
    return out


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "any":
        return True
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "scalar":
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


_TRUE = ("true", "yes", "on", "y", "t", "1")
_FALSE = ("false", "no", "off", "n", "f", "0")


def _role_coerce(kind: str, value: Any) -> Any:
    """A variable's string as a role's argument_spec takes it: Ansible converts '20' to an int,
    '0.5' to a float and 'yes' to a bool (what `-e key=value` always gives, for the llmb_* knobs as
    for the stage variables); anything else is left for the type check to refuse, naming the
    variable."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if kind == "int" and re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if kind == "float":
        try:
            number = float(text)
        except ValueError:
            return value
        return number if math.isfinite(number) else value
    if kind == "bool" and text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    return value


def check_value(knob: Knob, value: Any) -> list[Problem]:
    """Every problem of one plain value of one variable (type, finiteness, range, choices, format)."""
    name = knob.name
    if isinstance(value, Vaulted):
        if value.error:
            return [
                Problem(
                    check="vault",
                    message=f"{name} is vaulted and the vault secret given does not open it ({value.error})",
                    found="<vaulted>",
                    expected="the vault password the value was encrypted with",
                    fix=VAULT_FIX,
                )
            ]
        if knob.needs_plain and knob.stage == "serve":
            return [
                Problem(
                    check="vault",
                    message=f"{name} is vaulted and no vault secret was given; "
                    "the planner needs its plain value",
                    found="<vaulted>",
                    expected="a vault secret, or the value unencrypted",
                    fix=VAULT_FIX,
                )
            ]
        return []  # opaque: a vaulted string is a string
    if is_template(value) and knob.stage != "serve":
        return []  # Ansible templates stage variables at run time; the role's argument_spec checks them
    problems: list[Problem] = []
    for where, kind, bad in _walk_strings(value, name):
        if kind == "control":
            ch = _bad_char(bad) or ""
            problems.append(
                Problem(
                    check="characters",
                    message=f"{where} contains the control character {ch!r} "
                    f"({_char_name(ch)}); a line break would start a new line in a "
                    "systemd unit, EnvironmentFile or shell command",
                    found=shown(bad),
                    expected="text without control characters (no newline, tab, carriage return, escape...)",
                    fix=f"remove the control character from {where}",
                )
            )
        else:
            problems.append(
                Problem(
                    check="range",
                    message=f"{where} is {bad}, not a finite number",
                    found=shown(bad),
                    expected="a finite number",
                    fix=f"give {where} a plain number",
                )
            )
    if problems:
        return problems
    if "." not in name:  # `-e key=value` gives a top-level variable as text: converted as the roles' specs do
        value = _role_coerce(knob.type, value)
    if not _type_ok(knob.type, value):
        hint = ""
        if knob.type in ("int", "float") and isinstance(value, str):
            hint = f" ({shown(value)} does not convert to {_article(knob.type)}"
            hint += "; scripts/launch-plan reads literal values, no Jinja)" if is_template(value) else ")"
        return [_wrong_type(f"{name} must be {_article(knob.type)} ({knob.doc})", value, _expected(knob),
                            f"give {name} {_article(knob.type)} value{hint}")]
    if knob.type == "float" and not math.isfinite(value):
        return [Problem("range", f"{name} must be a finite number", found=shown(value), fix=f"set {name}")]
    if knob.type in ("int", "float") and (
        (knob.min is not None and value < knob.min) or (knob.max is not None and value > knob.max)
    ):
        unset = ""
        if value == 0 and knob.default is None:
            unset = f"; 0 is not 'unset': leave {name} out for the default"
        return [
            Problem(
                check="range",
                message=f"{name} is {value}, out of range{unset} ({knob.doc})",
                found=value,
                expected=_expected(knob),
                fix=f"set {name} to {_expected(knob)}",
            )
        ]
    if knob.allowed and value not in knob.allowed:
        return [
            Problem(
                check="choice",
                message=f"{name} has an unknown value",
                found=shown(value),
                expected=" | ".join(knob.allowed),
                fix=f"set {name} to one of {', '.join(knob.allowed)}",
            )
        ]
    if knob.format and isinstance(value, str):
        ok, text = FORMATS[knob.format]
        if not ok(value):
            problems.append(_bad_format(f"{name} is not {text}", shown(value), text, f"set {name} to {text}"))
    if knob.type == "list" and knob.elements:
        for i, item in enumerate(value):
            problems.extend(_check_item(f"{name}[{i}]", knob.elements, item))
    if knob.type == "dict":
        for key, item in value.items():
            if knob.keys and not (isinstance(key, str) and FORMATS[knob.keys][0](key)):
                text = FORMATS[knob.keys][1]
                problems.append(_bad_format(f"{name} has the key {shown(key)}, which is not {text}", shown(key),
                                            text, f"rename the key {shown(key)} of {name}"))
            if knob.values == "scalar" and item is not None and not _type_ok("scalar", item):
                if not isinstance(item, bool):
                    problems.append(_wrong_type(
                        f"{name}[{key!r}] must be a string or a number", item,
                        "a string, a number, true/false, or null (removes a default)",
                        f"write {name}[{key!r}] as one value, e.g. quoted text"))
    if knob.schema is not None and not problems:
        problems.extend(knob.schema(name, value))
    return problems


def _check_item(where: str, kind: str, item: Any) -> list[Problem]:
    if kind in FORMATS:
        ok, text = FORMATS[kind]
        if not isinstance(item, str):
            return [_wrong_type(f"{where} must be a string", item, text, f"write {where} as one string")]
        if not ok(item):
            return [_bad_format(f"{where} is not {text}", shown(item), text, f"write {where} as {text}")]
        return []
    if not _type_ok(kind, item):
        argv = " (one argv token; a list or mapping would reach argv as Python text)" if kind == "scalar" else ""
        return [_wrong_type(f"{where} must be {_article(kind)}", item, _article(kind),
                            f"write {where} as {_article(kind)}{argv}")]
    return []


def _wrong_type(message: str, value: Any, expected: Any, fix: str) -> Problem:
    """check ``type``: ``value`` (found: shown with its YAML type) is not what the knob takes."""
    return Problem("type", message, found=f"{shown(value)} ({type_name(value)})", expected=expected, fix=fix)


def _bad_format(message: str, found: str, text: str, fix: str) -> Problem:
    """check ``format``: a string (or a key) that is not ``text`` (the format's words, also what is expected)."""
    return Problem("format", message, found=found, expected=text, fix=fix)


# llmb_disaggregation's nested keys (planner/disagg.py plans with them) ----------------------------
DISAGG_VAR = "llmb_disaggregation"
DISAGG_ROLES = ("prefill", "decode")
DISAGG_PARALLEL_MAX = 65536

# the keys of one group (llmb_disaggregation.prefill / .decode), checked like every knob
DISAGG_GROUP_KEYS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("group", "str", None, "the child group of accel_nodes (default: prefill_nodes / decode_nodes)",
             format="name"),
        Knob("tensor_parallel", "int", None, "TP size of the group (default: the group's devices)", min=1,
             max=DISAGG_PARALLEL_MAX),
        Knob("data_parallel", "int", 1, "DP size of the group (with --enable-dp-attention it divides TP)",
             min=1, max=DISAGG_PARALLEL_MAX),
        Knob("expert_parallel_size", "int", None, "EP size of the group (--ep-size)", min=1, max=DISAGG_PARALLEL_MAX),
        Knob("memory_fraction", "float", None, "the group's memory fraction (SGLang --mem-fraction-static)",
             min=0.01, max=1.0),
        Knob("context_length", "int", None, "the group's context length (SGLang --context-length)", min=1,
             max=16777216),
        Knob("engine_args", "dict", {}, "the group's engine flags over llmb_engine_args (name: value)",
             keys="flag_name"),
        Knob("engine_env", "dict", {}, "the group's environment over llmb_engine_env", keys="env_key",
             values="scalar"),
        Knob("instances", "int", 1, "independent instances of the role behind the one router: the group's "
             "nodes split evenly, each instance its own cluster with the group's sizes", min=1, max=4096),
    )
}
DISAGG_ROUTER_KEYS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("host", "str", None, "the host of accel_nodes that runs the router (default: prefill node 0)"),
        Knob("port", "int", 8000, "the router's port: the one endpoint clients use", min=1, max=65535),
        Knob("policy", "str", None, "sglang-router --policy (random, round_robin, cache_aware, power_of_two)",
             choices=("random", "round_robin", "cache_aware", "power_of_two")),
    )
}
DISAGG_TOP_KEYS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob("bootstrap_port", "int", 8998, "--disaggregation-bootstrap-port of the prefill group", min=1,
             max=65535),
        Knob("ib_device", "str", None, "RDMA device(s) of every node unless llmb_ib_device says otherwise",
             format="ib_device"),
        Knob("transfer_backend", "str", None, "--disaggregation-transfer-backend (default: the release's)",
             format="name"),
    )
}


def _disagg_knob(name: str, knob: Knob) -> Knob:
    return replace(knob, name=name, schema=None)


def _disagg_mapping(name: str, value: Any, keys: dict[str, Knob]) -> list[Problem]:
    problems: list[Problem] = []
    for key, item in value.items():
        where = f"{name}.{key}"
        knob = keys.get(str(key))
        if knob is None:
            problems.append(
                Problem(
                    check="unknown-variable",
                    message=f"{where} is not a key of {name}; it would be ignored without a word",
                    found=str(key),
                    expected=" | ".join(keys),
                    fix=f"remove {where}, or use one of the keys above",
                )
            )
            continue
        if item is not None:
            problems.extend(check_value(_disagg_knob(where, knob), item))
    return problems


def check_disaggregation(name: str, value: Any) -> list[Problem]:
    """The nested keys of llmb_disaggregation: known, of their type, range and format (naming the key)."""
    problems: list[Problem] = []
    for key, item in value.items():
        where = f"{name}.{key}"
        if key in DISAGG_ROLES or key == "router":
            if not isinstance(item, dict):
                problems.append(
                    Problem(
                        check="type",
                        message=f"{where} must be a mapping",
                        found=repr(item)[:80],
                        expected="a mapping of " + " | ".join(DISAGG_GROUP_KEYS if key in DISAGG_ROLES else DISAGG_ROUTER_KEYS),
                        fix=f"write {where} as a mapping (see docs/disaggregation.md)",
                    )
                )
                continue
            problems.extend(_disagg_mapping(where, item, DISAGG_GROUP_KEYS if key in DISAGG_ROLES else DISAGG_ROUTER_KEYS))
        elif key in DISAGG_TOP_KEYS:
            if item is not None:
                problems.extend(check_value(_disagg_knob(where, DISAGG_TOP_KEYS[key]), item))
        else:
            problems.extend(_disagg_mapping(name, {key: item}, {**DISAGG_TOP_KEYS, "prefill": None, "decode": None,
                                                         "router": None}))  # type: ignore[dict-item]
    for role in DISAGG_ROLES:
        if role not in value:
            problems.append(
                Problem(
                    check="required",
                    message=f"{name}.{role} is not set: a disaggregated deployment has a prefill and a "
                    "decode group",
                    expected=f"{name}.{role}: {{group: {role}_nodes, tensor_parallel: ..., ...}}",
                    fix=f"add {name}.{role} (docs/disaggregation.md)",
                )
            )
    return problems


# stage variables, from the roles' argument specs -------------------------------------------
_SPEC_TYPES = {"str": "str", "path": "str", "raw": "any", "int": "int", "float": "float", "bool": "bool",
               "list": "list", "dict": "dict"}


@lru_cache(maxsize=4)
def stage_knobs(roles_dir: str | None = None) -> dict[str, Knob]:
    """Knobs of the stage roles' options (every entry point of roles/*/meta/argument_specs.yml).

    Options named llmb_* are the toolkit's shared variables and stay in KNOBS (a test holds the two
    to agree). Ports get 1-65535, and timeouts, fan-outs (_radix) and parallelism (_parallel) a positive value
    on top of the declared type.
    Empty when the roles are not beside this file (llmbctl installed elsewhere).
    """
    root = Path(roles_dir) if roles_dir else ROLES_DIR
    out: dict[str, Knob] = {}
    if not root.is_dir():
        return out
    import yaml  # controller side only

    for spec_file in sorted(root.glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        doc = yaml.safe_load(spec_file.read_text()) or {}
        for entry in (doc.get("argument_specs") or {}).values():
            for opt, spec in ((entry or {}).get("options") or {}).items():
                if opt.startswith("llmb_") or opt in out:
                    continue
                spec = spec or {}
                kind = _SPEC_TYPES.get(str(spec.get("type", "str")), "any")
                lo = hi = None
                if kind == "int" and opt.endswith("_port"):
                    lo, hi = 1, 65535
                elif kind in ("int", "float") and re.search(r"_timeout(_s)?$", opt):
                    lo = 1
                elif kind == "int" and re.search(r"_(radix|parallel)$", opt):
                    lo = 1
                elements = spec.get("elements")
                out[opt] = Knob(
                    opt,
                    kind,
                    spec.get("default"),
                    str(spec.get("description") or "").strip(),
                    choices=tuple(spec["choices"]) if spec.get("choices") else None,
                    min=lo,
                    max=hi,
                    elements=_SPEC_TYPES.get(elements) if elements in ("int", "dict") else None,
                    stage=role,
                    needs_plain=False,
                )
    return out


def known_variables(roles_dir: str | None = None) -> dict[str, Knob]:
    """Every variable name the toolkit knows, llmb_* and stage-prefixed."""
    known = {k.name: k for k in TOOLKIT_KNOBS}
    known.update(stage_knobs(roles_dir))
    known.update(KNOB_BY_NAME)
    return known


def is_checked_name(name: str) -> bool:
    return name.startswith("llmb_") or name.startswith(STAGE_PREFIXES)


def _unknown(name: str, known: dict[str, Knob]) -> Problem:
    prefix = "llmb_" if name.startswith("llmb_") else next(p for p in STAGE_PREFIXES if name.startswith(p))
    pool = [n for n in known if n.startswith(prefix)] or list(known)
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    if close:
        fix = f"did you mean {close[0]}? ({known[close[0]].doc})"
    else:
        fix = (
            "remove it (the known names are listed in docs/launch-plan.md and the roles' "
            "meta/argument_specs.yml)"
        )
    return Problem(
        check="unknown-variable",
        message=f"{name} is not a variable of llm-bringup; it would be ignored without a word",
        found=name,
        expected=f"one of the {prefix}* variables",
        fix=fix,
    )


def read_var(hv: Any, key: str) -> tuple[Any, str | None]:
    """A host's value (None when unset) or the reason it could not be read: the one reader of
    inventory values (the planner and llmbctl.deployment)."""
    if hv is None:
        return None, None
    try:
        value = plain(hv.get(key))
    except Exception as exc:  # an undecryptable vault value or a failing template: name the variable
        text = str(exc).strip().splitlines()
        return None, (text[0] if text else type(exc).__name__)
    knob = KNOB_BY_NAME.get(key)
    return (_role_coerce(knob.type, value) if knob is not None else value), None


def check_variables(
    hostvars: Any, names: list[str], host_set: dict[str, Any] | None = None, roles_dir: str | None = None
) -> list[Problem]:
    """Names, scopes and values of every llmb_* and stage variable of the hosts.

    A problem that every host shares (a group variable) is listed once without a host.
    """
    known = known_variables(roles_dir)
    checked_stage = bool(stage_knobs(roles_dir))
    found: dict[tuple[str, str, str], tuple[Problem, list[str]]] = {}
    memo: dict[tuple[str, type, Any], list[Problem]] = {}

    def add(problem: Problem, host: str) -> None:
        key = (problem.check, problem.message, str(problem.found))
        if key in found:
            found[key][1].append(host)
        else:
            found[key] = (problem, [host])

    role_test_vars = os.environ.get(ROLE_TEST_VARS_ENV, "") == "1"
    for host in names:
        hv = hostvars[host]
        keys = sorted(str(k) for k in (hv.keys() if hv is not None else []) if is_checked_name(str(k)))
        for key in keys:
            if key in DOC_OWNED and not role_test_vars:
                add(doc_owned_problem(key), host)
                continue
            if key not in known:
                if key.startswith("llmb_") or checked_stage:
                    add(_unknown(key, known), host)
                continue
            knob = known[key]
            value, error = read_var(hv, key)
            if error is not None:
                add(
                    Problem(
                        check="read",
                        message=f"{key} could not be read: {error}",
                        found="<unreadable>",
                        fix=VAULT_FIX if "vault" in error.lower() else f"fix the value of {key}",
                    ),
                    host,
                )
                continue
            if value is None:
                continue
            if isinstance(value, (str, int, float)):  # group values repeat on every host: check once
                memo_key = (key, type(value), value)
                if memo_key not in memo:
                    memo[memo_key] = check_value(knob, value)
                value_problems = memo[memo_key]
            else:
                value_problems = check_value(knob, value)
            for problem in value_problems:
                add(problem, host)
        own = (host_set or {}).get(host) or ()
        for key in sorted(str(k) for k in own):
            knob = KNOB_BY_NAME.get(key)
            if knob is not None and not knob.per_host:
                add(
                    Problem(
                        check="scope",
                        message=f"{key} is set on host {host} (hosts.yml or host_vars/{host}), but it is "
                        "cluster-wide: every node must run with the same value",
                        found=f"{host}: {key}",
                        expected=f"{key} in group_vars/all (or the {GROUP} group's vars)",
                        fix=f"move {key} from host {host} to group_vars/all",
                    ),
                    host,
                )
    out = []
    for problem, hosts in found.values():
        hosts = list(dict.fromkeys(hosts))
        if len(hosts) < len(names) or len(names) == 1:
            problem.host = problem.host or (", ".join(hosts[:3]) + (" ..." if len(hosts) > 3 else ""))
            if len(names) == 1:
                problem.host = None
        out.append(problem)
    return out


@dataclass
class Node:
    name: str
    address: str
    rank: int
    rdma_rails: tuple[str, ...] = ()  # llmb_rdma_rails (verify's tag fabric records them per host)
    rdma_gid_index: int | None = None


@dataclass
class Deployment:
    """The inventory after type checks and defaults, in the planner's terms."""

    nodes: list[Node]
    vars: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)  # the inventory's groups (host names)
    node_facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # per host: llmb_ib_device, rdma

    def __getitem__(self, key: str) -> Any:
        return self.vars[key]

    @property
    def head(self) -> Node:
        return self.nodes[0]


def group_hosts(groups: dict[str, Any]) -> list[str]:
    return [str(h) for h in (groups.get(GROUP) or [])]


def node_address(name: str, hv: Any) -> str:
    return _address_of(name, hv)[0]


def _address_of(name: str, hv: Any) -> tuple[str, str]:
    """(address, the variable it came from) of a node."""
    for key in ("llmb_node_ip", "ansible_host"):
        value, _ = read_var(hv, key)
        if value and not isinstance(value, Vaulted):
            return str(value), key
    return name, "the inventory host name"


def is_loopback(address: str) -> bool:
    if address in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def read_deployment(
    hostvars: Any, groups: dict[str, Any], host_set: dict[str, Any] | None = None
) -> tuple[Deployment | None, list[Problem]]:
    """Check every variable and put the head first. Returns (deployment or None, problems)."""
    problems: list[Problem] = []
    names = group_hosts(groups)
    if not names:
        problems.append(Problem("hosts", f"the inventory has no hosts in group {GROUP}",
                                found=f"groups: {sorted(groups)[:10]}",
                                expected=f"a group {GROUP} listing the accelerator nodes",
                                fix=f"add the nodes under 'children: {GROUP}: hosts:' in hosts.yml"))
        return None, problems
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        problems.append(
            Problem("hosts", f"hosts listed twice in {GROUP}", found=dup, fix="list each node once")
        )
        names = list(dict.fromkeys(names))

    var_problems = check_variables(hostvars, names, host_set)
    problems.extend(var_problems)
    bad_vars = {p.message.split(" ", 1)[0].split("[", 1)[0] for p in var_problems}

    head_name, _ = read_var(hostvars[names[0]], "llmb_head")
    if head_name is not None and not isinstance(head_name, Vaulted):
        head_name = str(head_name)
        if head_name not in names:
            problems.append(
                Problem(
                    check="head",
                    message=f"llmb_head names {head_name!r}, which is not in group {GROUP}",
                    found=shown(head_name),
                    expected=f"one of {names[:8]}{' ...' if len(names) > 8 else ''}",
                    fix=f"set llmb_head to a host of {GROUP} or remove it (the first host is the head)",
                )
            )
            head_name = None
    else:
        head_name = None
    ordered = list(names)
    if head_name:
        ordered.remove(head_name)
        ordered.insert(0, head_name)

    head_hv = hostvars[ordered[0]]
    values: dict[str, Any] = {}
    for knob in KNOBS:
        if knob.per_host:
            continue
        value, _ = read_var(head_hv, knob.name)
        if value is None:
            if knob.required:
                problems.append(
                    Problem(
                        check="required",
                        message=f"{knob.name} is not set ({knob.doc})",
                        expected=" | ".join(knob.allowed) if knob.allowed else _article(knob.type),
                        fix=f"set {knob.name} in the inventory's group_vars/all/",
                    )
                )
                continue
            value = knob.default
        elif knob.name in bad_vars:
            continue
        values[knob.name] = value

    # knobs that shape the whole cluster must agree on every node
    shared = [k.name for k in KNOBS if not k.per_host and k.name != "llmb_head"]
    scoped = {p.found.split(": ", 1)[1] for p in problems if p.check == "scope"}
    if len(ordered) > 1:
        for name in ordered[1:]:
            hv = hostvars[name]
            for key in shared:
                if key in scoped:
                    continue
                a, _ = read_var(head_hv, key)
                b, _ = read_var(hv, key)
                if a != b:
                    problems.append(
                        Problem(
                            check="consistency",
                            message=f"{key} differs between {ordered[0]} and {name}; the cluster needs one value",
                            found=f"{ordered[0]}: {shown(a)}, {name}: {shown(b)}",
                            fix=f"set {key} in group_vars/all, not per host",
                            host=name,
                        )
                    )

    nodes = []
    addrs: dict[str, str] = {}
    for i, n in enumerate(ordered):
        address, source = _address_of(n, hostvars[n])
        rails, _ = read_var(hostvars[n], "llmb_rdma_rails")
        gid, _ = read_var(hostvars[n], "llmb_rdma_gid_index")
        ok = not {"llmb_rdma_rails", "llmb_rdma_gid_index"} & bad_vars
        nodes.append(Node(n, address, i, tuple(str(r) for r in rails or ()) if ok else (), gid if ok else None))
        if source != "llmb_node_ip" and not is_address(address):
            problems.append(
                Problem(
                    check="format",
                    message=f"the address of {n} ({source}) is not an IP address or an RFC 1123 host name; "
                    "it would become the node's cluster address",
                    found=shown(address),
                    expected=FORMATS["address"][1],
                    fix=f"set llmb_node_ip of {n} to its cluster address",
                    host=n,
                )
            )
    for node in nodes:
        if node.address in addrs:
            problems.append(
                Problem(
                    check="addresses",
                    message=f"{node.name} and {addrs[node.address]} have the same address",
                    found=node.address,
                    fix="give every node its own llmb_node_ip (or ansible_host)",
                    host=node.name,
                )
            )
        addrs[node.address] = node.name
    node_facts: dict[str, dict[str, Any]] = {}
    for n in ordered:  # per node: what the inventory says, else what the verify stage found
        ib, _ = read_var(hostvars[n], "llmb_ib_device")
        amx, _ = read_var(hostvars[n], "llmb_cpu_amx")
        accel, _ = read_var(hostvars[n], "llmb_accel")
        accel = accel if isinstance(accel, dict) else {}
        rdma = accel.get("rdma_devices")
        if not isinstance(amx, bool):
            amx = accel.get("cpu_amx") if isinstance(accel.get("cpu_amx"), bool) else None
        node_facts[n] = {"ib_device": ib if isinstance(ib, str) else None,
                         "rdma_devices": rdma if isinstance(rdma, list) else None, "cpu_amx": amx}
    groups_seen = {str(k): [str(h) for h in (v or [])] for k, v in groups.items()}
    return Deployment(nodes=nodes, vars=values, groups=groups_seen, node_facts=node_facts), problems
