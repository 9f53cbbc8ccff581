"""Pieces every engine planner shares: engine args from all sources, environment, containers."""

from __future__ import annotations

import shlex
from typing import Any

from ...layout import engine_venv
from ..context import Context
from ..flags import EngineArgs
from ..inventory import Node
from ..model import HostPlan, Problem, Service
from ..validation import Topology, model_patches

# planner-owned flags -> the inventory variable that controls them (for error messages)
OWNER_HINT = {
    "--model": "llmb_model_dir",
    "--model-path": "llmb_model_dir",
    "--host": "llmb_api_host",
    "--port": "llmb_api_port",
    "--served-model-name": "llmb_served_model_name",
    "--tensor-parallel-size": "llmb_tensor_parallel",
    "--tp-size": "llmb_tensor_parallel",
    "--tp_size": "llmb_tensor_parallel",
    "--pipeline-parallel-size": "llmb_pipeline_parallel",
    "--pp-size": "llmb_pipeline_parallel",
    "--pp_size": "llmb_pipeline_parallel",
    "--ep_size": "llmb_expert_parallel_size",
    "--decode-context-parallel-size": "llmb_decode_context_parallel",
    "--data-parallel-size": "llmb_data_parallel",
    "--data-parallel-size-local": "llmb_data_parallel_local",
    "--data-parallel-start-rank": "llmb_data_parallel / the host order",
    "--data-parallel-rank": "llmb_data_parallel / the host order",
    "--data-parallel-address": "llmb_head / llmb_node_ip",
    "--data-parallel-rpc-port": "llmb_dp_rpc_port",
    "--headless": "the host order (every host after the head is headless)",
    "--distributed-executor-backend": "llmb_pipeline_parallel / llmb_tensor_parallel (Ray is used when "
    "TP x PP spans nodes)",
    "--enable-expert-parallel": "llmb_expert_parallel",
    "--dist-init-addr": "llmb_head / llmb_sglang_dist_port",
    "--nnodes": "the number of hosts in accel_nodes",
    "--node-rank": "the host order",
    "--extra_llm_api_options": "llmb_trtllm_extra_llm_api_options",
}

ORDER_FIRST = 10
ORDER_SECOND = 20
ORDER_API = 30


def build_engine_args(ctx: Context, planner_flags: list[tuple[str, Any]]) -> tuple[EngineArgs, list[Problem]]:
    """Planner flags first, then model profile, preset, llmb_engine_args, llmb_engine_extra_args."""
    ea = EngineArgs(ctx.flagset, unchecked=ctx.v.get("llmb_engine_flags_unchecked") or [])
    for canon, value in planner_flags:
        if value is not None:
            ea.set(canon, value, "planner")
    model_flags = (ctx.model.get("engine_flags") or {}).get(ctx.engine_family)
    if model_flags is None and ctx.model.get("engine_flags"):
        ctx.notes.append(f"model profile {ctx.model_name} has no engine_flags for {ctx.engine}")
    ea.apply_mapping(
        model_flags, f"data/models/{ctx.model_name}.yml engine_flags.{ctx.engine_family}", OWNER_HINT
    )
    if ctx.preset is not None:
        section = (ctx.preset.get("engines") or {}).get(ctx.engine_family)
        if section is None:
            ctx.notes.append(f"preset {ctx.preset_name} has no settings for {ctx.engine}; none applied")
        ea.apply_mapping(
            section, f"data/presets/{ctx.preset_name}.yml engines.{ctx.engine_family}", OWNER_HINT
        )
    ea.apply_mapping(ctx.v.get("llmb_engine_args"), "llmb_engine_args", OWNER_HINT)
    ea.apply_argv(
        [str(t) for t in ctx.v.get("llmb_engine_extra_args") or []], "llmb_engine_extra_args", OWNER_HINT
    )
    return ea, ea.problems


def iface_env(ctx: Context, node: Node, multinode: bool) -> dict[str, str]:
    """Communicator environment from llmb_cluster_iface and the node's address."""
    iface = ctx.v.get("llmb_cluster_iface")
    env: dict[str, str] = {}
    vendor = ctx.platform.vendor
    if iface:
        env["GLOO_SOCKET_IFNAME"] = iface
        env["TP_SOCKET_IFNAME"] = iface
        if vendor == "huawei":
            env["HCCL_SOCKET_IFNAME"] = iface
        else:
            env["NCCL_SOCKET_IFNAME"] = iface
    if vendor == "huawei":
        if iface or multinode:
            env["HCCL_IF_IP"] = node.address
    if ctx.engine in ("vllm", "vllm-ascend") and (iface or multinode):
        env["VLLM_HOST_IP"] = node.address
    return env


