"""The inventory variables the planner reads, their types and defaults, and how they are read.

``KNOBS`` is the single table of the serve stage's variables; the sample inventories document
every one of them (a unit test holds them to it) and docs/launch-plan.md describes them.
Variables shared with other stages keep the names agreed for the whole toolkit: llmb_platform,
llmb_model, llmb_engine, llmb_engine_version, llmb_install, llmb_model_dir, llmb_cluster_iface,
llmb_node_ip / ansible_host, llmb_head and the group accel_nodes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from .model import Problem

GROUP = "accel_nodes"
ENGINES = ("vllm", "vllm-ascend", "sglang", "trtllm")
PRESETS_DIR_HINT = "data/presets/<name>.yml"


@dataclass(frozen=True)
class Knob:
    name: str
    type: str  # str | int | float | bool | list | dict
    default: Any
    doc: str
    choices: tuple[str, ...] | None = None
    required: bool = False
    nullable: bool = True
    per_host: bool = False


KNOBS: tuple[Knob, ...] = (
    # shared with every stage -----------------------------------------------------------
    Knob("llmb_platform", "str", None, "platform profile, data/platforms/<name>.yml", required=True),
    Knob("llmb_model", "str", None, "model profile, data/models/<name>.yml", required=True),
    Knob("llmb_engine", "str", None, "inference engine", choices=ENGINES, required=True),
    Knob(
        "llmb_engine_version",
        "str",
        None,
        "engine release, one of the shipped data/engines/<engine>-<version>.yml "
        "(default: the newest shipped; list: scripts/launch-plan --engine-versions)",
    ),
    Knob(
        "llmb_install",
        "str",
        "host",
        "host: uv venv + systemd units; container: image + docker",
        choices=("host", "container"),
    ),
    Knob("llmb_model_dir", "str", None, "weights directory on every node", required=True),
    Knob("llmb_cluster_iface", "str", None, "NIC for NCCL/GLOO/HCCL/VLLM_HOST_IP; required with 2+ nodes"),
    Knob(
        "llmb_head",
        "str",
        None,
        "host that is Ray head / DP rank 0 / node rank 0 / mpirun launcher "
        "(default: first host of accel_nodes)",
    ),
    Knob("llmb_node_ip", "str", None, "this node's cluster address (default: ansible_host)", per_host=True),
    # parallelism -----------------------------------------------------------------------
    Knob("llmb_tensor_parallel", "int", None, "TP size (default: devices per node)", nullable=True),
    Knob("llmb_pipeline_parallel", "int", 1, "PP size; TP x PP larger than one node runs over Ray (vLLM)"),
    Knob(
        "llmb_data_parallel", "int", 1, "DP size; >1 on several nodes runs rank 0 + --headless ranks (vLLM)"
    ),
    Knob("llmb_data_parallel_local", "int", None, "DP ranks per node (default: DP / number of nodes)"),
    Knob("llmb_decode_context_parallel", "int", 1, "DCP size (vLLM -dcp); must divide TP"),
    Knob("llmb_expert_parallel", "bool", False, "vLLM --enable-expert-parallel"),
    Knob("llmb_expert_parallel_size", "int", None, "EP size for SGLang --ep-size / TRT-LLM --ep_size"),
    # ports and addresses ---------------------------------------------------------------
    Knob("llmb_api_host", "str", "0.0.0.0", "address the OpenAI API server binds"),
    Knob("llmb_api_port", "int", 8000, "OpenAI API port"),
    Knob("llmb_ray_port", "int", 6379, "Ray GCS port on the head (Ray mode)"),
    Knob("llmb_ray_dashboard_port", "int", 8265, "Ray dashboard port on the head (Ray mode)"),
    Knob("llmb_dp_rpc_port", "int", 13345, "vLLM --data-parallel-rpc-port (DP on several nodes)"),
    Knob("llmb_sglang_dist_port", "int", 50000, "SGLang --dist-init-addr port (several nodes)"),
    Knob("llmb_sshd_port", "int", 2233, "sshd inside the engine container for mpirun (TRT-LLM)"),
    Knob(
        "llmb_ssh_mesh_dir",
        "str",
        "/etc/llmb/ssh-mesh",
        "node dir of the ssh_mesh stage's key, known_hosts, ssh_config and sshd_config (mounted into TRT-LLM containers)",
    ),
    # model serving ---------------------------------------------------------------------
    Knob("llmb_served_model_name", "str", None, "name clients send as 'model' (default: model profile's)"),
    Knob(
        "llmb_preset",
        "str",
        None,
        "tuning preset, data/presets/<name>.yml (long-context | low-latency | high-throughput | none)",
    ),
    Knob("llmb_engine_args", "dict", {}, "engine flags as name: value (true = switch on, false = --no-...)"),
    Knob("llmb_engine_extra_args", "list", [], "engine flags as raw argv tokens, appended last"),
    Knob("llmb_engine_flags_unchecked", "list", [], "flags the pinned flag set lacks but the release has"),
    Knob("llmb_engine_env", "dict", {}, "extra environment (null value removes a default)"),
    Knob(
        "llmb_engine_venv",
        "str",
        None,
        "host install: engine venv (default /opt/llmb/venvs/<engine>-<version>)",
    ),
    # containers ------------------------------------------------------------------------
    Knob(
        "llmb_container_image", "str", None, "container install: image (default from the flag set's images)"
    ),
    Knob("llmb_container_name", "str", None, "container name (default llmb-<engine>)"),
    Knob(
        "llmb_container_model_dir",
        "str",
        None,
        "weights path inside the container "
        "(default: derived from llmb_container_mounts, else llmb_model_dir mounted at the same path)",
    ),
    Knob("llmb_container_mounts", "list", [], "extra mounts, docker -v syntax 'src:dst[:ro]'"),
    Knob("llmb_container_devices", "list", [], "extra devices, docker --device syntax"),
    Knob(
        "llmb_container_options",
        "dict",
        {},
        "docker options over the platform defaults: network, ipc, "
        "shm_size, privileged, cap_add, security_opt, group_add, ulimits, gpus, workdir, entrypoint, "
        "restart",
    ),
    Knob("llmb_config_dir", "str", "/etc/llmb", "host directory for generated engine config files"),
    Knob(
        "llmb_trtllm_extra_llm_api_options",
        "dict",
        None,
        "TRT-LLM extra LLM API options (default: seed 004's)",
    ),
    # health ----------------------------------------------------------------------------
    Knob("llmb_health_timeout_s", "int", 1800, "how long the API may take to become healthy (model load)"),
    Knob("llmb_ready_timeout_s", "int", 300, "how long a Ray head / DP master / sshd may take to listen"),
)

KNOB_BY_NAME = {k.name: k for k in KNOBS}


@dataclass
class Node:
    name: str
    address: str
    rank: int


@dataclass
class Deployment:
    """The inventory after type checks and defaults, in the planner's terms."""

    nodes: list[Node]
    vars: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.vars[key]

    @property
    def head(self) -> Node:
        return self.nodes[0]


