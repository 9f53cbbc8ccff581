"""Preflight checks: parallelism against devices, engine/platform fit, model fit, ports, patches.

Every check returns Problems instead of raising, so that one preflight run lists everything
that is wrong with an inventory, each with what was found, what was expected and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import memory
from .context import Context
from .inventory import is_loopback
from .model import HostPlan, Problem

# engine -> vendors it runs on in this toolkit
ENGINE_VENDORS = {
    "vllm": ("nvidia", "amd"),
    "vllm-ascend": ("ascend",),
    "sglang": ("nvidia", "amd"),
    "trtllm": ("nvidia",),
}
# engine -> install kinds the planner can produce
ENGINE_INSTALLS = {
    "vllm": ("host", "container"),
    "vllm-ascend": ("container",),
    "sglang": ("host", "container"),
    "trtllm": ("container",),
}


@dataclass
class Topology:
    mode: str  # single | ray | dp | sglang | mpirun
    nodes: int
    devices_per_node: int
    world: int  # devices used in total
    per_node: int  # devices used per node
    tp: int
    pp: int
    dp: int
    dp_local: int
    dcp: int


def _positive(ctx: Context, key: str, value: Any, problems: list[Problem]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        problems.append(
            Problem(
                "parallelism", f"{key} must be a positive integer", found=value, fix=f"set {key} to 1 or more"
            )
        )
        return 1
    return value


def _too_few_devices(tp: int, pp: int, n: int, dev: int, devices_text: str) -> Problem:
    """TP x PP asks for more devices than the inventory's nodes have."""
    world = tp * pp
    return Problem(
        "parallelism",
        f"TP x PP = {tp} x {pp} = {world} devices, but the inventory has {devices_text}",
        found=f"llmb_tensor_parallel: {tp}, llmb_pipeline_parallel: {pp}",
        expected=f"TP x PP <= {n * dev}",
        fix=f"lower TP/PP, or add {math.ceil(world / dev) - n} node(s) to accel_nodes",
    )


def check_engine_platform(ctx: Context) -> list[Problem]:
    problems = []
    vendors = ENGINE_VENDORS[ctx.engine]
    if ctx.platform.vendor not in vendors:
        alt = {"ascend": "vllm-ascend", "amd": "vllm", "nvidia": "vllm"}.get(ctx.platform.vendor, "vllm")
        problems.append(
            Problem(
                check="engine-platform",
                message=f"{ctx.engine} does not run on {ctx.platform.name} ({ctx.platform.vendor} {ctx.platform.device_model})",
                found=f"llmb_engine: {ctx.engine}, llmb_platform: {ctx.platform.name}",
                expected=f"a {'/'.join(vendors)} platform for {ctx.engine}",
                fix=f"use llmb_engine: {alt} on {ctx.platform.name}",
            )
        )
    install = ctx.v["llmb_install"]
    if install not in ENGINE_INSTALLS[ctx.engine]:
        problems.append(
            Problem(
                check="install",
                message=f"{ctx.engine} is deployed as a container image only (llmb_install: {install} was asked)",
                found=f"llmb_install: {install}",
                expected=" | ".join(ENGINE_INSTALLS[ctx.engine]),
                fix="set llmb_install: container and llmb_container_image (or keep the default image)",
            )
        )
    return problems


