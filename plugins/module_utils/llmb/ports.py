"""The listening ports of a deployment, who binds what, and the port check before serve (stdlib, 3.9+).

Every port comes from the launch plan (``services[].ports`` of each host's entry in the deployment
document); nothing here derives a port again. What this module adds is the one table of how each
purpose of port is bound (``BINDS``): by a flag of the service's own argv (its value is the bind
address), by the ssh_mesh stage's sshd_config (``ListenAddress``, the node's cluster address), or, where
the engine binds every interface and has no option (Ray's GCS, the torch.distributed store), by the
llmb-bindto preload the planner gives the service (``LLMB_BIND_ADDRESS`` / ``LLMB_BIND_PORTS`` in its
env, roles/serve/files/llmb-bindto.c); with ``llmb_confine_listeners: false`` those stay on every
interface, listed with the reason for docs/ports.md and the firewall.

The port check (serve role, before any service starts) uses:
- ``own_listeners(doc, host)``: what this host will listen on (a brief stand-in listener is opened
  where nothing listens yet, by ``hold_listeners``);
- ``targets(doc, host)``: every listener of every other host, which this host must reach;
- ``probe(targets)``: a TCP connect to each, in parallel, naming the pair, the port and the service;
- ``holder(port)``: who already holds a port on this node (a port taken by something else).
"""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .procnet import TCP_LISTEN, addr, read_tables, rows, socket_inodes

ANY = ("0.0.0.0", "::", "")

# purpose of a plan port -> how its listener is bound. "flag": the argv flag whose value is the bind
# address; "node": the node's cluster address (set outside argv, "node" says where); "preload": the
# engine binds every interface with no option ("preload" says why), so the planner confines it with
# the llmb-bindto preload (PRELOAD_ENV in the service's env). The API may bind 0.0.0.0 (llmb_api_host).
BINDS: dict[str, dict[str, str]] = {
    "api": {"flag": "--host", "who": "clients of the API (any address llmb_api_host allows)"},
    "ray-dashboard": {"flag": "--dashboard-host", "who": "operators on the cluster network"},
    "dp-rpc": {"flag": "--data-parallel-address", "who": "the DP ranks of the other nodes"},
    # SGLang binds its bootstrap server to --host (sglang 0.5.5 managers/disagg_service.py)
    "disaggregation-bootstrap": {"flag": "--host", "who": "the decode group's ranks (the KV transfer's bootstrap)"},
    "sshd": {"node": "ListenAddress in <llmb_ssh_mesh_dir>/sshd_config (ssh_mesh role)",
             "who": "mpirun from the other nodes' engine containers (cluster key only)"},
    "ray-gcs": {"preload": "Ray's GCS binds every interface and Ray has no bind option (gcs_server listens on "
                           "*:<port> with Ray 2.51.1 and 2.60.0)", "who": "the Ray workers and vLLM on the other nodes"},
    "dist-init": {"preload": "the torch.distributed TCPStore of node rank 0 binds every interface and has no "
                             "bind option", "who": "the SGLang ranks of the other nodes"},
    "vllm-master": {"preload": "the torch.distributed TCPStore of node rank 0 (vLLM --master-addr / --master-port) "
                               "binds every interface and has no bind option",
                    "who": "the vLLM nodes of rank 1 and up (--headless)"},
}

def host_port(host: Any, port: Any) -> str:
    """host:port for every consumer (argv, URL, environment, messages): an IPv6 literal in brackets
    ("[fd00::11]:50000"), as URLs (RFC 3986), Ray's build_address and SGLang's --dist-init-addr
    (configure_ipv6) read it; IPv4 and host names as they are."""
    text = str(host)
    if ":" in text and not text.startswith("["):
        text = f"[{text}]"
    return f"{text}:{port}"


def http_url(host: Any, port: Any, path: str = "") -> str:
    """http://host:port/path with host_port's brackets."""
    return f"http://{host_port(host, port)}{path}"


def is_ipv6(host: Any) -> bool:
    return ":" in str(host)


# the service env the planner sets for a "preload" listener (planner/exposure.py: confine_listeners)
PRELOAD_NAME = "llmb-bindto"
BIND_ADDRESS_ENV = "LLMB_BIND_ADDRESS"
BIND_PORTS_ENV = "LLMB_BIND_PORTS"