def merge_env(*layers: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            if value is None:
                out.pop(str(key), None)
            else:
                out[str(key)] = _env_value(value)
    return out


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def model_paths(ctx: Context) -> tuple[str, list[str]]:
    """(path the engine sees, mounts to add) for the weights directory."""
    model_dir = str(ctx.v["llmb_model_dir"])
    if ctx.v["llmb_install"] != "container":
        return model_dir, []
    explicit = ctx.v.get("llmb_container_model_dir")
    for mount in ctx.v.get("llmb_container_mounts") or []:
        parts = str(mount).split(":")
        if len(parts) < 2:
            continue
        src, dst = parts[0].rstrip("/") or "/", parts[1].rstrip("/") or "/"
        if model_dir == src or model_dir.startswith(src.rstrip("/") + "/"):
            rest = model_dir[len(src.rstrip("/")) :]
            derived = (dst.rstrip("/") + rest) if dst != "/" else (rest or "/")
            if explicit and explicit.rstrip("/") != derived.rstrip("/"):
                continue
            return derived, []
    target = explicit or model_dir
    return target, [f"{model_dir}:{target}:ro"]


def container_options(ctx: Context, name: str, platform_defaults: dict[str, Any]) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "name": name,
        "network": "host",
        "ipc": None,
        "shm_size": None,
        "privileged": False,
        "cap_add": [],
        "security_opt": [],
        "group_add": [],
        "ulimits": [],
        "gpus": None,
        "workdir": None,
        "entrypoint": None,
        "restart": "unless-stopped",
    }
    opts.update(platform_defaults)
    for key, value in (ctx.v.get("llmb_container_options") or {}).items():
        if key in ("cap_add", "security_opt", "group_add", "ulimits") and isinstance(value, list):
            merged = list(opts.get(key) or [])
            merged.extend(x for x in value if x not in merged)
            opts[key] = merged
        else:
            opts[key] = value
    return opts


def container_problems(ctx: Context) -> list[Problem]:
    known = {
        "name",
        "network",
        "ipc",
        "shm_size",
        "privileged",
        "cap_add",
        "security_opt",
        "group_add",
        "ulimits",
        "gpus",
        "workdir",
        "entrypoint",
        "restart",
    }
    problems = []
    for key in ctx.v.get("llmb_container_options") or {}:
        if key not in known:
            problems.append(
                Problem(
                    "container",
                    f"llmb_container_options has an unknown key {key!r}",
                    found=key,
                    expected=" | ".join(sorted(known)),
                    fix="use one of the keys above (devices and mounts have their own variables)",
                )
            )
    for mount in ctx.v.get("llmb_container_mounts") or []:
        if len(str(mount).split(":")) not in (2, 3):
            problems.append(
                Problem(
                    "container",
                    f"mount {mount!r} is not 'src:dst[:ro]'",
                    found=mount,
                    fix="write mounts in docker -v syntax",
                )
            )
    return problems


def container_command(argv: list[str], entrypoint: Any) -> list[str]:
    """The container command for an engine argv, given the container entrypoint.

    A shell entrypoint (seed 002/003 run the ROCm image with --entrypoint /bin/bash) gets
    ``-c 'exec <argv>'``; no entrypoint means the argv replaces the image's entrypoint+cmd.
    """
    if entrypoint and str(entrypoint).split("/")[-1] in ("bash", "sh"):
        return ["-c", "exec " + shlex.join(argv)]
    return list(argv)


def make_container_service(
    ctx: Context,
    *,
    name: str,
    role: str,
    argv: list[str],
    order: int,
    env: dict[str, str],
    image: str,
    devices: list[str],
    mounts: list[str],
    platform_defaults: dict[str, Any],
) -> Service:
    opts = container_options(ctx, name, platform_defaults)
    entry = opts.get("entrypoint")
    if entry is None:
        opts["entrypoint"] = argv[0]
        opts["command"] = list(argv[1:])
    else:
        opts["command"] = container_command(argv, entry)
    extra_devices = [str(d) for d in ctx.v.get("llmb_container_devices") or []]
    all_devices = list(devices) + [d for d in extra_devices if d not in devices]
    user_mounts = [str(m) for m in ctx.v.get("llmb_container_mounts") or []]
    all_mounts = list(mounts) + [m for m in user_mounts if m not in mounts]
    return Service(
        name=name,
        kind="container",
        role=role,
        argv=list(argv),
        order=order,
        env=env,
        image=image,
        devices=all_devices,
        mounts=all_mounts,
        container=opts,
    )