def plan_topology(ctx: Context) -> tuple[Topology | None, list[Problem]]:
    v = ctx.v
    problems: list[Problem] = []
    dev = ctx.platform.device_count
    n = len(ctx.dep.nodes)
    tp = _positive(ctx, "llmb_tensor_parallel", v.get("llmb_tensor_parallel") or dev, problems)
    pp = _positive(ctx, "llmb_pipeline_parallel", v["llmb_pipeline_parallel"], problems)
    dp = _positive(ctx, "llmb_data_parallel", v["llmb_data_parallel"], problems)
    dcp = _positive(ctx, "llmb_decode_context_parallel", v["llmb_decode_context_parallel"], problems)
    if problems:
        return None, problems
    pname = ctx.platform.name
    devices_text = f"{n} node{'s' if n != 1 else ''} x {dev} {ctx.platform.device_model} = {n * dev} devices"

    if dcp > 1:
        if ctx.engine not in ("vllm", "vllm-ascend"):
            problems.append(
                Problem(
                    "parallelism",
                    f"decode context parallel is planned for vLLM only, not {ctx.engine}",
                    found=f"llmb_decode_context_parallel: {dcp}",
                    fix="set llmb_decode_context_parallel: 1",
                )
            )
        elif tp % dcp != 0:
            divisors = [d for d in range(1, tp + 1) if tp % d == 0]
            problems.append(
                Problem(
                    "parallelism",
                    f"DCP {dcp} does not divide TP {tp}: vLLM splits each TP group into DCP sub-groups",
                    found=f"llmb_tensor_parallel: {tp}, llmb_decode_context_parallel: {dcp}",
                    expected=f"DCP one of {divisors}",
                    fix=f"set llmb_decode_context_parallel to a divisor of {tp} (the recipes use DCP = TP = 8)",
                )
            )

    dp_local = 1
    if ctx.engine in ("vllm", "vllm-ascend"):
        if dp > 1:
            dp_local_raw = v.get("llmb_data_parallel_local")
            if dp_local_raw is None:
                if dp % n != 0:
                    problems.append(
                        Problem(
                            "parallelism",
                            f"DP {dp} cannot be spread evenly over {n} nodes",
                            found=f"llmb_data_parallel: {dp}, {n} hosts in accel_nodes",
                            expected=f"DP a multiple of {n}",
                            fix=f"set llmb_data_parallel to a multiple of {n}, or llmb_data_parallel_local",
                        )
                    )
                    return None, problems
                dp_local = dp // n
            else:
                dp_local = _positive(ctx, "llmb_data_parallel_local", dp_local_raw, problems)
            if dp_local * n != dp:
                problems.append(
                    Problem(
                        "parallelism",
                        f"DP ranks per node x nodes ({dp_local} x {n}) is not DP {dp}",
                        found=f"llmb_data_parallel_local: {dp_local}",
                        expected=f"{dp} / {n} ranks per node",
                        fix="set llmb_data_parallel_local so that it times the node count equals llmb_data_parallel",
                    )
                )
            per_node = tp * pp * dp_local
            if per_node > dev:
                problems.append(
                    Problem(
                        "parallelism",
                        f"each node would need TP x PP x DP-local = {tp} x {pp} x {dp_local} = {per_node} devices; "
                        f"{pname} has {dev}",
                        found=f"TP {tp}, PP {pp}, DP {dp} over {n} nodes",
                        expected=f"TP x PP x DP-local <= {dev}",
                        fix="lower TP or DP, or add nodes",
                    )
                )
            mode = "dp" if n > 1 else "single"
            world = tp * pp * dp
            topo = Topology(mode, n, dev, world, per_node, tp, pp, dp, dp_local, dcp)
        else:
            world = tp * pp
            if world > n * dev:
                problems.append(_too_few_devices(tp, pp, n, dev, devices_text))
                return None, problems
            needed = math.ceil(world / dev)
            if needed != n:
                problems.append(
                    Problem(
                        "parallelism",
                        f"TP x PP = {world} devices fill {needed} node(s) of {dev}, but accel_nodes has {n} hosts",
                        found=f"{n} hosts, TP {tp} x PP {pp}",
                        expected=f"{needed} host(s), or TP x PP = {n * dev}",
                        fix="make TP x PP use every node (e.g. llmb_pipeline_parallel: "
                        f"{max(1, (n * dev) // tp)}), or list only {needed} host(s)",
                    )
                )
            if world > dev and world % dev != 0:
                problems.append(
                    Problem(
                        "parallelism",
                        f"TP x PP = {world} does not fill whole nodes of {dev} devices",
                        found=f"TP {tp} x PP {pp}",
                        expected=f"a multiple of {dev}",
                        fix="choose TP x PP as a multiple of the devices per node",
                    )
                )
            mode = "ray" if n > 1 else "single"
            topo = Topology(mode, n, dev, world, min(world, dev), tp, pp, 1, 1, dcp)
            if mode == "ray" and ctx.v["llmb_install"] == "container":
                problems.append(
                    Problem(
                        "install",
                        "a vLLM cluster over Ray is planned for host installs only",
                        found="llmb_install: container with TP x PP larger than one node",
                        fix="use llmb_install: host, or DP + EP (llmb_data_parallel) with containers",
                    )
                )
    else:
        world = tp * pp
        if dp > 1 and ctx.engine == "trtllm":
            problems.append(
                Problem(
                    "parallelism",
                    "trtllm-serve has no data-parallel flag; attention DP is set in the extra LLM API options",
                    found=f"llmb_data_parallel: {dp}",
                    fix="set llmb_data_parallel: 1 (enable_attention_dp lives in llmb_trtllm_extra_llm_api_options)",
                )
            )
        if world > n * dev:
            problems.append(_too_few_devices(tp, pp, n, dev, devices_text))
            return None, problems
        if world % n != 0 or world // n > dev:
            problems.append(
                Problem(
                    "parallelism",
                    f"TP x PP = {world} devices cannot be split evenly over {n} nodes of {dev}",
                    found=f"TP {tp} x PP {pp} over {n} hosts",
                    expected=f"TP x PP = a multiple of {n}, at most {n * dev}",
                    fix="choose TP so that every node runs the same number of ranks",
                )
            )
        per_node = world // n if n else world
        if ctx.engine == "sglang":
            mode = "sglang"
        else:
            mode = "mpirun" if n > 1 else "single"
        topo = Topology(mode, n, dev, world, per_node, tp, pp, dp, 1, dcp)

    ep = v.get("llmb_expert_parallel_size")
    if ep is not None:
        if ctx.engine in ("vllm", "vllm-ascend"):
            problems.append(
                Problem(
                    "parallelism",
                    "vLLM derives the expert parallel size from TP x DP; llmb_expert_parallel_size is for "
                    "SGLang and TRT-LLM",
                    found=f"llmb_expert_parallel_size: {ep}",
                    fix="remove it and set llmb_expert_parallel: true",
                )
            )
        elif not isinstance(ep, int) or ep < 1 or topo.world % ep != 0:
            problems.append(
                Problem(
                    "parallelism",
                    f"EP size {ep} must divide the {topo.world} ranks",
                    found=f"llmb_expert_parallel_size: {ep}",
                    fix=f"choose a divisor of {topo.world}",
                )
            )
    if v.get("llmb_expert_parallel") and ctx.engine in ("sglang", "trtllm"):
        problems.append(
            Problem(
                "parallelism",
                f"llmb_expert_parallel is the vLLM switch; {ctx.engine} takes an EP size",
                found="llmb_expert_parallel: true",
                fix="set llmb_expert_parallel_size instead",
            )
        )

    if n > 1:
        problems.extend(check_multinode(ctx))
    return (topo if not problems else None), problems