def preload_ports(env: dict[str, Any] | None) -> set[int]:
    """The ports the llmb-bindto preload confines in a service's env (empty when it is not loaded)."""
    env = env or {}
    if PRELOAD_NAME not in str(env.get("LD_PRELOAD") or "") or not env.get(BIND_ADDRESS_ENV):
        return set()
    out = set()
    for tok in str(env.get(BIND_PORTS_ENV) or "").split(","):
        if tok.strip().isdigit():
            out.add(int(tok))
    return out


class PortsError(ValueError):
    """A plan port whose purpose this module does not know how to bind."""


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of `flag` in argv (`--flag value` or `--flag=value`), the last one given."""
    out = None
    for i, tok in enumerate(argv):
        tok = str(tok)
        if tok == flag and i + 1 < len(argv):
            out = str(argv[i + 1])
        elif tok.startswith(flag + "="):
            out = tok[len(flag) + 1:]
    return out


def bind_of(svc: dict[str, Any], purpose: str, address: str, port: int | None = None) -> tuple[str, str]:
    """(bind address, how it is known) of one listener (`port`) of a plan service on a node of `address`."""
    rule = BINDS.get(purpose)
    if rule is None:
        raise PortsError(
            f"service {svc.get('name')}: port purpose {purpose!r} has no entry in llmb.ports.BINDS; "
            "add how the engine binds it (a flag of its argv, the node address, or every interface and why)"
        )
    if "flag" in rule:
        argv = [str(a) for a in (svc.get("argv") or [])]
        value = flag_value(argv, rule["flag"])
        if value is None:
            return "0.0.0.0", f"{rule['flag']} not given: the engine's default"
        return value, rule["flag"]
    if "node" in rule:
        return address, rule["node"]
    env = svc.get("env") or {}
    if port is not None and int(port) in preload_ports(env):
        return str(env[BIND_ADDRESS_ENV]), f"{PRELOAD_NAME} preload ({BIND_ADDRESS_ENV}): {rule['preload']}"
    return "0.0.0.0", f"every interface (llmb_confine_listeners is off): {rule['preload']}"


def listeners(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every listener of the deployment: host, address, service, purpose, port, bind, how, who."""
    out = []
    for host, entry in sorted((doc.get("hosts") or {}).items()):
        plan = entry.get("plan") or {}
        address = entry.get("address") or plan.get("address")
        for svc in plan.get("services") or []:
            for p in svc.get("ports") or []:
                bind, how = bind_of(svc, p["purpose"], address, int(p["port"]))
                out.append({
                    "host": host, "address": address, "service": svc["name"], "kind": svc.get("kind"),
                    "purpose": p["purpose"], "port": int(p["port"]), "bind": bind, "how": how,
                    "who": BINDS[p["purpose"]]["who"],
                })
    return out


def own_listeners(doc: dict[str, Any], host: str) -> list[dict[str, Any]]:
    return [lst for lst in listeners(doc) if lst["host"] == host]


