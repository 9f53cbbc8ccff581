"""An upgrade as a plan diff first, then group by group (controller side, pure: no host contacted).

``diff(old, new)``: what changes between two deployment documents (llmbctl.deployment), per host and
service: the engine release and its venv or image, the packages installed beside it, the weights to
fetch (repo, commit, files), config patches, services added or removed, and per service its argv,
environment, systemd unit (rendered by the serve role's own llmb.serve.systemd_unit) and the other
fields of the plan. ``old`` is the document applied last (llmbctl.lockhistory), ``new`` the one stage 0
resolved for this run; ``llmb up --check`` prints it and writes it into the run's directory.

``groups(doc)``: the serving groups in plan order, the units an upgrade applies one after another with
health between: hosts joined by a dependency of one host's service on another host's (a DP group, a
Ray cluster, a multi-node TP/PP group, one prefill or decode group) are one group; a router's
dependencies join nothing (it follows the groups it routes to); a host with services and no such
link is a group alone. Ordered by the group's first start level, then its lowest rank.
"""

from __future__ import annotations

import difflib
import shlex
from typing import Any

from llmb.serve import UNIT_KINDS, group_view, systemd_unit

# plan fields of a service shown as such when they change (argv, env and the unit have their own lines)
SERVICE_FIELDS = ("kind", "role", "order", "image", "devices", "mounts", "ports", "container", "exec_in",
                  "stop_argv", "depends_on", "ready", "health", "api", "config_files")
ROUTER_ROLES = ("router",)
# the serve role's defaults the unit of a multi-node group is rendered with (roles/serve/defaults)
GROUP_PYTHON = "/usr/bin/python3"
GROUP_WAIT_S = 600


# ----------------------------------------------------------------------------- groups


def _ref_host(ref: str) -> str:
    return str(ref).split("/", 1)[0]


def groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The serving groups of a document in plan order: [{n, hosts, services, first_level}]."""
    hosts = doc.get("hosts") or {}
    plans = {h: ((e or {}).get("plan") or {}).get("services") or [] for h, e in hosts.items()}
    busy = [h for h, svcs in plans.items() if svcs]
    parent = {h: h for h in busy}

    def find(h: str) -> str:
        while parent[h] != h:
            parent[h] = parent[parent[h]]
            h = parent[h]
        return h

    for h in busy:
        for svc in plans[h]:
            if svc.get("role") in ROUTER_ROLES:
                continue
            for ref in svc.get("depends_on") or []:
                other = _ref_host(ref)
                if other != h and other in parent:
                    parent[find(h)] = find(other)
    members: dict[str, list[str]] = {}
    for h in busy:
        members.setdefault(find(h), []).append(h)

    def rank(h: str) -> int:
        r = (hosts.get(h) or {}).get("rank")
        return r if isinstance(r, int) else 1 << 30

    out = []
    for hs in members.values():
        hs.sort(key=lambda h: (rank(h), h))
        levels = [s.get("order", 0) for h in hs for s in plans[h]]
        out.append({"hosts": hs, "services": [f"{h}/{s.get('name')}" for h in hs for s in plans[h]],
                    "first_level": min(levels) if levels else 0})
    out.sort(key=lambda g: (g["first_level"], rank(g["hosts"][0]), g["hosts"][0]))
    for i, g in enumerate(out, 1):
        g["n"] = i
    return [{"n": g["n"], "hosts": g["hosts"], "services": g["services"], "first_level": g["first_level"]}
            for g in out]


# ----------------------------------------------------------------------------- diff


def render_unit(doc: dict[str, Any], host: str, svc: dict[str, Any]) -> str | None:
    """The unit body the serve role writes for a service (None for a container, no unit)."""
    if svc.get("kind") not in UNIT_KINDS and svc.get("kind") != "exec":
        return None
    dirs = doc.get("dirs") or {}
    group = group_view(doc, host, [GROUP_PYTHON, f"{dirs.get('opt', '/opt/llmb')}/bin/llmb-group"],
                       f"{dirs.get('ssh_mesh', '/etc/llmb/ssh')}/ssh_config", GROUP_WAIT_S)
    try:
        return systemd_unit(svc, dirs.get("etc") or "/etc/llmb", group)
    except ValueError as exc:  # a value the unit refuses: the serve stage says the same
        return f"# cannot render: {exc}\n"


def _services(doc: dict[str, Any] | None, host: str) -> dict[str, dict[str, Any]]:
    entry = ((doc or {}).get("hosts") or {}).get(host) or {}
    return {str(s.get("name")): s for s in (entry.get("plan") or {}).get("services") or []}


def _change(host: str | None, service: str | None, what: str, old: Any, new: Any, lines: list[str]) -> dict[str, Any]:
    return {"host": host, "service": service, "what": what, "old": old, "new": new, "lines": lines}


def _env_lines(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    lines = []
    for k in sorted(set(old) | set(new)):
        if k not in new:
            lines.append(f"- {k}={old[k]}")
        elif k not in old:
            lines.append(f"+ {k}={new[k]}")
        elif old[k] != new[k]:
            lines += [f"- {k}={old[k]}", f"+ {k}={new[k]}"]
    return lines


def argv_lines(old: list[Any], new: list[Any]) -> list[str]:
    """The words of an argv that change, each with the word before it (a flag's value with its flag)."""
    o, n = [str(x) for x in old], [str(x) for x in new]
    lines = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=o, b=n, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        ctx = [o[i1 - 1]] if i1 > 0 and j1 > 0 and o[i1 - 1] == n[j1 - 1] else []
        if i2 > i1:
            lines.append("- " + shlex.join(ctx + o[i1:i2]))
        if j2 > j1:
            lines.append("+ " + shlex.join(ctx + n[j1:j2]))
    return lines


def _text_diff(old: str, new: str) -> list[str]:
    return [line.rstrip("\n") for line in difflib.unified_diff(old.splitlines(True), new.splitlines(True), n=0)
            if not line.startswith(("---", "+++", "@@"))]


def _engine_text(engine: dict[str, Any]) -> str:
    image = engine.get("image") or {}
    where = engine.get("venv") or (f"{image.get('ref')}@{image.get('digest')}" if image else None)
    return f"{engine.get('name')} {engine.get('version')} ({engine.get('install')}: {where})"


def _weights_text(model: dict[str, Any]) -> str:
    return f"{model.get('repo_id')}@{model.get('commit') or model.get('revision')} in {model.get('dir')}"


def diff(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """What moves from ``old`` (None: nothing applied yet) to ``new``: {changed, old_hash, new_hash,
    changes: [{host, service, what, old, new, lines}], groups: groups(new)}; what is one of engine,
    packages, weights, config_patches, service (added/removed), argv, env, unit, a plan field."""
    changes: list[dict[str, Any]] = []
    old = old or {}
    o_hosts, n_hosts = old.get("hosts") or {}, new.get("hosts") or {}
    o_eng, n_eng = old.get("engine") or {}, new.get("engine") or {}
    eng_keys = ("name", "version", "install", "channel", "venv", "image")
    eng_changed = {k: o_eng.get(k) for k in eng_keys} != {k: n_eng.get(k) for k in eng_keys}
    o_model, n_model = old.get("model") or {}, new.get("model") or {}
    w_keys = ("repo_id", "commit", "allow_patterns", "dir")
    w_changed = {k: o_model.get(k) for k in w_keys} != {k: n_model.get(k) for k in w_keys}
    for host in sorted(set(o_hosts) | set(n_hosts), key=lambda h: ((n_hosts.get(h) or o_hosts.get(h) or {}).get("rank", 0), h)):
        oe, ne = o_hosts.get(host), n_hosts.get(host)
        if ne is None:
            changes.append(_change(host, None, "host", host, None, [f"- host {host} (no longer in the plan)"]))
            continue
        if oe is None:
            changes.append(_change(host, None, "host", None, host, [f"+ host {host} (new in the plan)"]))
        busy = bool(_services(new, host)) or bool(_services(old, host))
        if busy and eng_changed:
            changes.append(_change(host, None, "engine", o_eng or None, n_eng,
                                   ([f"- {_engine_text(o_eng)}"] if o_eng else []) + [f"+ {_engine_text(n_eng)}"]))
        o_pk, n_pk = list((oe or {}).get("packages") or []), list(ne.get("packages") or [])
        if o_pk != n_pk:
            changes.append(_change(host, None, "packages", o_pk, n_pk,
                                   [f"- {p}" for p in o_pk if p not in n_pk] + [f"+ {p}" for p in n_pk if p not in o_pk]))
        if busy and w_changed:
            changes.append(_change(host, None, "weights", {k: o_model.get(k) for k in w_keys} if o_model else None,
                                   {k: n_model.get(k) for k in w_keys},
                                   ([f"- {_weights_text(o_model)}"] if o_model else [])
                                   + [f"+ {_weights_text(n_model)} (to fetch and verify; the running revision "
                                      "stays until then)"]))
        o_cp, n_cp = (oe or {}).get("config_patches") or [], ne.get("config_patches") or []
        if o_cp != n_cp:
            changes.append(_change(host, None, "config_patches", o_cp, n_cp, ["- " + str(o_cp), "+ " + str(n_cp)]))
        o_svc, n_svc = _services(old, host), _services(new, host)
        for name in list(dict.fromkeys([*n_svc, *o_svc])):
            os_, ns = o_svc.get(name), n_svc.get(name)
            if ns is None:
                changes.append(_change(host, name, "service", name, None, [f"- service {name} (stopped, removed)"]))
                continue
            if os_ is None:
                changes.append(_change(host, name, "service", None, name, [f"+ service {name}",
                                                                         "+ argv: " + shlex.join(map(str, ns.get("argv") or []))]))
                continue
            argv_changed = os_.get("argv") != ns.get("argv")
            if argv_changed:
                changes.append(_change(host, name, "argv", os_.get("argv"), ns.get("argv"),
                                       argv_lines(os_.get("argv") or [], ns.get("argv") or [])))
            if (os_.get("env") or {}) != (ns.get("env") or {}):
                changes.append(_change(host, name, "env", os_.get("env"), ns.get("env"),
                                       _env_lines(os_.get("env") or {}, ns.get("env") or {})))
            ou, nu = render_unit(old, host, os_), render_unit(new, host, ns)
            if ou != nu:
                lines = _text_diff(ou or "", nu or "")
                if argv_changed:  # ExecStart= is the argv: said once, above
                    lines = [x for x in lines if not x[1:].startswith("ExecStart=")] + ["  ExecStart=: the argv above"]
                changes.append(_change(host, name, "unit", ou, nu, lines))
            for field in SERVICE_FIELDS:
                if os_.get(field) != ns.get(field):
                    changes.append(_change(host, name, field, os_.get(field), ns.get(field),
                                           [f"- {field}: {os_.get(field)}", f"+ {field}: {ns.get(field)}"]))
    return {"changed": bool(changes), "old_hash": old.get("hash"), "new_hash": new.get("hash"),
            "changes": changes, "groups": groups(new)}


def render(d: dict[str, Any], old_label: str = "applied", new_label: str = "this run") -> list[str]:
    """The diff as text lines, per host and service (what the console prints and upgrade.md holds)."""
    if not d["changed"]:
        return [f"no change: the plan of {new_label} is the one {old_label} ({d.get('new_hash')})"]
    out = [f"plan diff: {old_label} {d.get('old_hash') or '(nothing applied)'} -> {new_label} {d.get('new_hash')}"]
    last = None
    for c in d["changes"]:
        head = c["host"] + (f" {c['service']}" if c["service"] else "")
        if head != last:
            out.append(head)
            last = head
        out.append(f"  {c['what']}:")
        out += [f"    {line}" for line in c["lines"]]
    out.append("apply order (group by group, health between): " + "; ".join(
        f"group {g['n']}: {', '.join(g['hosts'])}" for g in d["groups"]))
    return out
