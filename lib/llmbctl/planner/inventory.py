"""The inventory variables the planner reads, their types, ranges and formats, and how they are read.

``KNOBS`` (planner.knobs) is the single table of the serve stage's variables; the sample inventories document
every one of them (a unit test holds them to it) and docs/launch-plan.md describes them.
Variables shared with other stages keep the names agreed for the whole toolkit: llmb_platform,
llmb_model, llmb_engine, llmb_engine_version, llmb_install, llmb_model_dir, llmb_cluster_iface,
llmb_node_ip / ansible_host, llmb_head and the group accel_nodes.

Every ``llmb_*`` variable and every stage variable (``weights_*``, ``verify_*``, ``ssh_mesh_*``,
``engine_host_*``, ``engine_image_*``, ``bench_*``, ``serve_*``, ``accuracy_*``) of every host is checked here,
before anything else is planned: the name must be known (a misspelling gets "did you mean"), the
value must have the declared type, range and format, no string anywhere in an ``llmb_*`` value may
hold a control character, and a cluster-wide knob may not be set on one host. The stage variables'
names and types are read from roles/*/meta/argument_specs.yml, so the two never disagree.

Where a value was set (group or host) is told by the caller as ``host_set``: for each host the
names set on the host itself (hosts.yml host entry or host_vars/). scripts/launch-plan records
them while it merges the inventory; the filter plugin asks Ansible's inventory for them.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .disaggvars import (
    DISAGG_GROUP_KEYS,
    DISAGG_ROLES,
    DISAGG_ROUTER_KEYS,
    DISAGG_TOP_KEYS,
    DISAGG_VAR,
    check_disaggregation,
)
from .docowned import DOC_OWNED, ROLE_TEST_VARS_ENV, doc_owned_problem
from .knobs import KNOB_BY_NAME, KNOBS, PRESETS_DIR_HINT, TOOLKIT_KNOBS, engine_names
from .model import Problem
from .stagevars import (
    PLANNER_READ_STAGE_KNOBS,
    ROLES_DIR,
    STAGE_PREFIXES,
    _unknown,
    is_checked_name,
    known_variables,
    stage_knobs,
)
from .values import (
    FORMATS,
    PARALLEL_MAX,
    TIMEOUT_MAX,
    VAULT_FIX,
    Knob,
    Vaulted,
    _article,
    _role_coerce,
    check_value,
    is_address,
    is_path,
    is_served_name,
    is_template,
    plain,
    shown,
    type_name,
)

# The modules this file was cut into, by section: values (the Knob type and one value's checks),
# knobs (the KNOBS table), disaggvars (llmb_disaggregation's keys), docowned (role variables the
# document holds), stagevars (the roles' variables, known names). Their names are importable from
# here as before.
__all__ = [
    "DISAGG_GROUP_KEYS", "DISAGG_ROLES", "DISAGG_ROUTER_KEYS", "DISAGG_TOP_KEYS", "DISAGG_VAR", "DOC_OWNED",
    "FORMATS", "GROUP", "KNOBS", "KNOB_BY_NAME", "PARALLEL_MAX", "PRESETS_DIR_HINT", "ROLES_DIR",
    "ROLE_TEST_VARS_ENV", "STAGE_PREFIXES", "TIMEOUT_MAX", "TOOLKIT_KNOBS", "VAULT_FIX", "Deployment", "Knob",
    "Node", "Problem", "Vaulted", "check_disaggregation", "check_value", "check_variables", "doc_owned_problem",
    "engine_names", "group_hosts", "is_address", "is_checked_name", "is_loopback", "is_path", "is_served_name",
    "is_template", "known_variables", "node_address", "plain", "read_deployment", "read_var", "shown",
    "stage_knobs", "type_name",
]

GROUP = "accel_nodes"


def read_var(hv: Any, key: str) -> tuple[Any, str | None]:
    """A host's value (None when unset) or the reason it could not be read: the one reader of
    inventory values (the planner and llmbctl.deployment)."""
    if hv is None:
        return None, None
    try:
        value = plain(hv.get(key))
    except Exception as exc:  # an undecryptable vault value or a failing template: name the variable
        text = str(exc).strip().splitlines()
        return None, (text[0] if text else type(exc).__name__)
    knob = KNOB_BY_NAME.get(key)
    return (_role_coerce(knob.type, value) if knob is not None else value), None


def check_variables(
    hostvars: Any, names: list[str], host_set: dict[str, Any] | None = None, roles_dir: str | None = None
) -> list[Problem]:
    """Names, scopes and values of every llmb_* and stage variable of the hosts.

    A problem that every host shares (a group variable) is listed once without a host.
    """
    known = known_variables(roles_dir)
    checked_stage = bool(stage_knobs(roles_dir))
    found: dict[tuple[str, str, str], tuple[Problem, list[str]]] = {}
    memo: dict[tuple[str, type, Any], list[Problem]] = {}

    def add(problem: Problem, host: str) -> None:
        key = (problem.check, problem.message, str(problem.found))
        if key in found:
            found[key][1].append(host)
        else:
            found[key] = (problem, [host])

    role_test_vars = os.environ.get(ROLE_TEST_VARS_ENV, "") == "1"
    for host in names:
        hv = hostvars[host]
        keys = sorted(str(k) for k in (hv.keys() if hv is not None else []) if is_checked_name(str(k)))
        for key in keys:
            if key in DOC_OWNED and not role_test_vars:
                add(doc_owned_problem(key), host)
                continue
            if key not in known:
                if key.startswith("llmb_") or checked_stage:
                    add(_unknown(key, known), host)
                continue
            knob = known[key]
            value, error = read_var(hv, key)
            if error is not None:
                add(
                    Problem(
                        check="read",
                        message=f"{key} could not be read: {error}",
                        found="<unreadable>",
                        fix=VAULT_FIX if "vault" in error.lower() else f"fix the value of {key}",
                    ),
                    host,
                )
                continue
            if value is None:
                continue
            if isinstance(value, (str, int, float)):  # group values repeat on every host: check once
                memo_key = (key, type(value), value)
                if memo_key not in memo:
                    memo[memo_key] = check_value(knob, value)
                value_problems = memo[memo_key]
            else:
                value_problems = check_value(knob, value)
            for problem in value_problems:
                add(problem, host)
        own = (host_set or {}).get(host) or ()
        for key in sorted(str(k) for k in own):
            knob = KNOB_BY_NAME.get(key)
            if knob is not None and not knob.per_host:
                add(
                    Problem(
                        check="scope",
                        message=f"{key} is set on host {host} (hosts.yml or host_vars/{host}), but it is "
                        "cluster-wide: every node must run with the same value",
                        found=f"{host}: {key}",
                        expected=f"{key} in group_vars/all (or the {GROUP} group's vars)",
                        fix=f"move {key} from host {host} to group_vars/all",
                    ),
                    host,
                )
    out = []
    for problem, hosts in found.values():
        hosts = list(dict.fromkeys(hosts))
        if len(hosts) < len(names) or len(names) == 1:
            problem.host = problem.host or (", ".join(hosts[:3]) + (" ..." if len(hosts) > 3 else ""))
            if len(names) == 1:
                problem.host = None
        out.append(problem)
    return out


@dataclass
class Node:
    name: str
    address: str
    rank: int
    rdma_rails: tuple[str, ...] = ()  # llmb_rdma_rails (verify's tag fabric records them per host)
    rdma_gid_index: int | None = None


@dataclass
class Deployment:
    """The inventory after type checks and defaults, in the planner's terms."""

    nodes: list[Node]
    vars: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)  # the inventory's groups (host names)
    node_facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # per host: llmb_ib_device, rdma
    # the inventory's hosts outside accel_nodes (a control node that may run the PD router): name -> address
    outside: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.vars[key]

    @property
    def head(self) -> Node:
        return self.nodes[0]


