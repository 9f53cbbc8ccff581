"""The llmb_disaggregation mapping's keys (prefill / decode groups, the router) and their checks:
the schema of that knob."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .model import Problem
from .values import Knob, check_value

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
        Knob("host", "str", None, "the host that runs the router: a host of accel_nodes (default: prefill node 0) or a control node outside it"),
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
