"""Serve-stage logic shared by the node-side modules (stdlib only, Python 3.9+).

- systemd_unit(svc, etc_dir), environment_file(svc): the unit and EnvironmentFile of a plan
  service, every value quoted by .quoting (systemd_exec(argv): an Exec line's value).
- Containers (`docker run`, the spec-hash label, node checks): llmb.container.
- Readiness: classify a unit's state and decide whether to keep waiting or fail now.
"""

from __future__ import annotations

import os
import re

from .procnet import TCP_ESTABLISHED, addr, read_tables, rows, socket_inodes
from .quoting import (
    QuotingError,
    absolute_path,
    env_assignment,
    systemd_exec,
    unit_name,
    unit_value,
)

__all__ = ["QuotingError", "systemd_exec"]  # re-exported: the filter and older callers import them from here

# --- unit and environment files ------------------------------------------------------------
# The lines of the files the serve role writes for a systemd/mpirun service, every value quoted by
# .quoting (the role's templates only add the ansible_managed header). A value that cannot be
# written raises QuotingError naming the service and the field: the role fails before a node
# gets a unit that loads as something else.
#
# Why an EnvironmentFile and not Environment= lines: the unit is world-readable (0644) and the
# environment may hold tokens (the env file is 0600), and a changed env file alone restarts only
# its service. Its syntax (NAME="value", \\ \" \$ \` escaped) reads back the same in systemd
# and in `sh`.

UNIT_SERVICE_SETTINGS = (
    "Restart=on-failure",
    # an engine that ends with status 0 by itself is restarted too: vLLM 0.26.0's node rank 0 exits 0
    # after its engine core died of a lost node (docs/examples/serve-real-multinode/faults/kill-rank/);
    # a stop asked for (systemctl stop) is never restarted
    "RestartForceExitStatus=0",
    "RestartSec=10",
    "KillMode=mixed",
    "TimeoutStopSec=60",
    "LimitNOFILE=1048576",
    "LimitMEMLOCK=infinity",
    "StandardOutput=journal",
    "StandardError=journal",
)


