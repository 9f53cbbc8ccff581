"""Passwordless SSH between the nodes of a cluster (the access stage, TensorRT-LLM's mpirun).

Controller side (filters in plugins/filter/llmb_sshmesh.py):

    line = authorized_key_line(pubkey, from_addresses, comment)   # from="..",restrict,pty <key>
    text = known_hosts_text(entries)                               # pinned host keys, names and ports
    grid = matrix(rows)                                            # ordered pairs -> ok / error
    print(format_matrix(grid))
    failures(rows)                                                 # one message per failed pair

Node side (modules llmb_ssh_mesh_probe / llmb_ssh_mesh_check, Python 3.11, stdlib only):

    listeners(port)          # processes listening on a TCP port, read from /proc
    check_pairs(targets, ...)  # every target over BatchMode SSH, in parallel, with retries

No Ansible imports.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from .procnet import TCP_LISTEN, read_tables, rows, socket_inodes

KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
# Options of the cluster key's authorized_keys line: nothing but a shell from the cluster's
# addresses (no forwarding of agent, X11 or ports, no ~/.ssh/rc); a pty stays allowed so that an
# operator can debug with the cluster key.
KEY_RESTRICTIONS = "restrict,pty"

# --------------------------------------------------------------------------- keys and files


class MeshError(ValueError):
    """Bad input (a key that does not parse, an address that is not one)."""


def parse_public_key(text: str) -> tuple[str, str, str]:
    """(type, base64 blob, comment) of an OpenSSH public key line, options not allowed."""
    parts = (text or "").strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in KEY_TYPES or not re.fullmatch(r"[A-Za-z0-9+/]+={0,3}", parts[1]):
        raise MeshError(f"not an OpenSSH public key: {text.strip()[:60]!r}")
    return parts[0], parts[1], parts[2].strip() if len(parts) == 3 else ""


def is_address(pattern: str) -> bool:
    """True for an IPv4/IPv6 address or a CIDR network (what sshd's from= can match without DNS)."""
    try:
        ipaddress.ip_network(str(pattern), strict=False)
    except ValueError:
        return False
    return True


def from_patterns(addresses: list[str], extra: list[str] | None = None) -> list[str]:
    """The from= pattern list: every cluster address (and extras), in order, once.

    Raises MeshError naming every entry that is not an address: with UseDNS off (sshd's default)
    a host name in from= never matches, so the cluster key would be unusable.
    """
    out: list[str] = []
    bad = []
    for a in [*(addresses or []), *(extra or [])]:
        a = str(a).strip()
        if not is_address(a):
            bad.append(a)
        elif a not in out:
            out.append(a)
    if bad:
        raise MeshError(f"not IP addresses or CIDR networks: {', '.join(bad)} (sshd matches from= on addresses)")
    if not out:
        raise MeshError("no cluster addresses")
    return out


def authorized_key_line(pubkey: str, addresses: list[str], comment: str = "", extra: list[str] | None = None) -> str:
    """authorized_keys line that only the cluster key, from the cluster's addresses, can use."""
    ktype, blob, own = parse_public_key(pubkey)
    pats = from_patterns(addresses, extra)
    note = comment or own
    return f'from="{",".join(pats)}",{KEY_RESTRICTIONS} {ktype} {blob}' + (f" {note}" if note else "")


def key_blob(pubkey: str) -> str:
    return parse_public_key(pubkey)[1]


def authorized_key_regexp(pubkey: str) -> str:
    """Python regex matching any authorized_keys line of this key (whatever its options/comment)."""
    ktype, blob, _ = parse_public_key(pubkey)
    return rf"^(?:.*\s)?{re.escape(ktype)}\s+{re.escape(blob)}(?:\s.*)?$"


def host_patterns(names: list[str], port: int) -> list[str]:
    """known_hosts host patterns for names on a port ([name]:port off port 22)."""
    seen: list[str] = []
    for n in names:
        n = str(n).strip()
        if not n:
            continue
        p = n if int(port) == 22 else f"[{n}]:{int(port)}"
        if p not in seen:
            seen.append(p)
    return seen


def known_hosts_text(entries: list[dict], header: str = "") -> str:
    """known_hosts lines for [{'names': [...], 'port': 22, 'keys': ['ssh-ed25519 AAAA...', ...]}].

    One line per host key, all of a host's names on it; entries keep their order.
    """
    lines = [f"# {h}" for h in header.splitlines()] if header else []
    for e in entries:
        pats = host_patterns(e.get("names") or [], int(e.get("port") or 22))
        if not pats:
            raise MeshError(f"known_hosts entry without names: {e!r}")
        keys = e.get("keys") or []
        if not keys:
            raise MeshError(f"no host key collected for {pats[0]}")
        for k in keys:
            ktype, blob, _ = parse_public_key(k)
            lines.append(f"{','.join(pats)} {ktype} {blob}")
    return "\n".join(lines) + "\n"


def known_hosts_for_nodes(nodes: list[dict], port: int = 22, container_port: int | None = None,
                          allow_missing: bool = False, header: str = "") -> str:
    """known_hosts text for nodes [{'names', 'host_key', 'sshd_host_key'}]: each node's sshd host
    key under its names on `port`, and (when container_port is set) the container sshd's host key
    under [name]:container_port. allow_missing drops a node whose key is not known yet (check
    mode before the key exists) instead of failing."""
    entries = []
    for n in nodes:
        for p, key_field in ((port, "host_key"), (container_port, "sshd_host_key")):
            if p is None:
                continue
            key = n.get(key_field)
            if not key:
                if allow_missing:
                    continue
                raise MeshError(f"no {key_field.replace('_', ' ')} collected for {(n.get('names') or ['?'])[0]}")
            entries.append({"names": n.get("names") or [], "port": int(p), "keys": [key]})
    return known_hosts_text(entries, header)


def stale_known_hosts(known_hosts: str, nodes: list[dict], port: int = 22) -> list[str]:
    """Nodes the mesh's known_hosts no longer matches: [{'name', 'address', 'host_key'}] -> one line
    per node whose current host key is not pinned for its address on `port` (a node reinstalled or
    replaced since stage 4 wrote the file: ssh with StrictHostKeyChecking would refuse it)."""
    pinned: dict[str, set[tuple[str, str]]] = {}
    for line in (known_hosts or "").splitlines():
        parts = line.strip().split()
        if len(parts) < 3 or parts[0].startswith(("#", "@", "|")):
            continue
        for pat in parts[0].split(","):
            pinned.setdefault(pat, set()).add((parts[1], parts[2]))
    out = []
    for n in nodes or []:
        name, address = str(n.get("name") or "?"), str(n.get("address") or "")
        (pat,) = host_patterns([address], port) or [""]
        try:
            ktype, blob, _ = parse_public_key(str(n.get("host_key") or ""))
        except MeshError:
            out.append(f"{name} ({address}): its host key could not be read")
            continue
        if not pat or pat not in pinned:
            out.append(f"{name} ({address}): not in the mesh's known_hosts")
        elif (ktype, blob) not in pinned[pat]:
            out.append(f"{name} ({address}): its host key changed since the mesh pinned it")
    return out


# --------------------------------------------------------------------------- listeners (node side)

def parse_proc_net_tcp(text: str) -> list[tuple[int, int]]:
    """(local port, socket inode) of every LISTEN socket in /proc/net/tcp or tcp6 text."""
    out = []
    for local, _remote, inode in rows(text, TCP_LISTEN):
        try:
            out.append((int(local.rsplit(":", 1)[1], 16), inode))
        except (IndexError, ValueError):
            continue
    return out


def listeners(port: int, proc: str = "/proc") -> list[dict]:
    """Processes listening on TCP `port`: [{'pid', 'comm', 'cmdline'}] ([] when the port is free).

    A listener whose process cannot be seen (another PID namespace) is reported with pid None.
    """
    inodes = {ino for text in read_tables(os.path.join(proc, "net"))
              for p, ino in parse_proc_net_tcp(text) if p == int(port)}
    if not inodes:
        return []
    found = [_process(proc, int(pid)) for pid in sorted((d for d in os.listdir(proc) if d.isdigit()), key=int)
             if inodes & socket_inodes(proc, int(pid))]
    return found or [{"pid": None, "comm": "?", "cmdline": "?"}]


def _process(proc: str, pid: int) -> dict:
    def read(name: str) -> str:
        try:
            with open(os.path.join(proc, str(pid), name), "rb") as fh:
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    return {"pid": pid, "comm": read("comm").strip(), "cmdline": read("cmdline").replace("\0", " ").strip()}


def port_conflict(found: list[dict], config_path: str) -> list[dict]:
    """Listeners that are not the mesh's own sshd (whose command line names its config file)."""
    return [p for p in found or [] if config_path not in (p.get("cmdline") or "")]


# --------------------------------------------------------------------------- all pairs (node side)

# ssh's errors that a retry can cure: sshd's MaxStartups (10:30:100 by default) drops new
# connections at random while more than 10 are unauthenticated, which an all-pairs check on 11+
# nodes provokes.
TRANSIENT = (
    "kex_exchange_identification",
    "Connection closed by remote host",
    "Connection reset by peer",
    "banner exchange",
)

HINTS = (
    ("Host key verification failed", "the host key differs from the pinned one (node rebuilt?): re-run the "
     "ssh_mesh stage so known_hosts is collected again"),
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "the host key differs from the pinned one (node rebuilt?): re-run "
     "the ssh_mesh stage so known_hosts is collected again"),
    ("No ED25519 host key is known", "no pinned host key for this name/port: re-run the ssh_mesh stage"),
    ("Permission denied", "the cluster key is not accepted: check authorized_keys on the target and that the "
     "source address is in its from= list (ssh_mesh_extra_from for other source addresses)"),
    ("Connection timed out", "packets are dropped on the way: check firewalls (iptables, security groups) "
     "between the two nodes"),
    ("Connection refused", "nothing listens on that port or a firewall rejects it: check sshd and firewalls"),
    ("No route to host", "no route or a firewall rejects it: check the cluster network and firewalls"),
    ("Could not resolve hostname", "the name does not resolve on the source node: use addresses (llmb_node_ip)"),
    ("Name or service not known", "the name does not resolve on the source node: use addresses (llmb_node_ip)"),
    ("timed out after", "ssh did not finish in time: check the network and sshd on the target"),
)


