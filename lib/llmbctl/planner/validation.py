"""Preflight checks: engine/platform fit, a resolved topology against devices, model fit, ports, patches.

Every check returns Problems instead of raising, so that one preflight run lists everything
that is wrong with an inventory, each with what was found, what was expected and the fix.
The topology is resolved by the engine modules (engines/<engine>.py:topology); what an engine
supports is read from its capabilities record (capabilities.py), never from its name.
"""

from __future__ import annotations

import math
import re
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


def _parallelism(message: str, found: Any, fix: str, expected: Any = None) -> Problem:
    """A problem of the parallel layout (TP, PP, DP, DCP, EP against the nodes and their devices)."""
    return Problem(check="parallelism", message=message, found=found, expected=expected, fix=fix)


def _network(message: str, found: Any, fix: str, expected: Any = None, host: str | None = None) -> Problem:
    """A problem of the cluster network (the interface and the addresses the ranks meet on)."""
    return Problem(check="network", message=message, found=found, expected=expected, fix=fix, host=host)


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
            problems.append(_parallelism(
                f"decode context parallel is planned for vLLM only, not {ctx.engine}",
                f"llmb_decode_context_parallel: {s.dcp}", "set llmb_decode_context_parallel: 1"))
        elif s.tp % s.dcp != 0:
            divisors = [d for d in range(1, s.tp + 1) if s.tp % d == 0]
            problems.append(_parallelism(
                f"DCP {s.dcp} does not divide TP {s.tp}: vLLM splits each TP group into DCP sub-groups",
                f"llmb_tensor_parallel: {s.tp}, llmb_decode_context_parallel: {s.dcp}",
                f"set llmb_decode_context_parallel to a divisor of {s.tp} (the recipes use DCP = TP = 8)",
                f"DCP one of {divisors}"))
    if s.dp > 1 and caps.data_parallel_refused:
        message, fix = caps.data_parallel_refused
        problems.append(_parallelism(message, f"llmb_data_parallel: {s.dp}", fix))
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
            problems.append(_parallelism(
                "vLLM derives the expert parallel size from TP x DP; llmb_expert_parallel_size is for "
                "SGLang and TRT-LLM",
                f"llmb_expert_parallel_size: {ep}", "remove it and set llmb_expert_parallel: true"))
        elif not isinstance(ep, int) or ep < 1 or topo.world % ep != 0:
            problems.append(_parallelism(
                f"EP size {ep} must divide the {topo.world} ranks", f"llmb_expert_parallel_size: {ep}",
                f"choose a divisor of {topo.world}"))
    if v.get("llmb_expert_parallel") and caps.expert_parallel == "size":
        problems.append(_parallelism(
            f"llmb_expert_parallel is the vLLM switch; {ctx.engine} takes an EP size",
            "llmb_expert_parallel: true", "set llmb_expert_parallel_size instead"))
    if len(ctx.dep.nodes) > 1:
        problems.extend(check_multinode(ctx, caps))
    return problems


def _check_dp_ranks(ctx: Context, topo: Topology) -> list[Problem]:
    n, dp, dp_local, dev = topo.nodes, topo.dp, topo.dp_local, topo.devices_per_node
    problems = []
    if dp_local * n != dp:
        problems.append(_parallelism(
            f"DP ranks per node x nodes ({dp_local} x {n}) is not DP {dp}",
            f"llmb_data_parallel_local: {dp_local}",
            "set llmb_data_parallel_local so that it times the node count equals llmb_data_parallel",
            f"{dp} / {n} ranks per node"))
    if topo.per_node > dev:
        problems.append(_parallelism(
            f"each node would need TP x PP x DP-local = {topo.tp} x {topo.pp} x {dp_local} = "
            f"{topo.per_node} devices; {ctx.platform.name} has {dev}",
            f"TP {topo.tp}, PP {topo.pp}, DP {dp} over {n} nodes",
            "lower llmb_tensor_parallel or llmb_data_parallel, or add nodes to accel_nodes",
            f"TP x PP x DP-local <= {dev}"))
    return problems