def systemd_unit(svc: dict, etc_dir: str, group: dict | None = None) -> str:
    """Body of /etc/systemd/system/<name>.service for a plan service (kind systemd or mpirun).

    group (group_view, several nodes): the unit is part of this node's llmb-group.target (PartOf=),
    bound to the services of this node it depends on (BindsTo=, After=: stopped with them, started
    after them), waits for the head's readiness port before it starts (a member's unit), and reports
    its loss to the head (ExecStopPost=), which restarts the group in plan order (llmb.grouptool)."""
    name = unit_name(svc.get("name"), "service name")
    role = svc.get("role") or name
    env_file = absolute_path(
        f"{str(etc_dir).rstrip('/')}/{name}.env", f"service {name}: EnvironmentFile (serve_etc_dir)"
    )
    lines = [
        "[Unit]",
        f"Description={unit_value(f'llm-bringup {role} ({name})', f'service {name}: Description (role)')}",
        # an exec unit runs its process in an engine container: after the engine that runs containers
        "After=network-online.target docker.service" if svc.get("kind") == "exec" else "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=0",
    ]
    if group:
        lines.append(f"PartOf={GROUP_TARGET}")
        for dep in (group.get("deps") or {}).get(name) or []:
            dep = unit_name(dep, f"service {name}: depends_on")
            lines += [f"BindsTo={dep}.service", f"After={dep}.service"]
    lines += [
        "",
        "[Service]",
        "Type=simple",
        f"EnvironmentFile={env_file}",
    ]
    if group:
        for host, port in (group.get("waits") or {}).get(name) or []:
            argv = [*group["tool"], "wait", str(host), str(int(port)), str(int(group.get("wait_s") or 600))]
            lines.append(f"ExecStartPre={systemd_exec(argv, name, 'ExecStartPre')}")
    lines.append(f"ExecStart={systemd_exec(svc.get('argv'), name, 'ExecStart')}")
    if svc.get("stop_argv"):
        lines.append(f"ExecStop={systemd_exec(svc['stop_argv'], name, 'ExecStop')}")
    if group:
        head = "local" if group.get("is_head") else str(group["head_address"])
        argv = [*group["tool"], "stopped", name, "--head", head, "--ssh-config", str(group["ssh_config"])]
        lines.append(f"ExecStopPost={systemd_exec(argv, name, 'ExecStopPost')}")
    lines += [*UNIT_SERVICE_SETTINGS, f"SyslogIdentifier={name}", "", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"


# --- the serving group (several nodes) ------------------------------------------------------
GROUP_TARGET = "llmb-group.target"
GROUP_RESTART = "llmb-group-restart.service"
GROUP_SETTLE_S = 30
UNIT_KINDS = ("systemd", "mpirun")


def _ref(ref: str) -> tuple[str, str]:
    host, _, svc = str(ref).partition("/")
    return host, svc


def group_view(doc: dict, host: str, tool: list[str], ssh_config: str, wait_s: int = 600) -> dict | None:
    """The serving group as `host` runs it, from the deployment document: None on one node (systemd's
    Restart= of the one unit is the group) or where the host runs no unit.

    head: the host of rank 0 (the plan's head: Ray head, DP rank 0, node rank 0, mpirun launcher);
    units: this host's systemd/mpirun services; deps: per unit, the services of this host it depends
    on; waits: per unit, (address, port) of the TCP readiness of every service on another host it
    depends on (a member waits for the head); members: on the head, the other hosts with units."""
    hosts = doc.get("hosts") or {}
    plans = {h: (e.get("plan") or {}) for h, e in hosts.items()}
    unit_hosts = [h for h, p in plans.items() if any(s.get("kind") in UNIT_KINDS for s in p.get("services") or [])]
    busy = [h for h, p in plans.items() if p.get("services")]
    if len(busy) < 2 or host not in unit_hosts:
        return None
    head = min(hosts, key=lambda h: hosts[h].get("rank", 0))
    by_ref = {f"{h}/{s['name']}": s for h, p in plans.items() for s in p.get("services") or []}
    mine = [s for s in plans[host].get("services") or [] if s.get("kind") in UNIT_KINDS]
    deps: dict[str, list[str]] = {}
    waits: dict[str, list[list]] = {}
    for svc in mine:
        for ref in svc.get("depends_on") or []:
            dep_host, dep_name = _ref(ref)
            if dep_host == host:  # a container of this node is docker's, not a unit to bind to
                if dep_name != svc["name"] and (by_ref.get(ref) or {}).get("kind") in UNIT_KINDS:
                    deps.setdefault(svc["name"], []).append(dep_name)
                continue
            ready = (by_ref.get(ref) or {}).get("ready") or {}
            if dep_host == head and ready.get("type") == "tcp":
                waits.setdefault(svc["name"], []).append([ready["host"], int(ready["port"])])
    return {
        "target": GROUP_TARGET,
        "head": head,
        "is_head": host == head,
        "head_address": hosts[head].get("address"),
        "members": [hosts[h]["address"] for h in unit_hosts if h != head] if host == head else [],
        "units": [s["name"] for s in mine],
        "deps": deps,
        "waits": waits,
        "tool": [str(t) for t in tool],
        "ssh_config": str(ssh_config),
        "wait_s": int(wait_s),
        "settle_s": GROUP_SETTLE_S,
    }


def group_target(group: dict) -> str:
    """Body of llmb-group.target: this node's units of the group (restarting it restarts them all,
    in the order their After= lines give)."""
    units = " ".join(f"{unit_name(u, 'group unit')}.service" for u in group.get("units") or [])
    what = unit_value(f"llm-bringup serving group, head {group.get('head')}", "group: Description (head)")
    return "\n".join([
        "[Unit]",
        f"Description={what}",
        f"Wants={units}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]) + "\n"


def group_restart_unit(group: dict) -> str:
    """Body of llmb-group-restart.service (the head): restart the group here, then on every member."""
    argv = [*group["tool"], "restart", "--settle", str(int(group.get("settle_s") or GROUP_SETTLE_S)),
            "--ssh-config", str(group["ssh_config"]), *[str(m) for m in group.get("members") or []]]
    return "\n".join([
        "[Unit]",
        "Description=llm-bringup: restart the serving group in plan order (head, then members)",
        "",
        "[Service]",
        "Type=oneshot",
        f"ExecStart={systemd_exec(argv, 'llmb-group-restart', 'ExecStart')}",
        "SyslogIdentifier=llmb-group",
    ]) + "\n"


def environment_file(svc: dict, secrets: dict | None = None) -> str:
    """Body of <serve_etc_dir>/<name>.env: one NAME="value" line per variable, sorted by name
    ignoring case (the order Jinja's dictsort gave before). ``secrets``: variables whose values the
    plan does not carry (the API key, api.api_key of the plan), added here only."""
    name = unit_name(svc.get("name"), "service name")
    env = svc.get("env") or {}
    if not isinstance(env, dict):
        raise QuotingError(f"service {name}: environment: expected a mapping, found {env!r}")
    if secrets:
        env = {**env, **secrets}
    return "".join(env_assignment(k, env[k], name) + "\n" for k in sorted(env, key=lambda k: (str(k).lower(), str(k))))


# --- readiness -------------------------------------------------------------------------------

def unit_verdict(props: dict, restarts_at_start: int) -> str | None:
    """None while a starting unit may still come up; else a reason it will not."""
    active = props.get("ActiveState", "")
    sub = props.get("SubState", "")
    restarts = int(props.get("NRestarts", "0") or 0)
    if active == "failed":
        return f"unit failed (exit status {props.get('ExecMainStatus', '?')}, {props.get('Result', '?')})"
    if restarts > restarts_at_start or sub == "auto-restart":
        return f"unit exited and is being restarted by systemd (exit status {props.get('ExecMainStatus', '?')})"
    if active == "inactive" and sub == "dead":
        return "unit is not running (inactive)"
    return None


def group_verdict(members: list) -> dict:
    """Whether a serving group is whole: every planned service of every node still running.

    members: one entry per planned service of every node, {"host", "name", "role", "alive", "why",
    "engine_error"} (llmb.ready.alive of each). Rank 0's /health cannot tell: vLLM 0.26.0's node rank
    0 kept answering 200 after a node of its TP group was killed (docs/examples/serve-real-multinode/
    faults/kill-rank/), so the group's state is read from every member's unit, not from the API.
    Returns {"whole", "services", "lost": [members not running], "msg"}.
    """
    seen = [m for m in members or [] if isinstance(m, dict) and m.get("name")]
    lost = [m for m in seen if not m.get("alive")]
    parts = []
    for m in lost:
        role = f" ({m['role']})" if m.get("role") else ""
        err = f"; engine error: {m['engine_error']}" if m.get("engine_error") else ""
        parts.append(f"{m.get('host') or '?'}: {m['name']}{role}: {m.get('why') or 'not running'}{err}")
    if not seen:
        msg = "group check: no service of the plan was looked at"
    elif lost:
        msg = (f"the serving group is not whole: {len(lost)} of {len(seen)} services lost - " + "; ".join(parts)
               + ". The API may still answer /health 200 (a lost rank is not seen there): restart the group "
               "in plan order (llmb-group.target on the head, or run the serve stage again)")
    else:
        msg = f"the serving group is whole: {len(seen)} services running on {len({m.get('host') for m in seen})} nodes"
    return {"whole": bool(seen) and not lost, "services": len(seen), "lost": lost, "msg": msg}


_ERROR_LINE = re.compile(
    r"(?:^|\s)(?:[A-Za-z_][\w.]*(?:Error|Exception): .*"  # ValueError: ... (a traceback's last line)
    r"|[\w.-]+: error: .*)$"  # argparse: "vllm: error: unrecognized arguments: ..."
)


_PROC_PREFIX = re.compile(r"^\s*\([\w ]+pid=\d+\)\s?")


# vLLM's wrappers that only point at the cause: the API process's "RuntimeError: Engine core
# initialization failed. See root cause above.", EngineDeadError's "See stack trace (above) for the
# root cause.", the engine core's "WorkerProc initialization failed ... See stack trace for root cause."
_WRAPPER = re.compile(r"root cause", re.IGNORECASE)
# the line a vLLM process logs before the traceback of its own start-up failure ("EngineCore failed
# to start.", "WorkerProc failed to start."), with its logger prefix: "(EngineCore pid=1) ERROR
# 11-27 03:59:37 [core.py:1330] "; every line of that traceback carries the same prefix
_FAILED_TO_START = re.compile(r"^(?P<prefix>.*\b(?:ERROR|CRITICAL)\b.*?\[[\w.]+:\d+\]\s)\s*\w+ failed to start\.?\s*$")


def is_wrapper(line: str | None) -> bool:
    """An engine error line that only points at a root cause logged elsewhere."""
    return bool(line) and bool(_WRAPPER.search(line))


def _error_text(lines: list[str], n: int) -> str | None:
    """The error text of line n (the exception or usage-error line), None when it is none."""
    m = _ERROR_LINE.search(lines[n].strip())
    if not m:
        return None
    text = m.group(0).strip()
    # pydantic (vLLM >= 0.2x config classes): the reason is on the next line,
    # "(APIServer pid=1) ValidationError: 1 validation error for ParallelConfig" then
    # "(APIServer pid=1)   Value error, World size (2) is larger than ..."
    if "validation error for" in text and n + 1 < len(lines):
        reason = _PROC_PREFIX.sub("", lines[n + 1]).strip()
        if reason.startswith("Value error, "):
            text = f"{text}: {reason[len('Value error, '):]}"
    return text


def _failed_to_start_cause(lines: list[str]) -> str | None:
    """The first start-up failure a vLLM process logged with its traceback: the last exception line
    of that traceback that is not itself a wrapper. What follows it (other ranks, Ray's actor
    clean-up, the API process's wrapper) is consequence, not cause."""
    for n, line in enumerate(lines):
        m = _FAILED_TO_START.match(line.rstrip())
        if not m:
            continue
        prefix, cause = m.group("prefix"), None
        for k in range(n + 1, len(lines)):
            if not lines[k].startswith(prefix.rstrip()):
                break
            text = _error_text(lines, k)
            if text and not is_wrapper(text):
                cause = text
        if cause:
            return cause
    return None


_LOAD_WEIGHTS = re.compile(r"Loading weights took ([0-9.]+) seconds")
_MODEL_LOADING = re.compile(r"Model loading took ([0-9.]+) GiB memory and ([0-9.]+) seconds")
_KV_MEMORY = re.compile(r"Available KV cache memory: ([0-9.]+) GiB")


def weight_load_timings(log_text: str) -> dict:
    """What vLLM's own log says of its last start's weight load (vLLM 0.26.0, default_loader.py and
    gpu_model_runner.py; docs/examples/serve-real-multinode/loadrate/): loading_weights_s ("Loading weights
    took S seconds", the slowest rank where several log it), model_loading_gib and model_loading_s ("Model
    loading took G GiB memory and S seconds", per device), kv_cache_gib ("Available KV cache memory"); None
    where the log has no such line. A log holding several starts (a restart appends to it, as the journal
    does) is read from its last start on (vLLM's "non-default args:" line, the double's "Loading weights from")."""
    text = str(log_text or "")
    starts = [m.start() for m in re.finditer(r"non-default args:|Loading weights from", text)]
    if starts:
        text = text[starts[-1]:]
    took = [float(x) for x in _LOAD_WEIGHTS.findall(text)]
    loading = _MODEL_LOADING.findall(text)
    kv = _KV_MEMORY.findall(text)
    return {"loading_weights_s": max(took) if took else None,
            "model_loading_gib": float(loading[-1][0]) if loading else None,
            "model_loading_s": float(loading[-1][1]) if loading else None,
            "kv_cache_gib": float(kv[-1]) if kv else None}


def engine_error_line(log_text: str) -> str | None:
    """The engine's own error line in a log: the last exception or usage-error line; where vLLM says
    the root cause is above, that root cause.

    A real engine that dies at start writes a long traceback (and, in vLLM's case, the same error
    again from the engine core process) after which only shutdown noise follows; the operator needs
    the one line that says why. vLLM's API process ends with a wrapper ("RuntimeError: Engine core
    initialization failed. See root cause above."); the cause is the engine core's "EngineCore
    failed to start." traceback before it (seen on vLLM 0.26.0: a ZMQError binding a wrong master
    address; on Ray, an IndexError followed by pages of Ray actor clean-up errors)."""
    lines = log_text.splitlines()
    best = wrapper = None
    for n in range(len(lines)):
        text = _error_text(lines, n)
        if not text:
            continue
        if is_wrapper(text):
            wrapper = text
        else:
            best = text
    if wrapper is None:
        return best
    return _failed_to_start_cause(lines) or best or wrapper


def parse_systemctl_show(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def container_verdict(state: dict) -> str | None:
    status = state.get("Status", "")
    if status in ("exited", "dead"):
        return f"container exited (exit code {state.get('ExitCode')}, {state.get('Error') or 'no error text'})"
    if state.get("Restarting"):
        return f"container is restarting (exit code {state.get('ExitCode')})"
    return None


# --------------------------------------------------------------------------- "connected" readiness
# A rank that joins a master (a Ray worker: raylet and workers keep gRPC connections to the head's
# GCS port) is ready when a process of its unit or container holds an ESTABLISHED TCP connection to
# the master's address and port. Read from /proc, stdlib only (runs on the node).

def established_peers(tcp_tables: list[str]) -> dict[int, tuple[str, int]]:
    """{socket inode: (remote address, remote port)} of ESTABLISHED sockets in /proc/net/tcp{,6} texts."""
    out: dict[int, tuple[str, int]] = {}
    for text in tcp_tables:
        for _local, remote, inode in rows(text, TCP_ESTABLISHED):
            try:
                out[inode] = addr(remote)
            except ValueError:
                continue
    return out


def process_tree(proc: str, roots: list[int]) -> set[int]:
    """roots and all their descendants, from <proc>/<pid>/stat parent ids."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    seen: set[int] = set()
    todo = [r for r in roots if r > 0]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return seen


def connected_to(proc: str, roots: list[int], host: str, port: int) -> tuple[bool, list[str]]:
    """Whether a process under roots holds an ESTABLISHED TCP connection to host:port; also the
    remote endpoints it does hold (for the failure message)."""
    pids = process_tree(proc, roots)
    inodes = {i for pid in pids for i in socket_inodes(proc, pid)}
    # one network namespace per unit or container: the tables of any one of its processes
    tables = read_tables(f"{proc}/{min(pids)}/net") if pids else []
    peers = {i: p for i, p in established_peers(tables).items() if i in inodes}
    held = sorted({f"{a}:{p}" for a, p in peers.values()})
    return any(a == host and p == int(port) for a, p in peers.values()), held


# --------------------------------------------------------------------------- start or restart
# The serve role starts every unit of a level, restarting those whose definition changed. A unit
# that runs its process inside engine containers (kind exec: `docker exec <container> vllm serve`;
# kind mpirun: `docker exec <container> mpirun ...` over the nodes' containers) also restarts when a
# container it depends on was created, replaced or started in this run (its process lived in the
# old container, or lost ranks), or when the config files of its container changed (the engine
# reads them at start).

UNIT_KINDS = ("systemd", "mpirun", "exec")
CONTAINER_ACTIONS = ("create", "replace", "start")


def replaced_containers(results: list, host: str) -> list:
    """host/name of every container a llmb_container loop (items: service names) created, replaced
    or started; check mode counts what it would do."""
    out = []
    for r in results or []:
        if r.get("changed") and r.get("action") in CONTAINER_ACTIONS:
            out.append(f"{host}/{r.get('container_name') or r.get('item')}")
    return out


def unit_state(svc: dict, host: str, changed_units: list, replaced: list) -> str:
    """systemd state for a unit of the plan: restarted or started."""
    if svc.get("name") in (changed_units or []):
        return "restarted"
    if svc.get("kind") in ("exec", "mpirun") and svc.get("exec_in"):
        if svc["exec_in"] in (changed_units or []):
            return "restarted"
        deps = {*(svc.get("depends_on") or []), f"{host}/{svc['exec_in']}"}
        if deps & set(replaced or []):
            return "restarted"
    return "started"


MASTER_OF_ROLE = {"ray-worker": "the Ray head's GCS", "dp-headless": "DP rank 0", "sglang-rank": "SGLang rank 0"}


def not_joined_text(role: str | None, host: str, port: int, reachable: bool | None, held: list) -> str:
    """Why a rank is not ready: no established connection to its master host:port; with `reachable`
    (a TCP probe from this node) whether the master's port accepts connections at all."""
    master = MASTER_OF_ROLE.get(role or "", "its master")
    text = (f"the {role or 'service'} holds no established TCP connection to {master} at {host}:{port} "
            f"(its processes hold: {', '.join(held) or 'none'})")
    if reachable is True:
        text += f"; {host}:{port} accepts TCP from this node, so the service reached it and did not join (see its log)"
    elif reachable is False:
        text += (f"; {host}:{port} does not accept TCP from this node (refused, filtered or unreachable): "
                 f"check that the master is up and that this node reaches {host} (llmb_node_ip, llmb_cluster_iface, firewall)")
    return text