def diagnose(stderr: str) -> str:
    for needle, hint in HINTS:
        if needle in (stderr or ""):
            return hint
    return "run the same ssh by hand on the source node with -v to see why"


def last_error(stderr: str) -> str:
    """The meaningful last line of ssh's stderr (warnings about known hosts left out)."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Warning: Permanently added")]
    return lines[-1] if lines else ""


def ssh_argv(address: str, port: int, user: str, config: str | None, timeout: int, command: str,
             ssh: str = "ssh") -> list[str]:
    argv = [ssh]
    if config:
        argv += ["-F", config]
    argv += [
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"ConnectTimeout={int(timeout)}",
        "-o", "ControlMaster=no",
        "-o", "ControlPath=none",
        "-o", "LogLevel=ERROR",
        "-p", str(int(port)),
    ]
    if user:
        argv += ["-l", user]
    return [*argv, address, command]


PAIR_MODES = ("mpirun", "all")
# Open MPI's routed/radix default fan-out (mca param routed_radix, PRRTE's too): the launcher and
# each daemon start at most this many daemons over ssh when tree spawn is on (the default).
MPI_TREE_RADIX = 64


def mesh_pairs(order: list[str], mode: str = "mpirun", radix: int = MPI_TREE_RADIX) -> dict[str, list[dict]]:
    """The ordered pairs the check must prove: {source: [{'target', 'role'}]}, sources in `order`.

    mode 'mpirun': what `mpirun -H <order>` run on order[0] needs. The launcher (order[0], Open MPI's
    vpid 0) reaches every node (role 'launcher'), and with tree spawn each daemon starts its children
    in Open MPI's radix tree over the daemons in -H order: vpid v's parent is (v - 1) // radix
    (role 'tree'; pairs from the launcher are already there). That is at most 2 (N - 1) pairs,
    against N (N - 1) for mode 'all' (every node to every node, role 'all'), which an inventory asks
    for where engines or tools open their own connections between arbitrary nodes.
    """
    if mode not in PAIR_MODES:
        raise MeshError(f"ssh_mesh_check_pairs: {mode!r} is not one of {', '.join(PAIR_MODES)}")
    if isinstance(radix, bool) or not isinstance(radix, int) or radix < 1:
        raise MeshError(f"ssh_mesh_mpi_tree_radix: {radix!r} is not a positive integer")
    names = list(order)
    if len(set(names)) != len(names):
        raise MeshError(f"the node order names a node twice: {names}")
    out: dict[str, list[dict]] = {n: [] for n in names}
    if mode == "all":
        for src in names:
            out[src] = [{"target": dst, "role": "all"} for dst in names if dst != src]
        return out
    if not names:
        return out
    launcher = names[0]
    out[launcher] = [{"target": dst, "role": "launcher"} for dst in names[1:]]
    for v in range(1, len(names)):
        parent = (v - 1) // radix
        if parent:
            out[names[parent]].append({"target": names[v], "role": "tree"})
    return out


def rotate(targets: list[dict], me: str, order: list[str]) -> list[dict]:
    """Targets ordered from the one after `me` in `order`, wrapping: when every node does this at
    the same time, at each step the nodes connect to different targets (spreads sshd load)."""
    if me not in order:
        return list(targets)
    start = order.index(me)
    rank = {n: (order.index(n) - start) % len(order) if n in order else len(order) for n in order}
    return sorted(targets, key=lambda t: rank.get(t["name"], len(order)))


def check_pairs(targets: list[dict], *, port: int = 22, user: str = "", config: str | None = None,
                timeout: int = 10, parallel: int = 16, attempts: int = 3, command: str = "hostname",
                runner=None) -> list[dict]:
    """SSH to every target ({'name', 'address'}) in parallel; one result per target, in order.

    result: {'target', 'address', 'port', 'ok', 'rc', 'output', 'error', 'hint', 'attempts', 'seconds'}
    `runner(argv, timeout) -> (rc, stdout, stderr)` is injectable for tests.
    """
    run = runner or _run

    def one(t: dict) -> dict:
        argv = ssh_argv(t["address"], port, user, config, timeout, command)
        t0 = time.monotonic()
        rc, out, err = 255, "", ""
        tries = 0
        for tries in range(1, max(1, attempts) + 1):
            rc, out, err = run(argv, 2 * timeout + 10)
            if rc == 0 or not any(s in err for s in TRANSIENT):
                break
            time.sleep(0.2 * tries)
        ok = rc == 0
        error = "" if ok else (last_error(err) or f"ssh exited with {rc}")
        return {
            "target": t["name"],
            "address": t["address"],
            "role": t.get("role", ""),
            "port": int(port),
            "ok": ok,
            "rc": rc,
            "output": out.strip(),
            "error": error,
            "hint": "" if ok else diagnose(err or error),
            "attempts": tries,
            "seconds": round(time.monotonic() - t0, 3),
        }

    if not targets:
        return []
    workers = max(1, min(int(parallel), len(targets)))
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(one, targets))


def _run(argv: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 255, "", f"ssh timed out after {timeout:.0f} s"
    except OSError as err:
        return 255, "", f"cannot run {argv[0]}: {err}"
    return p.returncode, p.stdout, p.stderr


# --------------------------------------------------------------------------- matrix (controller side)


def matrix(rows: dict[str, list[dict]]) -> dict[str, dict[str, dict]]:
    """{source: [pair results]} -> {source: {target: result}} (sources and targets in given order)."""
    return {src: {r["target"]: r for r in results or []} for src, results in rows.items()}


def format_matrix(rows: dict[str, list[dict]], port: int | None = None,
                  expected: dict[str, list] | None = None, mode: str = "all") -> str:
    """The ordered-pair matrix as text: rows are sources, columns targets; ok, FAIL, '-' (self), '?'
    (a pair to check with no result) and '.' (a pair the check does not need: `expected`, the
    output of mesh_pairs, leaves it out)."""
    grid = matrix(rows)
    names = list(grid)
    for src in grid:
        for t in grid[src]:
            if t not in names:
                names.append(t)
    want = None
    if expected is not None:
        want = {src: {p["target"] if isinstance(p, dict) else str(p) for p in targets or []}
                for src, targets in expected.items()}
    w = max([len(n) for n in names] + [6])
    corner = "from \\ to"
    head = f"{corner:<{w}}  " + "  ".join(f"{n:>{w}}" for n in names)
    lines = [head]
    missing = 0
    for src in grid:
        cells = []
        for dst in names:
            if dst == src:
                cells.append(f"{'-':>{w}}")
            elif dst in grid[src]:
                cells.append(f"{'ok' if grid[src][dst]['ok'] else 'FAIL':>{w}}")
            elif want is not None and dst not in want.get(src, ()):
                cells.append(f"{'.':>{w}}")
            else:
                missing += 1
                cells.append(f"{'?':>{w}}")
        lines.append(f"{src:<{w}}  " + "  ".join(cells))
    total = sum(len(v) for v in grid.values())
    bad = sum(1 for v in grid.values() for r in v.values() if not r["ok"])
    where = "" if port is None else f", port {port}"
    if mode == "mpirun":
        title = (f"SSH pairs mpirun needs (launcher to every node, Open MPI tree spawn; BatchMode{where}): "
                 f"{total - bad}/{total + missing} ok ('.' not needed)")
    else:
        title = f"SSH all-pairs (BatchMode{where}): {total - bad}/{total + missing} ordered pairs ok"
    return "\n".join([title, *lines])


def failures(source: str, results: list[dict]) -> list[str]:
    """One message per failed pair of `source`, naming both ends, what ssh said and what to do."""
    out = []
    for r in results or []:
        if r["ok"]:
            continue
        why = {"launcher": " [mpirun launcher to node]", "tree": " [Open MPI tree spawn]"}.get(r.get("role", ""), "")
        out.append(
            f"{source} -> {r['target']} ({r['address']}:{r['port']}){why}: SSH with BatchMode failed: "
            f"{r['error']} (after {r['attempts']} attempt(s)); fix: {r['hint']}"
        )
    return out


_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*")


def mpirun_hosts(targets: list[dict], slots, launcher_hostname: str) -> str:
    """mpirun's -H list for a launch from the first target: `name:slots,...` in the targets' order.

    The first node (where mpirun runs) is named by its own host name (`hostname` there), every other
    node by its cluster address. Open MPI 5 (PRRTE) counts no slot for the launching node when -H
    names it by one of its IP addresses ("not enough slots", openpmix/prrte#2258; Open MPI 4 matched
    it); its own host name always matches. `slots`: one count for every node, or one per node.
    Raises MeshError naming what is wrong.
    """
    nodes = list(targets or [])
    if not nodes:
        raise MeshError("mpirun host list: no nodes")
    counts = [slots] * len(nodes) if isinstance(slots, (int, str)) else list(slots)
    if len(counts) != len(nodes):
        raise MeshError(f"mpirun host list: {len(counts)} slot counts for {len(nodes)} nodes")
    name = str(launcher_hostname or "").strip()
    if not _HOSTNAME.fullmatch(name) or len(name) > 253:
        raise MeshError(f"mpirun host list: the launcher {nodes[0].get('name')}'s host name is {name!r}, "
                        "expected an RFC 1123 host name (what `hostname` prints there)")
    out = []
    for i, node in enumerate(nodes):  # (no zip(strict=): this module also runs on nodes' Python 3.8+)
        count = counts[i]
        try:
            n = int(count)
        except (TypeError, ValueError):
            n = 0
        if isinstance(count, bool) or n < 1 or str(n) != str(count).strip():
            raise MeshError(f"mpirun host list: {node.get('name')}: slots {count!r}, expected a whole number >= 1")
        host = name if i == 0 else str(node.get("address") or "")
        if i and not is_address(host) and not _HOSTNAME.fullmatch(host):
            raise MeshError(f"mpirun host list: {node.get('name')}: address {host!r}, expected an IP address "
                            "or a host name")
        out.append(f"{host}:{n}")
    return ",".join(out)


def mpirun_hostnames(stdout: str) -> list[str]:
    """Host names printed by `mpirun ... hostname`, sorted (Open MPI's warnings left out)."""
    return sorted(ln.strip() for ln in (stdout or "").splitlines()
                  if ln.strip() and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", ln.strip()))
