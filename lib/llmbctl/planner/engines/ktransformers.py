"""KTransformers plans: one node, GPU plus CPU experts (seed 004 "KTransformers Deployment"; 0.5+ under SGLang).

Two forms, chosen by the pinned release's generated set (its ``command``, walked from the release):
- 0.3.2, ``python -m ktransformers.server.main``: the seed's GGUF form below;
- 0.5 and later (``python -m sglang.launch_server`` of sglang-kt, the --kt-* options; ktransformers 0.7.2
  on the package index): an SGLang server whose MoE experts run on the CPU (kvcache-ai/ktransformers
  doc/en/kt-kernel/Kimi-K2-Thinking-Native.md: --model and --kt-weight-path the same INT4 folder with
  --kt-method RAWINT4; --kt-cpuinfer physical cores less the GPUs, --kt-threadpool-count one pool per
  NUMA node, --kt-num-gpu-experts the experts kept on the GPUs).

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

from llmb.ports import http_url

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
    "--optimize_config_path": "llmb_ktransformers_rules (a shipped rules file by GPU count), else llmb_cpu_amx",
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
    # the SGLang form shards attention and the GPU experts over the node's GPUs (--tp-size, as the
    # KTransformers docs launch it); the seed's server takes no TP
    tp = sizes.devices_per_node if sglang_form(ctx) else 1
    return Topology("single", 1, sizes.devices_per_node, sizes.devices_per_node, sizes.devices_per_node,
                    tp, 1, sizes.dp, 1, 1, WHOLE_NODES, caps), []


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
    return _rules_path(ctx, name), f"{node.name}: AMX present (amx_tile, amx_int8, amx_bf16): {name}"


def _rules_path(ctx: Context, name: str) -> str:
    rules = overlay_for(ctx.data, ctx.engine, ctx.version).get("optimize_rules") or {}
    venv = common.venv_bin(ctx, "python").rsplit("/bin/", 1)[0]
    return f"{venv}/lib/python{rules.get('python', '3.11')}/site-packages/{rules['dir']}/{name}"


def chosen_rules(ctx: Context, topo: Topology) -> tuple[str | None, list[Problem]]:
    """llmb_ktransformers_rules: a rules file the release ships for the model, on no more GPUs than
    the node has (the shipped files and their GPU counts: data/engines/hand/ktransformers.yml)."""
    name = ctx.v.get("llmb_ktransformers_rules")
    shipped = (overlay_for(ctx.data, ctx.engine, ctx.version).get("optimize_rules") or {}).get("shipped") or {}
    gpus: dict[str, int] = shipped.get("gpus") or {}
    mtype = ctx.model.get("config_facts", {}).get("model_type")
    by_count = "; ".join(
        f"{n} GPU{'s' if n > 1 else ''}: " + ", ".join(sorted(f for f, c in gpus.items() if c == n))
        for n in sorted(set(gpus.values()))
    )
    if mtype not in (shipped.get("model_types") or []):
        return None, [Problem("engine-flag-value", f"llmb_ktransformers_rules: {ctx.engine} {ctx.version} ships no "
                              f"rules for model_type {mtype!r} in this toolkit's record",
                              found=f"llmb_ktransformers_rules: {name}", fix="remove llmb_ktransformers_rules")]
    if name not in gpus:
        return None, [Problem("choice", f"llmb_ktransformers_rules: {name} is not a rules file {ctx.engine} "
                              f"{ctx.version} ships for {ctx.model_name}; shipped, by GPU count: {by_count}",
                              found=f"llmb_ktransformers_rules: {name}", expected=" | ".join(sorted(gpus)),
                              fix="set llmb_ktransformers_rules to one of the files above")]
    need, have = gpus[name], topo.devices_per_node
    if need > have:
        fit = sorted(f for f, c in gpus.items() if c <= have)
        return None, [Problem("parallelism", f"llmb_ktransformers_rules: {name} places modules on {need} GPUs; "
                              f"{ctx.platform.name} has {have} a node",
                              found=f"llmb_ktransformers_rules: {name} ({need} GPUs)",
                              expected=f"a file for at most {have} GPUs: {', '.join(fit)}",
                              fix="choose a rules file for the node's GPU count")]
    ctx.notes.append(f"KTransformers rules {name} (llmb_ktransformers_rules): {need} of {have} GPUs")
    return _rules_path(ctx, name), []


SGLANG_MODULE = "sglang.launch_server"

# the --kt-* options a plan of the SGLang form needs, and why (Kimi-K2-Thinking-Native.md, above)
KT_NEEDED = {
    "--kt-cpuinfer": "the CPU threads of the expert kernels (physical cores less the GPUs)",
    "--kt-num-gpu-experts": "the experts per MoE layer kept on the GPUs (0 on one 48 GB GPU)",
}


def sglang_form(ctx: Context) -> bool:
    """Whether the pinned release runs under SGLang's server (its generated set's command)."""
    return list(ctx.flagset.command[-2:]) == ["-m", SGLANG_MODULE]


def engine_args(ctx: Context, topo: Topology) -> tuple[EngineArgs, list[Problem]]:
    if sglang_form(ctx):
        return _sglang_engine_args(ctx, topo)
    v = ctx.v
    model_dir = str(v["llmb_model_dir"])
    rule_problems: list[Problem] = []
    if v.get("llmb_ktransformers_rules") is not None:
        rules, rule_problems = chosen_rules(ctx, topo)
    else:
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
    ea, problems = common.build_engine_args(ctx, flags)
    return ea, rule_problems + list(problems)


def _sglang_engine_args(ctx: Context, topo: Topology) -> tuple[EngineArgs, list[Problem]]:
    """The SGLang form: the model folder is also the CPU experts' weights (--kt-weight-path, RAWINT4
    native INT4) unless llmb_engine_args names another folder; TP over the node's GPUs."""
    v = ctx.v
    model_dir = str(v["llmb_model_dir"])
    flags: list[tuple[str, Any]] = [
        ("--model-path", model_dir),
        ("--kt-weight-path", model_dir),
        ("--served-model-name", ctx.served_name),
        ("--host", v["llmb_api_host"]),
        ("--port", v["llmb_api_port"]),
        ("--tp-size", topo.tp if topo.tp > 1 else None),
    ]
    ea, problems = common.build_engine_args(ctx, [(f, x) for f, x in flags if f in ctx.flagset.flags])
    problems = list(problems)
    for flag, what in KT_NEEDED.items():
        if flag in ctx.flagset.flags and ea.get(flag) is None:
            problems.append(Problem(
                "engine-flag-value",
                f"{ctx.engine} {ctx.version} runs the MoE experts on the CPU and needs {flag}: {what}",
                found=f"no {flag} in the model profile, preset or llmb_engine_args",
                expected=f"{flag} <integer>",
                fix=f"set llmb_engine_args: {{{flag[2:]}: <integer>}} (kvcache-ai/ktransformers "
                    "doc/en/kt-kernel/Kimi-K2-Thinking-Native.md gives the values per GPU count)"))
    return ea, problems


