"""SGLang plans: `python -m sglang.launch_server`, one process per node (seed 004: TP16 on 2 nodes
with --dist-init-addr MASTER:50000 --nnodes 2 --node-rank 0|1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmb.ports import host_port, http_url

from ...catalog import version_key
from ...engines.capabilities import EngineCaps, HostPackage
from ...engines.registry import overlay_for
from .. import containers
from .. import topology as shared
from ..context import Context
from ..flags import EngineArgs
from ..inventory import Node
from ..model import HostPlan, Problem, Service
from ..topology import Sizes, Topology
from . import common

CAPS = EngineCaps(
    name="sglang",
    host_package=HostPackage(
        "sglang", "sglang[all]", ("{venv}/bin/python", "-c", "import sglang; print(sglang.__version__)")
    ),
    vendors=("nvidia", "amd"),
    installs=("host", "container"),
    memory_fraction_flag="--mem-fraction-static",
    memory_fraction_default=0.9,
    modes=("sglang",),
    head_address_use="--dist-init-addr",
    max_len_flag="--context-length",
    kv_dtype_flag="--kv-cache-dtype",
    memory_model="static",
)


def topology(ctx: Context, caps: EngineCaps, sizes: Sizes) -> tuple[Topology | None, list[Problem]]:
    """TP x PP ranks split evenly over the nodes, one launch_server per node (mode `sglang`)."""
    return shared.even_split(ctx, caps, sizes, "sglang")


def engine_args(ctx: Context, topo: Topology) -> tuple[EngineArgs, list[Problem]]:
    v = ctx.v
    model_path, _ = common.model_paths(ctx)
    flags: list[tuple[str, Any]] = [
        ("--model-path", model_path),
        ("--served-model-name", ctx.served_name),
        ("--host", v["llmb_api_host"]),
        ("--port", v["llmb_api_port"]),
        ("--tp-size", topo.tp),
        ("--pp-size", topo.pp if topo.pp > 1 else None),
        ("--dp-size", topo.dp if topo.dp > 1 else None),
        ("--ep-size", v.get("llmb_expert_parallel_size")),
    ]
    if topo.nodes > 1:
        flags += [
            ("--dist-init-addr", host_port(ctx.dep.head.address, v["llmb_sglang_dist_port"])),
            ("--nnodes", topo.nodes),
        ]
    return common.build_engine_args(ctx, flags)


def services(
    ctx: Context,
    topo: Topology,
    ea: EngineArgs,
    per_node: Callable[[Node], dict[str, Any]] | None = None,
    name: str = "llmb-sglang",
) -> list[HostPlan]:
    """One launch_server per node; per_node gives a node's own flags (a disaggregated group's --host and
    --disaggregation-ib-device), name the unit (llmb-sglang-prefill / -decode in a disaggregated plan)."""
    v = ctx.v
    container = v["llmb_install"] == "container"
    model_path, model_mounts = common.model_paths(ctx)
    multinode = topo.nodes > 1
    penv, pdevices, pmounts, pcontainer = common.platform_bits(ctx)
    prefix = (
        ["python3", "-m", "sglang.launch_server"]
        if container
        else [common.venv_bin(ctx, "python"), "-m", "sglang.launch_server"]
    )
    plans = []
    for node in ctx.dep.nodes[: topo.nodes]:
        values = dict(ea.values)
        if multinode:
            values["--node-rank"] = node.rank
        if per_node is not None:
            values.update(per_node(node))
        argv = [*prefix, *ea.argv(values)]
        hp, env = common.node_plan(ctx, topo, node, model_path, penv if container else {})
        is_head = node is ctx.dep.head
        order = common.ORDER_FIRST if is_head else common.ORDER_SECOND
        svc = Service(name=name, kind="systemd", role="sglang-rank", argv=argv, order=order, env=env)
        svc = common.engine_service(ctx, svc, pdevices, pmounts + model_mounts, pcontainer)
        common.place_rank(ctx, topo, hp, svc, node, ea)
        if is_head and multinode:
            svc.ports.append({"port": v["llmb_sglang_dist_port"], "purpose": "dist-init"})
            svc.ready = common.ready_tcp(ctx, node, v["llmb_sglang_dist_port"])
        plans.append(hp)
    return plans


# ------------------------------------------------------------------ prefill/decode disaggregation
# (planner/disagg.py splits the deployment into the two groups and calls these for each)
PD_VAR = "llmb_disaggregation"


def pd_group_values(
    ctx: Context, role: str, gcfg: dict[str, Any], cfg: dict[str, Any], ea: EngineArgs
) -> tuple[dict[str, Any], list[Problem]]:
    """The group's flags over the shared ones: its engine_args, --disaggregation-mode, its memory fraction
    and context length, the bootstrap port and transfer backend when the inventory names them."""
    before = len(ea.problems)
    where = f"{PD_VAR}.{role}"
    ea.apply_mapping(gcfg.get("engine_args"), f"{where}.engine_args", common.OWNER_HINT)
    ea.set("--disaggregation-mode", role, "planner")
    for key, flag in (("memory_fraction", "--mem-fraction-static"), ("context_length", "--context-length")):
        if gcfg.get(key) is not None:
            ea.set(flag, gcfg[key], f"{where}.{key}")
    for key, flag in (("bootstrap_port", "--disaggregation-bootstrap-port"),
                      ("transfer_backend", "--disaggregation-transfer-backend")):
        if cfg.get(key) is None:
            continue
        origin = ea.origin.get(flag, "")
        if flag in ea.values and origin != "planner" and str(ea.values[flag]) != str(cfg[key]):
            # set at both levels: one would be dropped without a word
            ea.problems.append(Problem(
                "disaggregation",
                f"{flag} is {ea.values[flag]} in {origin} but {PD_VAR}.{key} is {cfg[key]}: the {role} group "
                "would take one and drop the other",
                found=f"{origin}: {ea.values[flag]}, {PD_VAR}.{key}: {cfg[key]}",
                expected="one value, set once",
                fix=f"remove {flag.lstrip('-')} from {origin} and keep {PD_VAR}.{key}",
            ))
            continue
        ea.apply_token(flag, cfg[key], f"{PD_VAR}.{key}", common.OWNER_HINT)
    return dict(ea.values), ea.problems[before:]


def _effective(ctx: Context, values: dict[str, Any], flag: str) -> Any:
    """A group's value of a flag: its resolved args, else the release's parser default."""
    if flag in values:
        return values[flag]
    return (ctx.flagset.flags.get(flag) or {}).get("default")


def bootstrap_port(ctx: Context, values: dict[str, Any]) -> int:
    """The bootstrap port the prefill group binds: its resolved args (the group's engine_args,
    llmb_engine_args or llmb_disaggregation.bootstrap_port), else the release's parser default. The
    router reads it from there: one source for both services."""
    given = _effective(ctx, values, "--disaggregation-bootstrap-port")
    try:
        return int(given)
    except (TypeError, ValueError):
        return 8998


# values the two groups must agree on: the KV cache one group sends the other (transfer backend,
# page size, element type) and the model name the router serves
PD_AGREE = ("--disaggregation-transfer-backend", "--page-size", "--kv-cache-dtype", "--served-model-name")


def pd_agreement(ctx: Context, prefill: Any, decode: Any) -> list[Problem]:
    """The prefill and decode groups agree on every value one uses to reach the other (PD_AGREE)."""
    problems = []
    for flag in PD_AGREE:
        if flag not in ctx.flagset.flags:
            continue
        a = _effective(ctx, prefill.args.values, flag)
        b = _effective(ctx, decode.args.values, flag)
        if str(a) != str(b):
            wa = prefill.args.origin.get(flag, "the release's default")
            wb = decode.args.origin.get(flag, "the release's default")
            problems.append(Problem(
                "disaggregation",
                f"the prefill group {prefill.name!r} and the decode group {decode.name!r} disagree on {flag}: "
                f"{a} ({wa}) and {b} ({wb}); the KV cache one sends the other (or the name the router serves) "
                "must be the same",
                found=f"prefill: {a}, decode: {b}",
                expected="one value for both groups",
                fix=f"set {flag.lstrip('-')} once, in llmb_engine_args (or both groups' engine_args alike)",
            ))
    return problems


def pd_services(
    ctx: Context, role: str, topo: Topology, ea: EngineArgs, ib: dict[str, str | None]
) -> list[HostPlan]:
    """The group's launch_server per node (each binding its own address, with its RDMA device); node 0
    has the group's health check (rank 0 is healthy once every rank joined) but no API: clients use
    the router."""

    def per_node(node: Node) -> dict[str, Any]:
        out: dict[str, Any] = {"--host": node.address}
        if ib.get(node.name):
            out["--disaggregation-ib-device"] = ib[node.name]
        return out

    plans = services(ctx, topo, ea, per_node=per_node, name=f"llmb-sglang-{role}")
    head = ctx.dep.head
    packages = transfer_packages(ctx, ea)
    for hp in plans:
        for svc in hp.services:
            svc.packages = list(packages)
            if hp.host != head.name:
                continue
            svc.api = None
            svc.health = dict(svc.health or common.health_block(ctx, head), url=(
                http_url(head.address, ctx.v["llmb_api_port"], "/health")), host=head.address)
            if role == "prefill":
                svc.ports.append({"port": bootstrap_port(ctx, ea.values), "purpose": "disaggregation-bootstrap"})
    return plans


def transfer_packages(ctx: Context, ea: EngineArgs) -> list[str]:
    """The KV transfer library of the group's backend (data/engines/hand/sglang.yml transfer_packages;
    the backend is the group's --disaggregation-transfer-backend, else the release's default) that a
    host install needs beside the engine; [] in a container (the image carries it)."""
    if ctx.v["llmb_install"] == "container":
        return []
    backend = ea.values.get("--disaggregation-transfer-backend")
    if backend is None:
        backend = (ctx.flagset.flags.get("--disaggregation-transfer-backend") or {}).get("default")
    table = overlay_for(ctx.data, ctx.engine, ctx.version).get("transfer_packages") or {}
    package = table.get(str(backend)) if backend is not None else None
    return [str(package)] if package else []


def router_rule(ctx: Context) -> dict[str, Any]:
    """The release's own load balancer (data/engines/hand/sglang.yml pd_router, first matching rule)."""
    rules = overlay_for(ctx.data, ctx.engine, ctx.version).get("pd_router") or []
    for rule in rules:
        before = rule.get("before")
        if before is None or version_key(ctx.version) < version_key(str(before)):
            return rule
    raise ValueError(f"data/engines/hand/{ctx.engine}.yml has no pd_router rule for {ctx.version}")


