"""Preflight checks: engine/platform fit, a resolved topology against devices, model fit, ports, patches.

Every check returns Problems instead of raising, so that one preflight run lists everything
that is wrong with an inventory, each with what was found, what was expected and the fix.
The topology is resolved by the engine modules (engines/<engine>.py:topology); what an engine
supports is read from its capabilities record (capabilities.py), never from its name.
"""

from __future__ import annotations

import math
from typing import Any

from ..engines.capabilities import EngineCaps
from . import memory
from .containers import container_problems, default_image
from .context import Context
from .exposure import check_api_key
from .inventory import is_loopback
from .model import HostPlan, Problem
from .topology import DP_RANKS, EVEN_SPLIT, WHOLE_NODES, Resolution, Sizes, Topology

INSTALL_TEXT = {"container": "a container image", "host": "a host install"}


def check_engine(ctx: Context, caps: EngineCaps, alternative: str) -> list[Problem]:
    """The engine fits the platform and the install kind; the container variables are well-formed."""
    return check_engine_platform(ctx, caps, alternative) + container_problems(ctx)


def check_engine_platform(ctx: Context, caps: EngineCaps, alternative: str) -> list[Problem]:
    """The engine runs on the platform's vendor and can be installed the way asked.

    alternative: the engine to suggest on this platform's vendor."""
    problems = []
    if ctx.platform.vendor not in caps.vendors:
        problems.append(
            Problem(
                "engine-platform",
                f"{ctx.engine} does not run on {ctx.platform.name} ({ctx.platform.vendor} {ctx.platform.device_model})",
                found=f"llmb_engine: {ctx.engine}, llmb_platform: {ctx.platform.name}",
                expected=f"a {'/'.join(caps.vendors)} platform for {ctx.engine}",
                fix=f"use llmb_engine: {alternative} on {ctx.platform.name}",
            )
        )
    install = ctx.v["llmb_install"]
    if install not in caps.installs:
        problems.append(
            Problem(
                "install",
                f"{ctx.engine} is deployed as {' or '.join(INSTALL_TEXT[i] for i in caps.installs)} only "
                f"(llmb_install: {install} was asked)",
                found=f"llmb_install: {install}",
                expected=" | ".join(caps.installs),
                fix="set llmb_install: container and llmb_container_image (or keep the default image)"
                if "container" in caps.installs
                else f"set llmb_install: {caps.installs[0]}",
            )
        )
    return problems


def check_topology(ctx: Context, res: Resolution) -> list[Problem]:
    """The requested sizes against the engine, then the resolved topology against the devices.

    Any problem here stops the plan: there is no topology to build services on."""
    if res.sizes is None:
        return list(res.problems)
    problems = check_sizes(ctx, res.caps, res.sizes) + res.problems
    if res.topology is not None:
        problems += check_resolved(ctx, res.topology)
    return problems


def check_sizes(ctx: Context, caps: EngineCaps, s: Sizes) -> list[Problem]:
    """The requested sizes against what the engine supports (DCP, data parallel)."""
    problems = []
    if s.dcp > 1:
        if not caps.decode_context_parallel:
            problems.append(
                Problem(
                    "parallelism",
                    f"decode context parallel is planned for vLLM only, not {ctx.engine}",
                    found=f"llmb_decode_context_parallel: {s.dcp}",
                    fix="set llmb_decode_context_parallel: 1",
                )
            )
        elif s.tp % s.dcp != 0:
            divisors = [d for d in range(1, s.tp + 1) if s.tp % d == 0]
            problems.append(
                Problem(
                    "parallelism",
                    f"DCP {s.dcp} does not divide TP {s.tp}: vLLM splits each TP group into DCP sub-groups",
                    found=f"llmb_tensor_parallel: {s.tp}, llmb_decode_context_parallel: {s.dcp}",
                    expected=f"DCP one of {divisors}",
                    fix=f"set llmb_decode_context_parallel to a divisor of {s.tp} (the recipes use DCP = TP = 8)",
                )
            )
    if s.dp > 1 and caps.data_parallel_refused:
        message, fix = caps.data_parallel_refused
        problems.append(Problem("parallelism", message, found=f"llmb_data_parallel: {s.dp}", fix=fix))
    return problems