def default_image(ctx: Context) -> str | None:
    image = ctx.v.get("llmb_container_image")
    if image:
        return str(image)
    template = ctx.flagset.images.get(ctx.platform.vendor)
    if not template:
        return None
    suffix = ctx.flagset.image_suffix_by_platform.get(ctx.platform.name, "")
    return template.format(version=ctx.version, image_suffix=suffix)


def venv_bin(ctx: Context, exe: str) -> str:
    return f"{engine_venv(ctx.engine, ctx.version, ctx.v.get('llmb_engine_venv'))}/bin/{exe}"


def health_block(ctx: Context, node: Node) -> dict[str, Any]:
    port = ctx.v["llmb_api_port"]
    return {
        "url": f"http://{node.address}:{port}/health",
        "host": node.address,
        "port": port,
        "path": "/health",
        "models_path": "/v1/models",
        "expect_model": ctx.served_name,
        "timeout_s": ctx.v["llmb_health_timeout_s"],
        "interval_s": 10,
    }


def api_block(ctx: Context, node: Node, engine_args: dict[str, Any]) -> dict[str, Any]:
    reasoning = any(engine_args.get(f) for f in ("--reasoning-parser", "--reasoning_parser"))
    tools = bool(engine_args.get("--tool-call-parser"))
    if ctx.engine in ("vllm", "vllm-ascend"):
        tools = tools and bool(engine_args.get("--enable-auto-tool-choice"))
    return {
        "base_url": f"http://{node.address}:{ctx.v['llmb_api_port']}/v1",
        "served_model_name": ctx.served_name,
        "reasoning": reasoning,
        "tool_calls": tools,
    }


def host_plan(ctx: Context, node: Node, model_path: str) -> HostPlan:
    """A node's plan, with the weights it serves from model_path (the path the engine sees)."""
    hp = HostPlan(host=node.name, address=node.address, rank=node.rank)
    hp.model = {
        "dir": str(ctx.v["llmb_model_dir"]),
        "engine_path": model_path,
        "config_patches": model_patches(ctx),
        "served_model_name": ctx.served_name,
    }
    return hp


def expose_api(ctx: Context, svc: Service, node: Node, engine_args: dict[str, Any]) -> None:
    """svc serves the OpenAI API on node: its port, health check and API description."""
    svc.ports = [{"port": ctx.v["llmb_api_port"], "purpose": "api"}]
    svc.health = health_block(ctx, node)
    svc.api = api_block(ctx, node, engine_args)


def follow_head(ctx: Context, svc: Service, head: Node) -> None:
    """svc is a rank away from the head: it starts after the head's service of the same name."""
    svc.depends_on = [dep_ref(head, svc.name)]
    svc.ready = ready_started(ctx)


def ready_tcp(ctx: Context, node: Node, port: int) -> dict[str, Any]:
    return {"type": "tcp", "host": node.address, "port": port, "timeout_s": ctx.v["llmb_ready_timeout_s"]}


def ready_connected(ctx: Context, master: Node, port: int) -> dict[str, Any]:
    """Ready once the service holds an established TCP connection to master:port (joined it)."""
    return {"type": "connected", "host": master.address, "port": port, "timeout_s": ctx.v["llmb_ready_timeout_s"]}


def ready_started(ctx: Context) -> dict[str, Any]:
    return {"type": "started", "timeout_s": ctx.v["llmb_ready_timeout_s"]}


def dep_ref(node: Node, service: str) -> str:
    return f"{node.name}/{service}"


def describe_topology(topo: Topology) -> str:
    return (
        f"{topo.mode}: {topo.nodes} node(s), TP {topo.tp} x PP {topo.pp} x DP {topo.dp}"
        + (f" (DCP {topo.dcp})" if topo.dcp > 1 else "")
        + f", {topo.per_node} of {topo.devices_per_node} devices per node"
    )