def targets(doc: dict[str, Any], host: str, listening: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The listeners of every other host, which `host` must reach (one per address and port).

    listening: the other hosts' hold_listeners results (each with its "host"); when given, only the
    ports that answer now (a stand-in, or the plan's own service) are targets."""
    answer = None
    if listening is not None:
        answer = {(r.get("host"), lst["port"]) for r in listening for key in ("opened", "in_use")
                  for lst in (r or {}).get(key) or []}
    seen, out = set(), []
    for lst in listeners(doc):
        key = (lst["address"], lst["port"])
        if answer is not None and (lst["host"], lst["port"]) not in answer:
            continue
        if lst["host"] != host and key not in seen:
            seen.add(key)
            out.append(lst)
    return out


# --------------------------------------------------------------------------- on the node
def connect(address: str, port: int, timeout: float) -> str | None:
    """None when a TCP connection to address:port opens; else why not (refused, timed out, ...)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return None
    except (ConnectionResetError, BrokenPipeError):  # it opened, then the listener reset it (the stand-ins do)
        return None
    except TimeoutError:
        return f"no answer within {timeout:g} s (dropped by a firewall, or the address is not reachable)"
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            return "connection refused (nothing listens there, or a firewall rejects it)"
        if exc.errno == errno.EHOSTUNREACH:
            return "no route to host (a firewall rejects it, or the address is wrong)"
        return exc.strerror or str(exc)


def probe(host: str, tgts: list[dict[str, Any]], timeout: float = 3.0) -> list[dict[str, Any]]:
    """Connect to every target at once; one record per target with ok and, on failure, the message."""
    def one(t: dict[str, Any]) -> dict[str, Any]:
        why = connect(t["address"], t["port"], timeout)
        rec = {"from": host, "to": t["host"], "address": t["address"], "port": t["port"],
               "service": t["service"], "purpose": t["purpose"], "ok": why is None}
        if why is not None:
            rec["message"] = (f"{host} -> {t['host']} {host_port(t['address'], t['port'])} ({t['service']} "
                              f"{t['purpose']}): {why}")
        return rec

    if not tgts:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(tgts))) as pool:
        return list(pool.map(one, tgts))


def holder(port: int, proc: str = "/proc") -> dict[str, Any] | None:
    """{pid, comm, unit} of the process listening on TCP `port` on this node, or None."""
    inodes = {ino for text in read_tables(f"{proc}/net") for local, _r, ino in rows(text, TCP_LISTEN)
              if addr(local)[1] == port}
    if not inodes:
        return None
    for entry in os.listdir(proc):
        if entry.isdigit() and socket_inodes(proc, int(entry)) & inodes:
            return {"pid": int(entry), "comm": _read(f"{proc}/{entry}/comm"), "unit": _unit(proc, int(entry))}
    return {"pid": None, "comm": None, "unit": None}  # another namespace's process, or gone


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


def _unit(proc: str, pid: int) -> str | None:
    """The systemd unit (or docker scope) of a process, from its cgroup path.

    Docker's systemd cgroup driver puts a container in `docker-<id>.scope`; its cgroupfs driver in
    `/docker/<id>` (or `/<--cgroup-parent>/<id>`, as dockerd inside the simulated nodes does): a last
    component that is a 64-hex container id is named `docker-<id>.scope` too."""
    text = _read(f"{proc}/{pid}/cgroup") or ""
    for line in text.splitlines():
        path = line.rsplit(":", 1)[-1]
        parts = [p for p in path.split("/") if p]
        if parts and _CONTAINER_ID.fullmatch(parts[-1]):
            return f"docker-{parts[-1]}.scope"
        for part in reversed(parts):
            if part.endswith((".service", ".scope")):
                return part
    return None


def owned_by(service: dict[str, Any], who: dict[str, Any] | None) -> bool:
    """Whether the process holding a port belongs to the plan's own service (a later run)."""
    unit = (who or {}).get("unit") or ""
    if service.get("kind") in ("container", "mpirun", "exec"):  # a process in the engine container
        # (exec: a unit running `docker exec` into the container, e.g. vllm serve in a Ray head's)
        return unit.startswith("docker-") and unit.endswith(".scope")
    return unit == f"{service['service']}.service"


# The stand-in listeners: sockets bound here and handed to a detached process that accepts and closes
# connections until it is stopped or `hold_s` passes. Constant code; its inputs are argv (numbers).
# Each accepted connection is closed with SO_LINGER 0 (a reset): a normal close from this side would
# leave the connection in TIME_WAIT on the service's port for a minute, and a service that binds
# without SO_REUSEADDR would then fail to start with "Address already in use".
HOLD_SRC = (
    "import select,socket,struct,sys,time\n"
    "end=time.monotonic()+float(sys.argv[1])\n"
    "ss=[socket.socket(fileno=int(f)) for f in sys.argv[2:]]\n"
    "z=struct.pack('ii',1,0)\n"
    "while ss and time.monotonic()<end:\n"
    " r,_,_=select.select(ss,[],[],0.5)\n"
    " for s in r:\n"
    "  try:\n"
    "   c,_=s.accept();c.setsockopt(socket.SOL_SOCKET,socket.SO_LINGER,z);c.close()\n"
    "  except OSError:\n"
    "   pass\n"
)


def unit_state(name: str) -> str:
    """ActiveState of a systemd unit ('' when systemctl cannot tell)."""
    try:
        out = subprocess.run(["systemctl", "show", "-p", "ActiveState", "--value", f"{name}.service"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def container_state(name: str) -> str:
    """State.Status of a container ('' when there is none or docker cannot tell)."""
    try:
        out = subprocess.run(["docker", "inspect", "--type", "container", "-f", "{{.State.Status}}", name],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


LIVE_UNIT = ("active", "activating", "reloading", "deactivating")


def live_state(lst: dict[str, Any], state=unit_state, ctr_state=container_state) -> str:
    """How the plan's own service of a port runs now: 'up' (its unit is active or activating; its
    container runs), 'restarting' (its container is in docker's restart loop: its ports come and
    go) or '' (not running)."""
    kind = lst.get("kind")
    if kind in ("systemd", "mpirun", "exec"):
        return "up" if state(lst["service"]) in LIVE_UNIT else ""
    if kind == "container":
        return {"running": "up", "restarting": "restarting"}.get(ctr_state(lst["service"]), "")
    return ""


def hold_listeners(own: list[dict[str, Any]], hold_s: float, pidfile: str, state=unit_state,
                   ctr_state=container_state) -> dict[str, Any]:
    """Open a stand-in listener on every own port nothing listens on yet (on the node's cluster
    address); report those already held: by the plan's own service (a later run) or by something else.

    A port of a service that is running or starting but does not hold it yet (a model still loading,
    a unit waiting to be restarted by systemd, a container in docker's restart loop) gets no stand-in:
    the service may bind it any moment.
    It is reported as `starting` and not probed; its readiness and health are checked later."""
    socks, opened, in_use, taken, starting = [], [], [], [], []
    for lst in own:
        live = live_state(lst, state, ctr_state)
        s = socket.socket(socket.AF_INET6 if ":" in lst["address"] else socket.AF_INET, socket.SOCK_STREAM)
        # past connections of the port's service left in TIME_WAIT must not read as "in use" (Linux
        # still refuses the bind while anything listens on the port, with or without this option)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((lst["address"], lst["port"]))
            s.listen(64)
        except OSError as exc:
            s.close()
            who = holder(lst["port"])
            rec = dict(lst, error=exc.strerror or str(exc), holder=who)
            # the plan's own service holds it (a later run); or its service is live and the holder
            # cannot be seen (a container's process between two starts of docker's restart loop)
            own = exc.errno == errno.EADDRINUSE and (owned_by(lst, who) or (live and not (who or {}).get("pid")))
            if not own:
                taken.append(rec)
            elif live == "restarting":  # held now, gone the next moment: not probed (the serve stage replaces it)
                starting.append(lst)
            else:
                in_use.append(rec)
            continue
        if live:
            s.close()
            starting.append(lst)
            continue
        socks.append(s)
        opened.append(lst)
    pid = None
    if socks:
        fds = [s.fileno() for s in socks]
        child = subprocess.Popen([sys.executable, "-c", HOLD_SRC, str(hold_s), *map(str, fds)], pass_fds=fds,
                                 start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, close_fds=True)
        pid = child.pid
        for s in socks:
            s.close()
        with open(pidfile, "w") as fh:
            fh.write(f"{pid}\n")
    return {"opened": opened, "in_use": in_use, "taken": taken, "starting": starting, "pid": pid}


def pidfile_for(host: str, run_dir: str = "/run") -> str:
    """Where one inventory host records its stand-in listener process: a file per host, since several
    inventory hosts can share one filesystem (nodes emulated on one machine: the listen step of a node
    without ports of its own stopped the listeners of the node that recorded them first in a shared
    file, and the probe then found them refused; docs/examples/serve-real-multinode/faults/kill-rank/)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host) or "_"
    return f"{run_dir}/llmb-port-check-{safe}.pid"


def stop_listeners(pidfile: str, wait_s: float = 5.0) -> bool:
    """Stop the stand-in listeners of hold_listeners; True when one was running."""
    try:
        with open(pidfile) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 15)
    except OSError:
        pid = 0
    deadline = time.monotonic() + wait_s
    while pid and time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child (another module run): poll for its end
            done = 0 if os.path.exists(f"/proc/{pid}") else pid
        if done:
            break
        time.sleep(0.05)
    try:
        os.unlink(pidfile)
    except OSError:
        pass
    return bool(pid)


def taken_message(host: str, rec: dict[str, Any]) -> str:
    who = rec.get("holder") or {}
    by = (f"pid {who['pid']} ({who.get('comm') or '?'}, {who.get('unit') or 'no unit'})" if who.get("pid")
          else "a process this check cannot see")
    return (f"{host}: port {rec['port']} ({rec['service']} {rec['purpose']}) on {rec['address']} is taken by "
            f"{by}: {rec['error']}; stop it or choose another port in the inventory")
