"""Prefill/decode disaggregation: two engine clusters (prefill, decode) and the router in front of them.

Seed 004's 4P12D: SGLang prefill on 4 H200 nodes (--disaggregation-mode prefill, TP 32 / DP 32 with
DP attention, --nnodes 4), decode on 12 (TP 96 / DP 96, --nnodes 12), each group with its own
--dist-init-addr <group node 0>:5757 and --node-rank, --disaggregation-ib-device for the KV transfer
over RDMA, fronted by one load balancer. The inventory says it with ``llmb_disaggregation``:

    llmb_disaggregation:
      prefill: {group: prefill_nodes, tensor_parallel: 32, data_parallel: 32, memory_fraction: 0.85,
                engine_args: {...}, engine_env: {...}}
      decode:  {group: decode_nodes, tensor_parallel: 96, data_parallel: 96, context_length: 2176, ...}
      router:  {host: <a host of accel_nodes>, port: 8000}
      bootstrap_port: 8998
      ib_device: mlx5_0          # per node: llmb_ib_device; else the verify stage's RDMA facts

Every group is planned by the engine module as a cluster of its own (a copy of the deployment with the
group's nodes and the group's values), so the checks of a plain plan (parallelism against the devices,
EP size, addresses, memory fit) hold per group; then the IB device of every node, one group per host,
and the ports of the merged plan. The engine module decides the flags and the router (its
``pd_group_values`` and ``pd_router``): this module decides the shape and the split only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import memory
from .exposure import confine_listeners
from .inventory import DISAGG_ROLES as ROLES
from .inventory import DISAGG_VAR as VAR
from .inventory import GROUP, Deployment, Node, is_address, is_loopback
from .model import HostPlan, PlanError, Planned, Problem
from .topology import EVEN_SPLIT, Topology
from .validation import check_image, check_model, check_model_limits, check_ports, check_resolved


# ------------------------------------------------------------------------------------------ planning
@dataclasses.dataclass
class Group:
    role: str  # prefill | decode
    name: str  # the inventory group
    cfg: dict[str, Any]
    ctx: Any  # the group's Context (its nodes, its values)
    topo: Topology | None = None
    args: Any = None  # EngineArgs
    plans: list[HostPlan] = dataclasses.field(default_factory=list)

    @property
    def head(self) -> Node:
        return self.ctx.dep.nodes[0]


def _group_nodes(ctx: Any, role: str, cfg: dict[str, Any], problems: list[Problem]) -> tuple[str, list[Node]]:
    gname = str(cfg.get("group") or f"{role}_nodes")
    members = ctx.dep.groups.get(gname)
    by_name = {n.name: n for n in ctx.dep.nodes}
    if not members:
        problems.append(_disagg(
            f"the {role} group {gname!r} has no hosts",
            f"{VAR}.{role}.group: {gname}; groups with hosts: "
            + ", ".join(sorted(g for g, h in ctx.dep.groups.items() if h and g not in ("all", GROUP)))[:200],
            f"add 'children: {gname}: hosts: ...' under {GROUP} in hosts.yml, or set {VAR}.{role}.group",
            f"a child group of {GROUP} listing the {role} nodes"))
        return gname, []
    outside = [h for h in members if h not in by_name]
    if outside:
        problems.append(_disagg(
            f"hosts of the {role} group {gname!r} are not in {GROUP}", outside[:8],
            f"make {gname} a child group of {GROUP}, or set {VAR}.{role}.group to a child group of it"))
    nodes = [by_name[h] for h in members if h in by_name]
    head_name = ctx.dep.head.name
    if head_name in members and ctx.v.get("llmb_head"):
        nodes.sort(key=lambda n: n.name != head_name)  # llmb_head leads its own group
    return gname, [Node(n.name, n.address, i) for i, n in enumerate(nodes)]


def _group_ctx(ctx: Any, role: str, nodes: list[Node], cfg: dict[str, Any]) -> Any:
    """A copy of the context whose deployment is the group: its nodes, and its values over the shared ones."""
    v = dict(ctx.v)
    dev = ctx.platform.device_count
    v["llmb_tensor_parallel"] = cfg.get("tensor_parallel") or len(nodes) * dev
    v["llmb_data_parallel"] = cfg.get("data_parallel") or 1
    v["llmb_pipeline_parallel"] = 1
    if cfg.get("expert_parallel_size") is not None:
        v["llmb_expert_parallel_size"] = cfg["expert_parallel_size"]
    v["llmb_engine_env"] = {**(ctx.v.get("llmb_engine_env") or {}), **(cfg.get("engine_env") or {})}
    dep = Deployment(nodes=nodes, vars=v, groups=ctx.dep.groups, node_facts=ctx.dep.node_facts)
    return dataclasses.replace(ctx, dep=dep, notes=ctx.notes)


def _topology(g: Group, caps: Any, dp_attention: bool) -> tuple[Topology, list[Problem]]:
    """The group's ranks: TP devices with DP attention (DP splits the attention inside TP), else TP x DP."""
    ctx, v = g.ctx, g.ctx.v
    n, dev = len(g.ctx.dep.nodes), ctx.platform.device_count
    tp, dp = v["llmb_tensor_parallel"], v["llmb_data_parallel"]
    world = tp if dp_attention else tp * dp
    per_node = world // n if world % n == 0 else -(-world // n)
    topo = Topology("sglang", n, dev, world, per_node, tp, 1, dp, 1, 1, EVEN_SPLIT, caps)
    problems: list[Problem] = []
    where = f"{VAR}.{g.role}"
    how = f"TP {tp} (DP {dp} is DP attention inside it)" if dp_attention else f"TP x DP = {tp} x {dp}"
    if world % n != 0 or per_node > dev:
        problems.append(_disagg(
            f"the {g.role} group {g.name!r}: {how} = {world} devices do not fill its {n} node(s) of "
            f"{dev} {ctx.platform.device_model} evenly",
            f"{where}.tensor_parallel: {tp}, {where}.data_parallel: {dp}, {n} hosts in {g.name}",
            f"set {where}.tensor_parallel to {n * dev}" + (" and data_parallel to a divisor of it"
                                                               if dp_attention else "")
            + f", or give {g.name} {-(-world // dev)} node(s)",
            f"{world} devices = {n} nodes x up to {dev} (e.g. TP {n * dev})", check="parallelism"))
    if dp_attention and tp % dp != 0:
        problems.append(_disagg(
            f"the {g.role} group {g.name!r}: DP {dp} does not divide TP {tp}; with --enable-dp-attention "
            "every DP rank holds TP / DP devices",
            f"{where}.tensor_parallel: {tp}, {where}.data_parallel: {dp}",
            f"set {where}.data_parallel to a divisor of {tp}",
            f"DP one of {[d for d in range(1, tp + 1) if tp % d == 0][:12]}", check="parallelism"))
    return topo, problems