def check_multinode(ctx: Context) -> list[Problem]:
    problems = []
    v = ctx.v
    n = len(ctx.dep.nodes)
    head = ctx.dep.head
    if not v.get("llmb_cluster_iface"):
        problems.append(
            Problem(
                "network",
                f"llmb_cluster_iface is required with {n} nodes: NCCL/GLOO/HCCL would pick an interface "
                "on their own and hang at startup when it is the wrong one",
                expected="the name of the cluster NIC on every node, e.g. ens7f0 or bond0",
                fix="set llmb_cluster_iface in group_vars/all",
            )
        )
    what = {
        "vllm": "--data-parallel-address / the Ray head address",
        "vllm-ascend": "--data-parallel-address / the Ray head address",
        "sglang": "--dist-init-addr",
        "trtllm": "the mpirun host list",
    }[ctx.engine]
    for node in ctx.dep.nodes:
        if is_loopback(node.address):
            role = "head" if node is head else "node"
            problems.append(
                Problem(
                    "network",
                    f"{role} {node.name} has the loopback address {node.address}; with {n} nodes {what} "
                    f"would be {node.address} and the other nodes could not reach it",
                    found=f"{node.name}: {node.address}",
                    expected="an address on the cluster network",
                    fix=f"set llmb_node_ip (or ansible_host) of {node.name} to its cluster address",
                    host=node.name,
                )
            )
    return problems


def per_device_weight_bytes(ctx: Context, topo: Topology) -> tuple[float, int, str]:
    """Weights each device holds (planner/memory.py decides)."""
    total = float(ctx.model.get("total_size_bytes") or 0)
    ep = bool(ctx.v.get("llmb_expert_parallel"))
    return memory.weights_per_device(total, ctx.engine, topo.tp, topo.pp, topo.dp, ep)