def services(ctx: Context, topo: Topology, ea: EngineArgs) -> list[HostPlan]:
    node = ctx.dep.head
    model_dir = str(ctx.v["llmb_model_dir"])
    if sglang_form(ctx):
        return _sglang_services(ctx, topo, ea, node, model_dir)
    argv = [common.venv_bin(ctx, "python"), "-m", "ktransformers.server.main", *ea.argv()]
    hp, env = common.node_plan(ctx, topo, node, model_dir)
    svc = Service(name="llmb-ktransformers", kind="systemd", role="api", argv=argv, order=common.ORDER_API, env=env)
    svc.ready = common.ready_tcp(ctx, node, ctx.v["llmb_api_port"])
    common.place_rank(ctx, topo, hp, svc, node, ea)
    # the server (ktransformers/server/api, v0.3.2) has no /health: healthy when /v1/models answers
    # (llmb_service_ready asks url, then url's directory + models_path)
    port = ctx.v["llmb_api_port"]
    svc.health = dict(svc.health or {}, url=http_url(node.address, port, "/v1/models"), path="/v1/models",
                      models_path="/models")
    return [hp]


def _sglang_services(ctx: Context, topo: Topology, ea: EngineArgs, node: Any, model_dir: str) -> list[HostPlan]:
    """One `python -m sglang.launch_server` with the --kt-* options, from the release's venv (sglang-kt
    and kt-kernel, installed with it: ``packages``); healthy when SGLang's /health answers."""
    argv = [common.venv_bin(ctx, "python"), "-m", SGLANG_MODULE, *ea.argv()]
    hp, env = common.node_plan(ctx, topo, node, model_dir)
    svc = Service(name="llmb-ktransformers", kind="systemd", role="api", argv=argv, order=common.ORDER_API, env=env)
    svc.ready = common.ready_tcp(ctx, node, ctx.v["llmb_api_port"])
    common.place_rank(ctx, topo, hp, svc, node, ea)
    packages = overlay_for(ctx.data, ctx.engine, ctx.version).get("packages") or []
    if packages and ctx.v["llmb_install"] != "container":
        svc.packages = [str(p).format(version=ctx.version) for p in packages]
    return [hp]
