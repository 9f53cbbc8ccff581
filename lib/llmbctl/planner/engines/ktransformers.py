"""KTransformers plans: one node, GPU plus CPU experts, GGUF weights (seed 004 "KTransformers Deployment").

    python ktransformers/server/main.py --model_path /path/to/K2 --gguf_path /path/to/K2 --cache_lens 30000
    ... --optimize_config_path ktransformers/optimize/optimize_rules/DeepSeek-V3-Chat-fp8-linear-ggml-experts-serve-amx.yaml

Both paths are the GGUF folder with the model's configuration files copied beside the GGUF files
(llmb_model_dir). The AMX rules are chosen only where the node's CPU has AMX: llmb_cpu_amx in the
inventory, else the verify stage's lscpu flags (llmb_accel.cpu_amx); without either, no AMX rules and a
note. The release runs from its venv (``python -m ktransformers.server.main``), so the rules file is
the installed package's.
"""

from __future__ import annotations

from typing import Any

from ...engines.capabilities import EngineCaps
from ...engines.registry import overlay_for
from ..context import Context
from ..flags import EngineArgs
from ..model import HostPlan, Problem, Service
from ..topology import WHOLE_NODES, Sizes, Topology
from . import common

CAPS = EngineCaps(
    name="ktransformers",
    vendors=("nvidia",),
    installs=("host",),
    memory_fraction_flag=None,
    memory_fraction_default=1.0,
    modes=("single",),
    head_address_use="--host",
    data_parallel_refused=(
        "KTransformers serves from one process on one node; it has no data-parallel flag",
        "set llmb_data_parallel: 1",
    ),
    max_len_flag="--cache_lens",
    memory_model="offload",
)

OWNER_HINT = {
    **common.OWNER_HINT,
    "--model_path": "llmb_model_dir",
    "--model_dir": "llmb_model_dir",
    "--gguf_path": "llmb_model_dir (the GGUF folder with the configuration files beside the GGUF files)",
    "--model_name": "llmb_served_model_name",
    "--optimize_config_path": "llmb_cpu_amx (the AMX rules where the CPU has AMX) / the model's rules",
}


def topology(ctx: Context, caps: EngineCaps, sizes: Sizes) -> tuple[Topology | None, list[Problem]]:
    """One server process on one node, on the GPU(s) it finds (no --tp: seed 004 gives none)."""
    if sizes.nodes != 1:
        return None, [
            Problem(
                "parallelism",
                f"KTransformers runs on one node; accel_nodes has {sizes.nodes}",
                found=f"{sizes.nodes} hosts in accel_nodes",
                expected="1 host",
                fix="list one host in accel_nodes for llmb_engine: ktransformers",
            )
        ]
    return Topology("single", 1, sizes.devices_per_node, sizes.devices_per_node, sizes.devices_per_node,
                    1, 1, sizes.dp, 1, 1, WHOLE_NODES, caps), []


def amx_rules(ctx: Context) -> tuple[str | None, str]:
    """(the AMX rules file of the installed release, or None; why)."""
    node = ctx.dep.head
    amx = (ctx.dep.node_facts.get(node.name) or {}).get("cpu_amx")
    if amx is None:
        return None, (f"{node.name}: AMX unknown (no llmb_cpu_amx, no verify facts): the release's default "
                      "rules, no AMX rules")
    if not amx:
        return None, f"{node.name}: the CPU has no AMX (lscpu flags): the release's default rules"
    rules = overlay_for(ctx.data, ctx.engine, ctx.version).get("optimize_rules") or {}
    mtype = ctx.model.get("config_facts", {}).get("model_type")
    name = (rules.get("amx") or {}).get(mtype)
    if not name:
        return None, f"{node.name}: AMX present, but no AMX rules for model_type {mtype!r}"
    venv = common.venv_bin(ctx, "python").rsplit("/bin/", 1)[0]
    path = f"{venv}/lib/python{rules.get('python', '3.11')}/site-packages/{rules['dir']}/{name}"
    return path, f"{node.name}: AMX present (amx_tile, amx_int8, amx_bf16): {name}"


def engine_args(ctx: Context, topo: Topology) -> tuple[EngineArgs, list[Problem]]:
    v = ctx.v
    model_dir = str(v["llmb_model_dir"])
    rules, why = amx_rules(ctx)
    ctx.notes.append(why)
    flags: list[tuple[str, Any]] = [
        ("--model_path", model_dir),
        ("--gguf_path", model_dir),
        ("--model_name", ctx.served_name),
        ("--host", v["llmb_api_host"]),
        ("--port", v["llmb_api_port"]),
        ("--optimize_config_path", rules),
    ]
    ea = EngineArgs(ctx.flagset, unchecked=v.get("llmb_engine_flags_unchecked") or [])
    for canon, value in flags:
        if value is not None:
            ea.set(canon, value, "planner")
    model_flags = (ctx.model.get("engine_flags") or {}).get(ctx.engine)
    ea.apply_mapping(model_flags, f"data/models/{ctx.model_name}.yml engine_flags.{ctx.engine}", OWNER_HINT)
    if ctx.preset is not None:
        section = (ctx.preset.get("engines") or {}).get(ctx.engine)
        ea.apply_mapping(section, f"data/presets/{ctx.preset_name}.yml engines.{ctx.engine}", OWNER_HINT)
    ea.apply_mapping(v.get("llmb_engine_args"), "llmb_engine_args", OWNER_HINT)
    ea.apply_argv([str(t) for t in v.get("llmb_engine_extra_args") or []], "llmb_engine_extra_args", OWNER_HINT)
    return ea, ea.problems


def services(ctx: Context, topo: Topology, ea: EngineArgs) -> list[HostPlan]:
    node = ctx.dep.head
    model_dir = str(ctx.v["llmb_model_dir"])
    argv = [common.venv_bin(ctx, "python"), "-m", "ktransformers.server.main", *ea.argv()]
    hp, env = common.node_plan(ctx, topo, node, model_dir)
    svc = Service(name="llmb-ktransformers", kind="systemd", role="api", argv=argv, order=common.ORDER_API, env=env)
    svc.ready = common.ready_tcp(ctx, node, ctx.v["llmb_api_port"])
    common.place_rank(ctx, topo, hp, svc, node, ea)
    # the server (ktransformers/server/api, v0.3.2) has no /health: healthy when /v1/models answers
    # (llmb_service_ready asks url, then url's directory + models_path)
    port = ctx.v["llmb_api_port"]
    svc.health = dict(svc.health or {}, url=f"http://{node.address}:{port}/v1/models", path="/v1/models",
                      models_path="/models")
    return [hp]