def _check_whole_nodes(ctx: Context, topo: Topology) -> list[Problem]:
    n, world, dev, tp, pp = topo.nodes, topo.world, topo.devices_per_node, topo.tp, topo.pp
    problems = []
    needed = math.ceil(world / dev)
    if needed != n:
        problems.append(_parallelism(
            f"TP x PP = {world} devices fill {needed} node(s) of {dev}, but accel_nodes has {n} hosts",
            f"{n} hosts, TP {tp} x PP {pp}",
            "make TP x PP use every node (e.g. llmb_pipeline_parallel: "
            f"{max(1, (n * dev) // tp)}), or list only {needed} host(s)",
            f"{needed} host(s), or TP x PP = {n * dev}"))
    if world > dev and world % dev != 0:
        problems.append(_parallelism(
            f"TP x PP = {world} does not fill whole nodes of {dev} devices", f"TP {tp} x PP {pp}",
            f"set llmb_tensor_parallel x llmb_pipeline_parallel to a multiple of {dev} (the devices per node)",
            f"a multiple of {dev}"))
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
            fix=f"set llmb_tensor_parallel (x llmb_pipeline_parallel) to a multiple of {n}, at most {n * dev}, "
            "so that every node runs the same number of ranks",
        )
    ]


def check_multinode(ctx: Context, caps: EngineCaps) -> list[Problem]:
    """A plan over several nodes: the cluster NIC is named and no node's address is loopback."""
    problems = []
    v = ctx.v
    n = len(ctx.dep.nodes)
    head = ctx.dep.head
    if not v.get("llmb_cluster_iface"):
        problems.append(_network(
            f"llmb_cluster_iface is required with {n} nodes: NCCL/GLOO/HCCL would pick an interface "
            "on their own and hang at startup when it is the wrong one",
            None, "set llmb_cluster_iface in group_vars/all",
            expected="the name of the cluster NIC on every node, e.g. ens7f0 or bond0"))
    what = caps.head_address_use
    for node in ctx.dep.nodes:
        if caps.ipv6_refused and ":" in node.address:
            problems.append(_network(
                f"{ctx.engine} cannot use the IPv6 cluster address {node.address} of {node.name}: "
                f"{caps.ipv6_refused}",
                f"{node.name}: {node.address}",
                f"set llmb_node_ip (or ansible_host) of {node.name} to its IPv4 cluster address or host name",
                "an IPv4 address or a host name that resolves on every node", host=node.name))
        if is_loopback(node.address):
            role = "head" if node is head else "node"
            problems.append(_network(
                f"{role} {node.name} has the loopback address {node.address}; with {n} nodes {what} "
                f"would be {node.address} and the other nodes could not reach it",
                f"{node.name}: {node.address}",
                f"set llmb_node_ip (or ansible_host) of {node.name} to its cluster address",
                "an address on the cluster network", host=node.name))
    return problems


def per_device_weight_bytes(ctx: Context, topo: Topology) -> tuple[float, int, str]:
    """Weights each device holds (planner/memory.py decides)."""
    total = float(ctx.model.get("total_size_bytes") or 0)
    ep = bool(ctx.v.get("llmb_expert_parallel"))
    return memory.weights_per_device(total, ctx.engine, topo.tp, topo.pp, topo.dp, ep, ctx.model)


def check_fit(ctx: Context, topo: Topology, engine_args: dict[str, Any]) -> list[Problem]:
    """Weights, KV cache and headroom against device memory (planner/memory.py)."""
    return memory.check_fit(ctx, topo, engine_args)


def takes_images(model: dict[str, Any], engine_args: dict[str, Any]) -> tuple[bool, str]:
    """(the served model takes images, why): the profile's modality (a vision tower) and the text-only
    switch among the engine args (vLLM --language-model-only does not load the tower)."""
    mod = model.get("modality") if isinstance(model.get("modality"), dict) else {}
    if not mod.get("vision"):
        return False, "the model has no vision tower (its profile's modality)"
    flag = mod.get("text_only_flag")
    if flag and engine_args.get(flag):
        return False, f"the model is served text-only ({flag})"
    return True, "the model has a vision tower"