def check_resolved(ctx: Context, topo: Topology) -> list[Problem]:
    """A resolved topology: ranks against devices per node, EP size, addresses of a multinode plan."""
    caps = topo.caps
    problems = {DP_RANKS: _check_dp_ranks, WHOLE_NODES: _check_whole_nodes, EVEN_SPLIT: _check_even_split}[
        topo.layout
    ](ctx, topo)
    v = ctx.v
    ep = v.get("llmb_expert_parallel_size")
    if ep is not None:
        if caps.expert_parallel == "switch":
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
    if v.get("llmb_expert_parallel") and caps.expert_parallel == "size":
        problems.append(
            Problem(
                "parallelism",
                f"llmb_expert_parallel is the vLLM switch; {ctx.engine} takes an EP size",
                found="llmb_expert_parallel: true",
                fix="set llmb_expert_parallel_size instead",
            )
        )
    if len(ctx.dep.nodes) > 1:
        problems.extend(check_multinode(ctx, caps))
    return problems


def _check_dp_ranks(ctx: Context, topo: Topology) -> list[Problem]:
    n, dp, dp_local, dev = topo.nodes, topo.dp, topo.dp_local, topo.devices_per_node
    problems = []
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
    if topo.per_node > dev:
        problems.append(
            Problem(
                "parallelism",
                f"each node would need TP x PP x DP-local = {topo.tp} x {topo.pp} x {dp_local} = "
                f"{topo.per_node} devices; {ctx.platform.name} has {dev}",
                found=f"TP {topo.tp}, PP {topo.pp}, DP {dp} over {n} nodes",
                expected=f"TP x PP x DP-local <= {dev}",
                fix="lower TP or DP, or add nodes",
            )
        )
    return problems


def _check_whole_nodes(ctx: Context, topo: Topology) -> list[Problem]:
    n, world, dev, tp, pp = topo.nodes, topo.world, topo.devices_per_node, topo.tp, topo.pp
    problems = []
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
    return problems


def _check_even_split(ctx: Context, topo: Topology) -> list[Problem]:
    n, world, dev = topo.nodes, topo.world, topo.devices_per_node
    if world % n == 0 and world // n <= dev:
        return []
    return [
        Problem(
            "parallelism",
            f"TP x PP = {world} devices cannot be split evenly over {n} nodes of {dev}",
            found=f"TP {topo.tp} x PP {topo.pp} over {n} hosts",
            expected=f"TP x PP = a multiple of {n}, at most {n * dev}",
            fix="choose TP so that every node runs the same number of ranks",
        )
    ]


def check_multinode(ctx: Context, caps: EngineCaps) -> list[Problem]:
    """A plan over several nodes: the cluster NIC is named and no node's address is loopback."""
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
    what = caps.head_address_use
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
                "model-type",
                f"{ctx.engine} {ctx.version} does not know model_type {mtype!r} of {ctx.model_name} "
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
                    "model-config",
                    f"{ctx.engine} rejects {ctx.model_name}'s config.json: {check['error']}",
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
                    "engine-parser",
                    f"{flag} {value} is not a parser of {ctx.engine} {ctx.version}",
                    found=value,
                    expected=" | ".join(known) or "(none: this release has no such parser)",
                    fix=f"drop {flag} for {ctx.engine} in the model profile or engine args",
                )
            )
    return problems


def model_patches(ctx: Context) -> list[dict[str, Any]]:
    """config.json patches that apply to this engine and platform (engine key, then platform key)."""
    return [p.to_dict() for p in ctx.model_record.patches_for(ctx.engine, ctx.platform.name)]


def check_plan(ctx: Context, topo: Topology, engine_args: dict[str, Any], hosts: list[HostPlan]) -> list[Problem]:
    """The planned deployment: the model against the engine and the devices, the image, the ports."""
    problems = check_model(ctx, engine_args)
    problems += check_fit(ctx, topo, engine_args)
    problems += check_image(ctx)
    problems += check_ports(ctx, hosts)
    problems += check_api_key(ctx)
    return problems


def check_image(ctx: Context) -> list[Problem]:
    """A container install has an image: llmb_container_image or the flag set's default."""
    if ctx.v["llmb_install"] != "container" or default_image(ctx):
        return []
    return [
        Problem(
            "install", f"no default image for {ctx.engine} on {ctx.platform.vendor}", fix="set llmb_container_image"
        )
    ]


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
                            "ports",
                            f"port {port} is used twice on {hp.host}: {seen[port]} and {what}",
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
        "llmb_vllm_master_port",
        "llmb_sshd_port",
    ]
    return ", ".join(f"{k}={ctx.v[k]}" for k in keys)