def group_hosts(groups: dict[str, Any]) -> list[str]:
    return [str(h) for h in (groups.get(GROUP) or [])]


def node_address(name: str, hv: Any) -> str:
    return _address_of(name, hv)[0]


def _facts_are_this_inventorys(accel: dict[str, Any], hv: Mapping[str, Any]) -> bool:
    """Whether the verify stage's cached facts (``llmb_accel``) were recorded for this inventory's host.
    Ansible's fact cache is keyed by host name alone: a controller that also drives another
    inventory (another cluster, a test cluster) with a ``node2`` would hand this plan that node's RDMA
    ports. Facts recorded before the mark existed are taken as this inventory's."""
    recorded, here = accel.get("inventory_dir"), hv.get("inventory_dir")
    if not isinstance(recorded, str) or not isinstance(here, str):
        return True
    return os.path.realpath(recorded) == os.path.realpath(here)


def _address_of(name: str, hv: Any) -> tuple[str, str]:
    """(address, the variable it came from) of a node."""
    for key in ("llmb_node_ip", "ansible_host"):
        value, _ = read_var(hv, key)
        if value and not isinstance(value, Vaulted):
            return str(value), key
    return name, "the inventory host name"


def is_loopback(address: str) -> bool:
    if address in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def read_deployment(
    hostvars: Any, groups: dict[str, Any], host_set: dict[str, Any] | None = None
) -> tuple[Deployment | None, list[Problem]]:
    """Check every variable and put the head first. Returns (deployment or None, problems)."""
    problems: list[Problem] = []
    names = group_hosts(groups)
    if not names:
        problems.append(Problem("hosts", f"the inventory has no hosts in group {GROUP}",
                                found=f"groups: {sorted(groups)[:10]}",
                                expected=f"a group {GROUP} listing the accelerator nodes",
                                fix=f"add the nodes under 'children: {GROUP}: hosts:' in hosts.yml"))
        return None, problems
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        problems.append(
            Problem("hosts", f"hosts listed twice in {GROUP}", found=dup, fix="list each node once")
        )
        names = list(dict.fromkeys(names))

    var_problems = check_variables(hostvars, names, host_set)
    problems.extend(var_problems)
    bad_vars = {p.message.split(" ", 1)[0].split("[", 1)[0] for p in var_problems}

    head_name, _ = read_var(hostvars[names[0]], "llmb_head")
    if head_name is not None and not isinstance(head_name, Vaulted):
        head_name = str(head_name)
        if head_name not in names:
            problems.append(
                Problem(
                    check="head",
                    message=f"llmb_head names {head_name!r}, which is not in group {GROUP}",
                    found=shown(head_name),
                    expected=f"one of {names[:8]}{' ...' if len(names) > 8 else ''}",
                    fix=f"set llmb_head to a host of {GROUP} or remove it (the first host is the head)",
                )
            )
            head_name = None
    else:
        head_name = None
    ordered = list(names)
    if head_name:
        ordered.remove(head_name)
        ordered.insert(0, head_name)

    head_hv = hostvars[ordered[0]]
    values: dict[str, Any] = {}
    for knob in KNOBS:
        if knob.per_host:
            continue
        value, _ = read_var(head_hv, knob.name)
        if value is None:
            if knob.required:
                problems.append(
                    Problem(
                        check="required",
                        message=f"{knob.name} is not set ({knob.doc})",
                        expected=" | ".join(knob.allowed) if knob.allowed else _article(knob.type),
                        fix=f"set {knob.name} in the inventory's group_vars/all/",
                    )
                )
                continue
            value = knob.default
        elif knob.name in bad_vars:
            continue
        values[knob.name] = value
    # stage options the plan itself depends on (the smoke test's image: the plan's api.vision)
    for name in PLANNER_READ_STAGE_KNOBS:
        value, _ = read_var(head_hv, name)
        knob = stage_knobs().get(name)
        if name not in bad_vars:
            values[name] = value if value is not None else (knob.default if knob else None)

    # knobs that shape the whole cluster must agree on every node
    shared = [k.name for k in KNOBS if not k.per_host and k.name != "llmb_head"]
    scoped = {p.found.split(": ", 1)[1] for p in problems if p.check == "scope"}
    if len(ordered) > 1:
        for name in ordered[1:]:
            hv = hostvars[name]
            for key in shared:
                if key in scoped:
                    continue
                a, _ = read_var(head_hv, key)
                b, _ = read_var(hv, key)
                if a != b:
                    problems.append(
                        Problem(
                            check="consistency",
                            message=f"{key} differs between {ordered[0]} and {name}; the cluster needs one value",
                            found=f"{ordered[0]}: {shown(a)}, {name}: {shown(b)}",
                            fix=f"set {key} in group_vars/all, not per host",
                            host=name,
                        )
                    )

    nodes = []
    addrs: dict[str, str] = {}
    for i, n in enumerate(ordered):
        address, source = _address_of(n, hostvars[n])
        rails, _ = read_var(hostvars[n], "llmb_rdma_rails")
        gid, _ = read_var(hostvars[n], "llmb_rdma_gid_index")
        ok = not {"llmb_rdma_rails", "llmb_rdma_gid_index"} & bad_vars
        nodes.append(Node(n, address, i, tuple(str(r) for r in rails or ()) if ok else (), gid if ok else None))
        if source != "llmb_node_ip" and not is_address(address):
            problems.append(
                Problem(
                    check="format",
                    message=f"the address of {n} ({source}) is not an IP address or an RFC 1123 host name; "
                    "it would become the node's cluster address",
                    found=shown(address),
                    expected=FORMATS["address"][1],
                    fix=f"set llmb_node_ip of {n} to its cluster address",
                    host=n,
                )
            )
    for node in nodes:
        if node.address in addrs:
            problems.append(
                Problem(
                    check="addresses",
                    message=f"{node.name} and {addrs[node.address]} have the same address",
                    found=node.address,
                    fix="give every node its own llmb_node_ip (or ansible_host)",
                    host=node.name,
                )
            )
        addrs[node.address] = node.name
    node_facts: dict[str, dict[str, Any]] = {}
    for n in ordered:  # per node: what the inventory says, else what the verify stage found
        ib, _ = read_var(hostvars[n], "llmb_ib_device")
        amx, _ = read_var(hostvars[n], "llmb_cpu_amx")
        accel, _ = read_var(hostvars[n], "llmb_accel")
        accel = accel if isinstance(accel, dict) else {}
        if not _facts_are_this_inventorys(accel, hostvars[n]):
            accel = {}
        rdma = accel.get("rdma_devices")
        if not isinstance(amx, bool):
            amx = accel.get("cpu_amx") if isinstance(accel.get("cpu_amx"), bool) else None
        node_facts[n] = {"ib_device": ib if isinstance(ib, str) else None,
                         "rdma_devices": rdma if isinstance(rdma, list) else None, "cpu_amx": amx}
    groups_seen = {str(k): [str(h) for h in (v or [])] for k, v in groups.items()}
    outside = {h: _address_of(h, hostvars[h])[0] for h in groups_seen.get("all", [])
               if h not in names and h in hostvars}
    return Deployment(nodes=nodes, vars=values, groups=groups_seen, node_facts=node_facts,
                      outside=outside), problems