def _engines_registering(ctx: Context, arch: str | None) -> str:
    """The fix for a model no patch makes loadable: the shipped releases that register its architecture."""
    found = []
    for engine in sorted({r.engine for r in ctx.data.engine_releases()}):
        ok = ctx.data.releases_where(engine, lambda d: bool(arch) and arch in (d.get("architectures") or []))
        if ok:
            found.append(f"{engine} {', '.join(ok)}")
    where = "; ".join(found) if found else "none of the shipped releases"
    return (f"serve {ctx.model_name} with an engine release that registers {arch or 'its architecture'} "
            f"(llmb_engine / llmb_engine_version): {where}")


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
    # the model against the release and the platform (catalog.model_release_problems): the release
    # the profile requires, the architectures and parsers the release registers, the CUDA generation
    compat = ctx.data.model_release_problems(ctx.model_record, ctx.engine, ctx.version, ctx.platform.vendor)
    problems += [Problem(c["check"], c["message"], found=c["found"], expected=c["expected"], fix=c["fix"])
                 for c in compat]
    reported = {c["found"] for c in compat}
    arch = (facts.get("architectures") or [None])[0]
    registered = bool(arch) and arch in (getattr(fs, "architectures", None) or [])
    arch_refused = any(arch and arch in c["message"] and c["check"] == "model-engine" for c in compat)
    if (mtype and fs.supports_model_types and mtype not in fs.supports_model_types and not registered
            and not arch_refused):
        problems.append(
            Problem(
                "model-type",
                f"{ctx.engine} {ctx.version} does not know model_type {mtype!r} of {ctx.model_name} "
                "and would fail to load it",
                found=f"model_type {facts.get('model_type')!r}"
                + (" (after the profile's patches)" if patches else ", no config patch for this engine"),
                expected=" | ".join(fs.supports_model_types),
                fix=(f"set llmb_engine / llmb_engine_version to a release that knows it, or add to "
                     f"data/models/{ctx.model_name}.yml config_patches.{ctx.engine}: "
                     "[{path: model_type, value: deepseek_v3, expect: kimi_k2}] (seed 004 workaround)"
                     if facts.get("model_type") == "kimi_k2" else _engines_registering(ctx, arch)),
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
                    fix=f"add the patch under config_patches.{ctx.engine} in data/models/{ctx.model_name}.yml, "
                    "or set llmb_engine_version to a release that accepts it",
                )
            )
    if ctx.v.get("serve_smoke_image") == "always":
        images, why = takes_images(ctx.model, engine_args)
        if not images:
            problems.append(
                Problem(
                    "modality",
                    f"serve_smoke_image: always asks the smoke test for an image, but {ctx.model_name} as planned "
                    f"takes none: {why}",
                    found="serve_smoke_image: always",
                    expected="auto | never for a text-only serve",
                    fix="set serve_smoke_image: auto (an image exactly when the served model takes one) or never"
                    + (f"; or drop {why.split('(')[-1].rstrip(')')} from llmb_engine_args" if "text-only" in why else ""),
                )
            )
    for flag, kind in (
        ("--tool-call-parser", "tool_call"),
        ("--reasoning-parser", "reasoning"),
        ("--reasoning_parser", "reasoning"),
    ):
        value = engine_args.get(flag)
        known = fs.parsers.get(kind)
        profile_value = (ctx.model_record.engine_flags.get(ctx.engine) or {}).get(flag.lstrip("-"))
        if value == profile_value and any(f"({kind} parsers:" in f for f in reported):
            continue  # the catalog's check above named it with the releases that register it
        if value is not None and known is not None and value not in known:
            ok = ctx.data.releases_where(
                ctx.engine, lambda d, k=kind, n=value: n in ((d.get("parsers") or {}).get(k) or []))
            problems.append(
                Problem(
                    "engine-parser",
                    f"{flag} {value} is not a parser of {ctx.engine} {ctx.version}",
                    found=value,
                    expected=" | ".join(known) or "(none: this release has no such parser)",
                    fix=(f"set llmb_engine_version to a release that registers it ({', '.join(ok)}), or " if ok else "")
                    + f"set {flag.lstrip('-')} in llmb_engine_args to one of the release's parsers, or drop it "
                    f"for {ctx.engine} in the model profile",
                )
            )
    return problems