def _router_argv(rule: dict[str, Any], subst: dict[str, str], prefills: list[dict[str, str]],
                 decodes: list[dict[str, str]]) -> list[str]:
    """The rule's argv with its --prefill / --decode segment repeated once per instance (each with
    that instance's URL and bootstrap port)."""
    tokens = [str(t) for t in rule.get("argv") or []]
    out: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("--prefill", "--decode"):
            j = i + 1
            while j < len(tokens) and tokens[j].startswith("{") and tokens[j] not in ("{host}", "{port}"):
                j += 1
            for inst in prefills if t == "--prefill" else decodes:
                out += [t, *(s.format(**subst, **inst) for s in tokens[i + 1:j])]
            i = j
            continue
        out.append(t.format(**subst))
        i += 1
    return out


def pd_router(ctx: Context, node: Node, prefills: list[Any], decodes: list[Any], cfg: dict[str, Any]) -> tuple[
        Service | None, list[Problem]]:
    """The router on its host, started after every instance is healthy: the one endpoint of the
    deployment. Each instance's URL and bootstrap port come from its own plan."""
    v = ctx.v
    rcfg = cfg.get("router") or {}
    rule = router_rule(ctx)
    port = int(rcfg.get("port") or 8000)
    api_port = v["llmb_api_port"]
    prefill = prefills[0]
    if (len(prefills) > 1 or len(decodes) > 1) and rule.get("kind") != "sglang-router":
        return None, [Problem("disaggregation", f"several instances of a role need sglang-router (--prefill / "
                              f"--decode once per instance); {ctx.engine} {ctx.version} uses {rule.get('kind')}",
                              found=f"{len(prefills)} prefill, {len(decodes)} decode instance(s)",
                              fix=f"set {PD_VAR}.prefill/decode.instances to 1, or pin a newer release")]
    subst = {"host": str(v["llmb_api_host"]), "port": str(port)}
    p_inst = [{"prefill_url": http_url(g.head.address, api_port),
               "bootstrap_port": str(bootstrap_port(ctx, g.args.values))}  # what that prefill instance binds
              for g in prefills]
    d_inst = [{"decode_url": http_url(g.head.address, api_port)} for g in decodes]
    container = v["llmb_install"] == "container"
    python = "python3" if container else common.venv_bin(ctx, "python")
    argv = [python, "-m", str(rule["module"]), *_router_argv(rule, subst, p_inst, d_inst)]
    if rcfg.get("policy"):
        if rule.get("kind") != "sglang-router":
            return None, [Problem("disaggregation", f"{PD_VAR}.router.policy needs sglang-router; {ctx.engine} "
                                  f"{ctx.version} uses {rule.get('kind')}", found=rcfg["policy"],
                                  fix=f"remove {PD_VAR}.router.policy or pin a newer release")]
        argv += ["--policy", str(rcfg["policy"])]
    svc = Service(name="llmb-sglang-router", kind="systemd", role="router", argv=argv, order=common.ORDER_API + 10,
                  env={"PYTHONUNBUFFERED": "1"})
    svc.depends_on = [common.dep_ref(g.head, f"llmb-sglang-{g.role}") for g in (*prefills, *decodes)]
    svc.after_healthy = [
        dict(g.plans[0].services[0].health, role=g.role, group=g.name, node=g.head.name,
             service=g.plans[0].services[0].name)
        for g in (*prefills, *decodes)
        if g.plans and g.plans[0].services and g.plans[0].services[0].health
    ]
    svc.notes = [f"{rule.get('kind')}: python -m {rule['module']}"
                 + (f" (package {rule['package']}, installed beside the engine)" if rule.get("package") else "")]
    if rule.get("package") and not container:
        svc.packages = [str(rule["package"])]
    if container:
        penv, pdevices, pmounts, pcontainer = common.platform_bits(ctx)
        svc = containers.containerize(ctx, svc, containers.default_image(ctx), [], [], pcontainer)
    svc.ports = [{"port": port, "purpose": "api"}]
    svc.health = dict(common.health_block(ctx, node), url=http_url(node.address, port, "/health"), port=port)
    svc.api = dict(common.api_block(ctx, prefill.topo, node, prefill.args.values),
                   base_url=http_url(node.address, port, "/v1"))
    svc.ready = common.ready_tcp(ctx, node, port)
    return svc, []