def check_fit(ctx: Context, topo: Topology, engine_args: dict[str, Any]) -> list[Problem]:
    """Weights, KV cache and headroom against device memory (planner/memory.py)."""
    return memory.check_fit(ctx, topo, engine_args)


def check_model(ctx: Context, engine_args: dict[str, Any]) -> list[Problem]:
    """Model type support, parsers, and the config.json checks the engine makes at start."""
    problems = []
    fs = ctx.flagset
    facts = dict(ctx.model.get("config_facts") or {})
    patches = model_patches(ctx)
    patched = dict(facts)
    for p in patches:
        patched[p["path"]] = p["value"]
    mtype = patched.get("model_type")
    if mtype and fs.supports_model_types and mtype not in fs.supports_model_types:
        problems.append(
            Problem(
                check="model-type",
                message=f"{ctx.engine} {ctx.version} does not know model_type {mtype!r} of {ctx.model_name} "
                "and would fail to load it",
                found=f"model_type {facts.get('model_type')!r}"
                + (" (after the profile's patches)" if patches else ", no config patch for this engine"),
                expected=" | ".join(fs.supports_model_types),
                fix=f"add to data/models/{ctx.model_name}.yml config_patches.{ctx.engine}: "
                "[{path: model_type, value: deepseek_v3, expect: kimi_k2}] (seed 004 workaround)",
            )
        )
    for check in fs.config_checks:
        when = check.get("when")
        if when and patched.get(when["path"]) != when.get("equals"):
            continue
        value = patched.get(check["path"])
        if value is not None and value in check.get("reject", []):
            problems.append(
                Problem(
                    check="model-config",
                    message=f"{ctx.engine} rejects {ctx.model_name}'s config.json: {check['error']}",
                    found=f"{check['path']} = {value!r}",
                    fix=f"add the patch under config_patches.{ctx.engine} in data/models/{ctx.model_name}.yml",
                )
            )
    for flag, kind in (
        ("--tool-call-parser", "tool_call"),
        ("--reasoning-parser", "reasoning"),
        ("--reasoning_parser", "reasoning"),
    ):
        value = engine_args.get(flag)
        known = fs.parsers.get(kind)
        if value is not None and known is not None and value not in known:
            problems.append(
                Problem(
                    check="engine-parser",
                    message=f"{flag} {value} is not a parser of {ctx.engine} {ctx.version}",
                    found=value,
                    expected=" | ".join(known) or "(none: this release has no such parser)",
                    fix=f"drop {flag} for {ctx.engine} in the model profile or engine args",
                )
            )
    return problems


def model_patches(ctx: Context) -> list[dict[str, Any]]:
    """config.json patches that apply to this engine and platform (engine key, then platform key)."""
    return [p.to_dict() for p in ctx.model_record.patches_for(ctx.engine, ctx.platform.name)]


def check_ports(ctx: Context, plans: list[HostPlan]) -> list[Problem]:
    problems = []
    for hp in plans:
        seen: dict[int, str] = {}
        for svc in hp.services:
            for entry in svc.ports:
                port = entry["port"]
                what = f"{svc.name} {entry['purpose']}"
                if not isinstance(port, int) or not 1 <= port <= 65535:
                    problems.append(
                        Problem(
                            "ports",
                            f"port of {what} is out of range",
                            found=port,
                            expected="1-65535",
                            fix="choose a port between 1024 and 65535",
                            host=hp.host,
                        )
                    )
                    continue
                if port in seen:
                    problems.append(
                        Problem(
                            check="ports",
                            message=f"port {port} is used twice on {hp.host}: {seen[port]} and {what}",
                            found=f"{seen[port]}: {port}, {what}: {port}",
                            expected="one service per port",
                            fix=f"change one of the llmb_*_port variables ({_port_knobs(ctx)})",
                            host=hp.host,
                        )
                    )
                else:
                    seen[port] = what
    return problems


def _port_knobs(ctx: Context) -> str:
    keys = [
        "llmb_api_port",
        "llmb_ray_port",
        "llmb_ray_dashboard_port",
        "llmb_dp_rpc_port",
        "llmb_sglang_dist_port",
        "llmb_sshd_port",
    ]
    return ", ".join(f"{k}={ctx.v[k]}" for k in keys)