# the engines that refuse a context over the model's limit at start, and the variable each reads
# to allow it (vLLM: vllm/config ModelConfig max_model_len check; SGLang: server_args/model_config
# context_length check)
LONG_CONTEXT_OVERRIDE = {
    "--max-model-len": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "--context-length": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
}


def model_context_limit(model: dict[str, Any]) -> tuple[int, str] | None:
    """(the longest context the checkpoint allows, why): max_position_embeddings, or with YaRN rope
    scaling in the profile, original_max_position_embeddings x factor (what vLLM derives)."""
    rope = model.get("rope_scaling")
    if isinstance(rope, dict) and rope.get("type", rope.get("rope_type")) == "yarn":
        try:
            original, factor = int(rope["original_max_position_embeddings"]), float(rope["factor"])
        except (KeyError, TypeError, ValueError):
            original, factor = 0, 0.0
        if original > 0 and factor > 0:
            return int(original * factor), f"rope_scaling yarn: {original:,} x factor {factor:g}"
    limit = model.get("max_position_embeddings")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit, "max_position_embeddings, no rope scaling"
    return None


def check_model_limits(ctx: Context, topo: Topology, engine_args: dict[str, Any], where: str = "") -> list[Problem]:
    """The context length against the checkpoint's limit; the attention TP against the heads."""
    problems = []
    model = ctx.model
    flag = getattr(topo.caps, "max_len_flag", None)
    limit = model_context_limit(model)
    value = engine_args.get(flag) if flag else None
    override = LONG_CONTEXT_OVERRIDE.get(flag or "")
    env = ctx.v.get("llmb_engine_env") or {}
    if (
        override and limit and isinstance(value, int) and not isinstance(value, bool) and value > limit[0]
        and str(env.get(override, "")).lower() not in ("1", "true")
    ):
        problems.append(
            Problem(
                "model-limit",
                f"{where}{flag} {value:,} is over {ctx.model_name}'s context limit {limit[0]:,} ({limit[1]}); "
                f"{ctx.engine} refuses it at start",
                found=f"{flag} {value:,}",
                expected=f"at most {limit[0]:,}",
                fix=f"set {flag.lstrip('-')} in llmb_engine_args to {limit[0]:,} or less (or {override}=1 in "
                "llmb_engine_env, at the model's own risk)",
            )
        )
    moe = model.get("moe") if isinstance(model.get("moe"), dict) else {}
    experts = moe.get("n_routed_experts")
    a2a = engine_args.get("--moe-a2a-backend")
    ep = topo.tp if a2a in ("deepep", "mooncake") else engine_args.get("--ep-size")
    if isinstance(experts, int) and isinstance(ep, int) and not isinstance(ep, bool) and ep > 1:
        # SGLang 0.5.5: --moe-a2a-backend deepep/mooncake sets the EP size to TP (server_args
        # _handle_a2a_moe); every EP rank holds (routed + redundant) / EP experts, asserted at start
        # (eplb/expert_location.py: num_physical_experts % ep_size == 0)
        redundant = engine_args.get("--ep-num-redundant-experts") or 0
        physical = experts + (redundant if isinstance(redundant, int) else 0)
        if physical % ep:
            why = f"TP {topo.tp} (--moe-a2a-backend {a2a})" if a2a in ("deepep", "mooncake") else f"--ep-size {ep}"
            problems.append(
                Problem(
                    "model-limit",
                    f"{where}EP size {ep} ({why}) does not divide the {physical} experts of {ctx.model_name} "
                    f"({experts} routed + {physical - experts} redundant); {ctx.engine} asserts it at start",
                    found=f"EP {ep}, {physical} experts",
                    expected=f"an EP size dividing {physical}, or --ep-num-redundant-experts making "
                    f"{experts} + redundant a multiple of {ep}",
                    fix="set ep-num-redundant-experts in llmb_engine_args (or the group's engine_args under "
                    f"llmb_disaggregation) so that routed + redundant is a multiple of {ep} (e.g. {(-experts) % ep}), "
                    "or change the EP size (llmb_expert_parallel_size, --ep-size)",
                )
            )
    heads = model.get("num_attention_heads")
    if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0:
        attn_tp = topo.tp
        how = f"TP {topo.tp}"
        if engine_args.get("--enable-dp-attention") and topo.dp > 1 and topo.tp % topo.dp == 0:
            attn_tp, how = topo.tp // topo.dp, f"TP {topo.tp} / DP {topo.dp} attention"
        if heads % attn_tp != 0:
            divisors = [d for d in range(1, heads + 1) if heads % d == 0]
            problems.append(
                Problem(
                    "model-limit",
                    f"{where}{how} = {attn_tp} does not divide the {heads} attention heads of {ctx.model_name}; "
                    f"{ctx.engine} splits the heads evenly over the attention ranks and refuses at start",
                    found=f"llmb_tensor_parallel: {topo.tp}" + (f", llmb_data_parallel: {topo.dp}" if attn_tp != topo.tp else ""),
                    expected=f"an attention TP of {', '.join(map(str, divisors))}",
                    fix="set llmb_tensor_parallel to a divisor of the heads (with more nodes: llmb_pipeline_parallel)",
                )
            )
    return problems