def _type_ok(knob: Knob, value: Any) -> bool:
    if value is None:
        return knob.nullable and not knob.required
    if knob.type == "str":
        return isinstance(value, str)
    if knob.type == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if knob.type == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if knob.type == "bool":
        return isinstance(value, bool)
    if knob.type == "list":
        return isinstance(value, (list, tuple))
    if knob.type == "dict":
        return isinstance(value, dict)
    return False


def _plain(value: Any) -> Any:
    """Ansible hands over AnsibleUnicode / lazy containers; turn them into plain Python."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def group_hosts(groups: dict[str, Any]) -> list[str]:
    return [str(h) for h in (groups.get(GROUP) or [])]


def node_address(name: str, hv: Any) -> str:
    for key in ("llmb_node_ip", "ansible_host"):
        value = hv.get(key) if hv is not None else None
        if value:
            return str(value)
    return name


def is_loopback(address: str) -> bool:
    if address in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def read_deployment(hostvars: Any, groups: dict[str, Any]) -> tuple[Deployment | None, list[Problem]]:
    """Type-check the knobs and put the head first. Returns (deployment or None, problems)."""
    problems: list[Problem] = []
    names = group_hosts(groups)
    if not names:
        problems.append(
            Problem(
                check="hosts",
                message=f"the inventory has no hosts in group {GROUP}",
                found=f"groups: {sorted(groups)[:10]}",
                expected=f"a group {GROUP} listing the accelerator nodes",
                fix=f"add the nodes under 'children: {GROUP}: hosts:' in hosts.yml",
            )
        )
        return None, problems
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        problems.append(
            Problem("hosts", f"hosts listed twice in {GROUP}", found=dup, fix="list each node once")
        )

    first_hv = hostvars[names[0]]
    head_name = first_hv.get("llmb_head") if first_hv is not None else None
    if head_name is not None:
        head_name = str(head_name)
        if head_name not in names:
            problems.append(
                Problem(
                    check="head",
                    message=f"llmb_head names {head_name!r}, which is not in group {GROUP}",
                    found=head_name,
                    expected=f"one of {names[:8]}{' ...' if len(names) > 8 else ''}",
                    fix=f"set llmb_head to a host of {GROUP} or remove it (the first host is the head)",
                )
            )
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
        raw = head_hv.get(knob.name) if head_hv is not None else None
        value = _plain(raw) if raw is not None else None
        if value is None:
            if knob.required:
                problems.append(
                    Problem(
                        check="required",
                        message=f"{knob.name} is not set ({knob.doc})",
                        expected=_expected(knob),
                        fix=f"set {knob.name} in the inventory's group_vars/all/",
                    )
                )
                continue
            value = knob.default
        elif not _type_ok(knob, value):
            problems.append(
                Problem(
                    check="type",
                    message=f"{knob.name} must be {_article(knob.type)} ({knob.doc})",
                    found=f"{value!r} ({type(value).__name__})",
                    expected=_expected(knob),
                    fix=f"give {knob.name} {_article(knob.type)} value"
                    + (" (no quotes around numbers)" if knob.type in ("int", "float") else ""),
                )
            )
            continue
        elif knob.choices and value not in knob.choices:
            problems.append(
                Problem(
                    check="choice",
                    message=f"{knob.name} has an unknown value",
                    found=value,
                    expected=" | ".join(knob.choices),
                    fix=f"set {knob.name} to one of {', '.join(knob.choices)}",
                )
            )
            continue
        values[knob.name] = value

    # knobs that shape the whole cluster must agree on every node
    shared = [k.name for k in KNOBS if not k.per_host and k.name != "llmb_head"]
    if len(ordered) > 1:
        for name in ordered[1:]:
            hv = hostvars[name]
            for key in shared:
                a = _plain(head_hv.get(key)) if head_hv is not None else None
                b = _plain(hv.get(key)) if hv is not None else None
                if a != b:
                    problems.append(
                        Problem(
                            check="consistency",
                            message=f"{key} differs between {ordered[0]} and {name}; the cluster needs one value",
                            found=f"{ordered[0]}: {a!r}, {name}: {b!r}",
                            fix=f"set {key} in group_vars/all, not per host",
                            host=name,
                        )
                    )

    nodes = [Node(n, node_address(n, hostvars[n]), i) for i, n in enumerate(ordered)]
    addrs: dict[str, str] = {}
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
    return Deployment(nodes=nodes, vars=values), problems


def _article(kind: str) -> str:
    return {
        "str": "a string",
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "list": "a list",
        "dict": "a mapping",
    }[kind]


def _expected(knob: Knob) -> str:
    if knob.choices:
        return " | ".join(knob.choices)
    return _article(knob.type)