def _disagg(message: str, found: Any, fix: str, expected: Any = None, host: str | None = None,
            check: str = "disaggregation") -> Problem:
    """A problem of the disaggregated layout (check ``disaggregation`` unless said)."""
    return Problem(check=check, message=message, found=found, expected=expected, fix=fix, host=host)


def _ib_device(ctx: Any, g: Group, node: Node, problems: list[Problem]) -> str | None:
    """The node's RDMA device(s): llmb_ib_device, else llmb_disaggregation.ib_device, else verify's facts."""
    facts = ctx.dep.node_facts.get(node.name) or {}
    given = facts.get("ib_device") or (ctx.v.get(VAR) or {}).get("ib_device")
    seen = facts.get("rdma_devices")
    if given:
        if seen is not None:
            missing = [d for d in str(given).split(",") if d not in seen]
            if missing:
                problems.append(_disagg(
                    f"the {g.role} node {node.name} has no active RDMA device {', '.join(missing)} "
                    "(the verify stage's ibstat)",
                    f"active: {', '.join(seen) or 'none'}",
                    f"set llmb_ib_device of {node.name} to one of its active devices, or bring the port up",
                    str(given), host=node.name, check="ib-device"))
        return str(given)
    if seen:
        return ",".join(seen)
    problems.append(_disagg(
        f"the {g.role} node {node.name} (group {g.name!r}) has no RDMA device for the KV transfer "
        "(--disaggregation-ib-device)",
        "no llmb_ib_device, no llmb_disaggregation.ib_device"
        + (", verify found no active RDMA port" if seen is not None else ", no verify facts"),
        f"set llmb_ib_device on {node.name} (hosts.yml) or llmb_disaggregation.ib_device, or run the "
        "verify stage on a node whose ibstat lists an active port",
        "an RDMA device name such as mlx5_0", host=node.name, check="ib-device"))
    return None