def model_patches(ctx: Context) -> list[dict[str, Any]]:
    """config.json patches that apply to this engine and platform (engine key, then platform key)."""
    return [p.to_dict() for p in ctx.model_record.patches_for(ctx.engine, ctx.platform.name)]


def check_plan(ctx: Context, topo: Topology, engine_args: dict[str, Any], hosts: list[HostPlan]) -> list[Problem]:
    """The planned deployment: the model against the engine and the devices, the image, the ports."""
    problems = check_model(ctx, engine_args)
    problems += check_model_limits(ctx, topo, engine_args)
    problems += check_fit(ctx, topo, engine_args)
    problems += check_image(ctx)
    problems += check_ports(ctx, hosts)
    problems += check_api_key(ctx)
    return problems


def check_image(ctx: Context) -> list[Problem]:
    """A container install has an image: llmb_container_image or the flag set's default; a model whose
    NVIDIA builds are CUDA N only (the profile's requires.nvidia) is not given an image tagged for an
    older CUDA (the images' cuXYZ tag suffix: cu129 = CUDA 12.9)."""
    if ctx.v["llmb_install"] != "container":
        return []
    image = str(ctx.v.get("llmb_container_image") or default_image(ctx) or "")
    nv = ((ctx.model.get("requires") or {}).get("nvidia") or {}) if isinstance(ctx.model.get("requires"), dict) else {}
    tag = re.search(r":[^/]*?cu(\d{2})(\d)(?![\d])", image)
    need = nv.get("cuda_major") if isinstance(nv, dict) else None
    if ctx.platform.vendor == "nvidia" and tag and isinstance(need, int) and int(tag.group(1)) < need:
        return [
            Problem(
                "model-engine",
                f"{ctx.model_name} runs only on CUDA {need} builds (NVIDIA driver >= {nv.get('driver_min') or '?'}), "
                f"and the image {image} is a CUDA {int(tag.group(1))}.{tag.group(2)} build",
                found=f"llmb_container_image: {image}",
                expected=f"a CUDA {need} image ({nv.get('source') or 'model profile'})",
                fix=f"set llmb_container_image to a CUDA {need} build (or leave it unset for the release's default)",
            )
        ]
    if default_image(ctx):
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
                            fix=f"choose a port between 1024 and 65535 ({_port_knobs(ctx)})",
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
