"""Pieces every engine planner shares: engine args from all sources, environment, containers."""

from __future__ import annotations

from typing import Any

from llmb.ports import http_url

from ...engines.registry import overlay_for
from ...layout import engine_venv
from .. import containers
from ..context import Context
from ..exposure import api_key_auth
from ..flags import OWNER_HINT, EngineArgs
from ..inventory import Node
from ..model import HostPlan, Problem, Service
from ..topology import Topology
from ..validation import model_patches, takes_images
from . import ascend, nvidia, rocm

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
    for key, flag in env_as_flags(ctx).items():  # before llmb_engine_args: a flag given there wins
        ea.apply_token(flag, ctx.v["llmb_engine_env"][key], f"llmb_engine_env[{key!r}]", OWNER_HINT)
        ctx.notes.append(f"llmb_engine_env {key} is {flag} in {ctx.engine} {ctx.version} (the variable is gone "
                         f"there: {ctx.flagset.env_renamed[key].get('source', '')}); passed as the flag")
    ea.apply_mapping(ctx.v.get("llmb_engine_args"), "llmb_engine_args", OWNER_HINT)
    ea.apply_argv(
        [str(t) for t in ctx.v.get("llmb_engine_extra_args") or []], "llmb_engine_extra_args", OWNER_HINT
    )
    return ea, ea.problems


def env_as_flags(ctx: Context) -> dict[str, str]:
    """llmb_engine_env variables the chosen release reads as a flag instead (the hand overlay's
    ``env_renamed``: VLLM_ALL2ALL_BACKEND is --all2all-backend from vLLM 0.33.0, whose vllm/envs.py no
    longer has it): variable -> flag, for a release at or after ``since`` whose set has the flag. The
    one decision: build_engine_args passes them as flags, node_plan leaves them out of the environment."""
    from ...catalog import version_key

    env = ctx.v.get("llmb_engine_env") or {}
    out: dict[str, str] = {}
    for key, rec in ctx.flagset.env_renamed.items():
        if key not in env or env[key] is None or not rec.get("to"):
            continue
        if version_key(ctx.version) < version_key(str(rec.get("since", "0"))):
            continue
        if ctx.flagset.resolve(rec["to"]) is not None:
            out[key] = rec["to"]
    return out


def iface_env(ctx: Context, topo: Topology, node: Node) -> dict[str, str]:
    """Communicator environment from llmb_cluster_iface and the node's address."""
    multinode = topo.nodes > 1
    iface = ctx.v.get("llmb_cluster_iface")
    env: dict[str, str] = {}
    vendor = ctx.platform.vendor
    if iface:
        env["GLOO_SOCKET_IFNAME"] = iface
        env["TP_SOCKET_IFNAME"] = iface
        if vendor == "ascend":
            env["HCCL_SOCKET_IFNAME"] = iface
        else:
            env["NCCL_SOCKET_IFNAME"] = iface
    if multinode and node.rdma_rails and vendor != "ascend":  # "=": exact names (mlx5_1 is not mlx5_10)
        env["NCCL_IB_HCA"] = "=" + ",".join(node.rdma_rails)
        if node.rdma_gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(node.rdma_gid_index)
    if vendor == "ascend":
        if iface or multinode:
            env["HCCL_IF_IP"] = node.address
    if topo.caps.host_ip_env and (iface or multinode):
        env[topo.caps.host_ip_env] = node.address
    return env


def compile_cache(ctx: Context, svc: Service, owner: str | None = None) -> None:
    """svc keeps what its engine compiles under llmb_compile_cache_dir/<owner, default svc.name>: the
    release's cache variables (the hand overlay's ``cache_env``: variable -> subdirectory), below what the
    inventory's llmb_engine_env sets (a value there wins, a null leaves the variable out); a container
    mounts the directory at the same path. Nothing without the knob or the table."""
    root = ctx.v.get("llmb_compile_cache_dir")
    table = overlay_for(ctx.data, ctx.engine, ctx.version).get("cache_env") or {}
    if not root or not table:
        return
    directory = f"{str(root).rstrip('/') or ''}/{owner or svc.name}"
    asked = ctx.v.get("llmb_engine_env") or {}
    cache = {var: f"{directory}/{sub}" for var, sub in sorted(table.items()) if var not in asked}
    svc.env = merge_env(cache, svc.env)
    svc.cache_dir = directory
    mount = f"{directory}:{directory}"
    if svc.kind == "container" and mount not in svc.mounts:
        svc.mounts.append(mount)


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