def _control_plan(ctx: Any, host: str, owner: dict[str, str], rank: int,
                  problems: list[Problem]) -> HostPlan | None:
    """The plan of a router host outside accel_nodes (a control node: no engine, no accelerators),
    or None when the router runs on a node of a group (or cannot run where it is told: a problem)."""
    if host in owner:
        return None
    valid = [n.name for n in ctx.dep.nodes][:8] + sorted(ctx.dep.outside)[:8]
    if host not in ctx.dep.outside:
        problems.append(_disagg(
            f"{VAR}.router.host names {host!r}, which is not a host of the inventory",
            host, f"set {VAR}.router.host to a node of {GROUP} (default: the prefill group's node 0), or add "
            f"{host} to hosts.yml outside {GROUP} (a control node, e.g. a group control_nodes)",
            f"one of {valid}"))
        return None
    address = ctx.dep.outside[host]
    found: list[Problem] = []
    if ctx.v.get("llmb_install") == "container":
        found.append(_disagg(
            f"{VAR}.router.host names the control node {host!r} (outside {GROUP}), which is planned for "
            "llmb_install: host only (the engine image's container asks for the node's accelerators)",
            f"llmb_install: container, {VAR}.router.host: {host}",
            f"set llmb_install: host, or {VAR}.router.host to a node of {GROUP}", "llmb_install: host",
            host=host))
    if is_loopback(address) or not is_address(address):
        found.append(_disagg(
            f"the control node {host} ({VAR}.router.host) has no address the groups' nodes can reach",
            address, f"set llmb_node_ip (or ansible_host) of {host} to its address on the cluster network",
            "an IP address or RFC 1123 host name, not loopback", host=host, check="addresses"))
    same = [n.name for n in ctx.dep.nodes if n.address == address]
    if same:
        found.append(_disagg(
            f"the control node {host} ({VAR}.router.host) and {same[0]} have the same address", address,
            f"give {host} its own llmb_node_ip (or ansible_host)", host=host, check="addresses"))
    problems += found
    return None if found else HostPlan(host, address, rank, control=True)