def venv_bin(ctx: Context, exe: str) -> str:
    return f"{engine_venv(ctx.engine, ctx.version, ctx.v.get('llmb_engine_venv'))}/bin/{exe}"


def health_block(ctx: Context, node: Node) -> dict[str, Any]:
    port = ctx.v["llmb_api_port"]
    return {
        "url": http_url(node.address, port, "/health"),
        "host": node.address,
        "port": port,
        "path": "/health",
        "models_path": "/v1/models",
        "expect_model": ctx.served_name,
        "timeout_s": ctx.v["llmb_health_timeout_s"],
        "interval_s": 10,
    }


def api_block(ctx: Context, topo: Topology, node: Node, engine_args: dict[str, Any]) -> dict[str, Any]:
    reasoning = any(engine_args.get(f) for f in ("--reasoning-parser", "--reasoning_parser"))
    tools = bool(engine_args.get("--tool-call-parser"))
    if topo.caps.tool_choice_flag:
        tools = tools and bool(engine_args.get(topo.caps.tool_choice_flag))
    out = {
        "base_url": http_url(node.address, ctx.v["llmb_api_port"], "/v1"),
        "served_model_name": ctx.served_name,
        "reasoning": reasoning,
        "tool_calls": tools,
    }
    # the smoke test sends an image (serve role, llmb_smoke image) when the served model takes one;
    # in the JSON only when set, so the plans of text models keep their form
    if takes_images(ctx.model, engine_args)[0] and ctx.v.get("serve_smoke_image") != "never":
        out["vision"] = True
    return out


def node_plan(
    ctx: Context, topo: Topology, node: Node, model_path: str, platform_env: dict[str, str] | None = None
) -> tuple[HostPlan, dict[str, str]]:
    """A node's plan and its engine environment: communicators, the platform's, llmb_engine_env."""
    moved = env_as_flags(ctx)  # passed as flags by build_engine_args
    own = {k: v for k, v in (ctx.v.get("llmb_engine_env") or {}).items() if k not in moved}
    env = merge_env(iface_env(ctx, topo, node), platform_env, own)
    return host_plan(ctx, node, model_path), env


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


def expose_api(ctx: Context, topo: Topology, svc: Service, node: Node, engine_args: dict[str, Any]) -> None:
    """svc serves the OpenAI API on node: its port, health check and API description."""
    svc.ports = [{"port": ctx.v["llmb_api_port"], "purpose": "api"}]
    svc.health = health_block(ctx, node)
    svc.api = api_block(ctx, topo, node, engine_args)
    auth = api_key_auth(ctx)
    if auth:  # the key's variable and the engine's env name; the value stays out of the plan
        svc.api["api_key"] = auth


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


def platform_bits(ctx: Context) -> tuple[dict[str, str], list[str], list[str], dict[str, Any]]:
    """(env, devices, mounts, container defaults) of an engine container on the platform's vendor."""
    vendor = ctx.platform.vendor
    if vendor == "ascend":
        return (
            dict(ascend.ASCEND_ENV),
            ascend.devices(ctx.platform.device_count),
            list(ascend.ASCEND_DRIVER_MOUNTS),
            dict(ascend.ASCEND_CONTAINER),
        )
    if vendor == "amd":
        return dict(rocm.ROCM_ENV), list(rocm.ROCM_DEVICES), [], dict(rocm.ROCM_CONTAINER)
    return {}, [], [], dict(nvidia.NVIDIA_CONTAINER)


def engine_service(
    ctx: Context, svc: Service, devices: list[str], mounts: list[str], platform_defaults: dict[str, Any]
) -> Service:
    """The engine process svc: a unit, or with llmb_install: container a container named by
    llmb_container_name (default svc.name) of the default image, with the platform's devices and mounts."""
    if ctx.v["llmb_install"] != "container":
        return svc
    svc.name = str(ctx.v.get("llmb_container_name") or svc.name)
    return containers.containerize(ctx, svc, containers.default_image(ctx), devices, mounts, platform_defaults)


def place_rank(ctx: Context, topo: Topology, hp: HostPlan, svc: Service, node: Node, ea: EngineArgs) -> None:
    """svc joins node's plan: on the head it serves the API, elsewhere it starts after the head's."""
    if node is ctx.dep.head:
        expose_api(ctx, topo, svc, node, ea.values)
    else:
        follow_head(ctx, svc, ctx.dep.head)
    svc.notes = list(ea.notes)
    hp.services.append(svc)