def plan(ctx: Any, engine: Any, problems: list[Problem], source: str) -> Any:
    """The disaggregated plan: both groups planned by the engine module, the router, one endpoint."""
    cfg = ctx.v.get(VAR) or {}
    if not hasattr(engine, "pd_group_values"):
        problems.append(_disagg(
            f"{ctx.engine} has no prefill/decode disaggregation in this toolkit",
            f"llmb_engine: {ctx.engine}, {VAR} set", f"use llmb_engine: sglang, or remove {VAR}",
            "llmb_engine: sglang"))
        raise PlanError(problems, source)
    groups: list[Group] = []
    owner: dict[str, str] = {}
    for role in ROLES:
        gcfg = cfg.get(role) or {}
        gname, nodes = _group_nodes(ctx, role, gcfg, problems)
        for n in nodes:
            if n.name in owner:
                problems.append(_disagg(
                    f"{n.name} is in both the {owner[n.name]} and the {role} group",
                    f"{n.name} in {cfg.get('prefill', {}).get('group') or 'prefill_nodes'} and {gname}",
                    f"list every node in one group only (the groups {VAR}.prefill.group and "
                    f"{VAR}.decode.group name)", host=n.name))
            owner[n.name] = role
        if nodes:
            k = gcfg.get("instances") or 1
            if len(nodes) % k:
                problems.append(_disagg(
                    f"the {role} group {gname!r} has {len(nodes)} node(s), which do not split into "
                    f"{k} instances of equal size",
                    f"{VAR}.{role}.instances: {k}, {len(nodes)} hosts in {gname}",
                    f"set {VAR}.{role}.instances to a divisor of the node count, or add nodes",
                    f"instances dividing {len(nodes)}: "
                    + ", ".join(str(d) for d in range(1, len(nodes) + 1) if len(nodes) % d == 0)))
                continue
            size = len(nodes) // k
            for i in range(k):
                part = [Node(n.name, n.address, r) for r, n in enumerate(nodes[i * size:(i + 1) * size])]
                name = gname if k == 1 else f"{gname}[{i}]"
                groups.append(Group(role, name, gcfg, _group_ctx(ctx, role, part, gcfg)))
    idle = [n.name for n in ctx.dep.nodes if n.name not in owner]
    if idle:
        problems.append(_disagg(
            f"hosts of {GROUP} are in neither the prefill nor the decode group; they would serve nothing",
            idle[:8], f"put them in one of the groups ({VAR}.prefill.group / {VAR}.decode.group), or out of "
            f"{GROUP}"))
    if {g.role for g in groups} != set(ROLES) or problems:
        raise PlanError(problems, source)

    for g in groups:
        topo, found = _topology(g, engine.CAPS, False)
        g.topo = topo
        ea, arg_problems = engine.engine_args(g.ctx, topo)
        problems += arg_problems
        g.args = ea
        values, vproblems = engine.pd_group_values(g.ctx, g.role, g.cfg, cfg, ea)
        problems += vproblems
        dp_attention = bool(ea.values.get("--enable-dp-attention"))
        topo, found = _topology(g, engine.CAPS, dp_attention)
        g.topo = topo
        problems += found
        if found:
            continue
        problems += check_resolved(g.ctx, topo)
        problems += check_model_limits(g.ctx, topo, ea.values, f"the {g.role} group {g.name!r}: ")
        ib = {n.name: _ib_device(ctx, g, n, problems) for n in g.ctx.dep.nodes}
        g.plans = engine.pd_services(g.ctx, g.role, topo, ea, ib)
        fit = memory.check_fit(g.ctx, topo, ea.values)
        for p in fit:
            p.message = f"the {g.role} group {g.name!r}: {p.message}"
            p.fix = p.fix.replace("llmb_tensor_parallel or llmb_pipeline_parallel", f"{VAR}.{g.role}.tensor_parallel")
        problems += fit
    if problems:
        raise PlanError(problems, source)

    prefills = [g for g in groups if g.role == "prefill"]
    decodes = [g for g in groups if g.role == "decode"]
    prefill = prefills[0]
    for other in groups[1:]:  # one pass over what each instance uses of the others
        problems += engine.pd_agreement(ctx, prefill, other)
    router_cfg = cfg.get("router") or {}
    router_host = str(router_cfg.get("host") or prefill.head.name)
    plans = {hp.host: hp for g in groups for hp in g.plans}
    control = _control_plan(ctx, router_host, owner, len(ctx.dep.nodes), problems)
    if router_host not in owner and control is None:
        raise PlanError(problems, source)
    router_node = (next(n for n in ctx.dep.nodes if n.name == router_host) if control is None
                   else Node(control.host, control.address, control.rank))
    svc, rproblems = engine.pd_router(ctx, router_node, prefills, decodes, cfg)
    problems += rproblems
    if control is not None:
        plans[router_host] = control
        if svc is not None:
            svc.notes.append(f"on the control node {router_host} (outside {GROUP}): the engine stage installs "
                             "the router's package alone there, no engine")
    if svc is not None:
        plans[router_host].services.append(svc)
    ordered = [plans[n.name] for n in ctx.dep.nodes if n.name in plans]
    ordered += [control] if control is not None else []
    for i, hp in enumerate(ordered):
        hp.rank = i
    confine_listeners(ctx, ordered)
    problems += check_model(ctx, prefill.args.values)
    problems += check_image(ctx)
    problems += check_ports(ctx, ordered)
    if problems:
        raise PlanError(problems, source)
    for g in groups:
        ctx.notes.append(f"{g.role} group {g.name}: " + g.topo.describe())
        ctx.notes.extend(g.args.notes)
    return Planned(ctx, prefill.topo, ordered)
