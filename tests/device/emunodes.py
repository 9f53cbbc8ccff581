#!/usr/bin/env python3
"""N emulated nodes on one multi-GPU host (test code; docs/real-hardware.md, issue 23).

Every node is a network namespace with its own cluster address, a slice of the host's GPUs and its
own NCCL host identity, so that the engines see N nodes joined by a network (NCCL then runs
NET/Socket between them: ../shared/TESTING.md "Several nodes on one lent multi-GPU machine"):

    switch namespace  llmb-sw: bridge llmbbr0
    node i            namespace llmb-node<i>, veth end llmb0 = 10.99.0.<i>/24, port of the bridge
    the host          veth end llmbhost = 10.99.0.254/24 on the bridge (the controller, the
                      readiness / health probes from outside and `vllm bench serve` reach the nodes)

The bridge lives in its own namespace so that the host's firewall (a FORWARD policy of DROP, as
Docker sets) never sees the nodes' traffic. The veth end inside every node has the same name, so one
`llmb_cluster_iface` serves all nodes, as on a cluster of identical machines.

Ansible runs each node's tasks inside its namespace: the inventory's `ansible_python_interpreter` of
a node is a small wrapper (written by `inventory`) that enters the namespace with `nsenter --net=`
and adds the node's identity (CUDA_VISIBLE_DEVICES, NCCL_HOSTID: what a real node has by being one),
its runner state directory and the systemctl / journalctl stand-ins (tests/device/bin). The serve
stage's plan (argv and env) is not touched.

    emunodes.py up        --nodes N                    namespaces, veths, bridge, addresses (pyroute2)
    emunodes.py down      --nodes N                    remove them (idempotent)
    emunodes.py inventory --nodes N --gpus-per-node G --shape a|b|c --out DIR --state DIR --python PY
                          [--only node3,node4]         those nodes alone: a group of their own
    emunodes.py show      --nodes N --gpus-per-node G  every namespace, address, GPU slice, identity env
    emunodes.py exec      --node NAME [--as-node] -- ARGV...
                                                       run ARGV inside a node's namespace; --as-node
                                                       also as the node: its own host name (a UTS
                                                       namespace of its own) and identity env
    emunodes.py rsh       [SSH-OPTIONS] HOST COMMAND...
                                                       mpirun's launch agent in place of ssh: enters
                                                       HOST (node<i> or its address) as --as-node
                                                       does and runs COMMAND with /bin/sh -c, as sshd
                                                       runs a remote command (tests/device/node-rsh)

Exit status: 0 ok, 1 a step failed, 2 bad usage (the message names the option).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_DATA = HERE.parent.parent / "data"
SUBNET = "10.99.0"
PREFIXLEN = 24
NODE_IFACE = "llmb0"  # the veth end inside every node's namespace (llmb_cluster_iface)
SWITCH_NS = "llmb-sw"
BRIDGE = "llmbbr0"
HOST_IFACE = "llmbhost"
HOST_ADDR = f"{SUBNET}.254"
NS_PREFIX = "llmb-node"
NETNS_DIR = "/var/run/netns"
MAX_NODES = 32
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")

# the launch shapes of issue 23 (2 nodes x 2 GPUs on the 4-GPU machine; any N x G that divides)
SHAPES: dict[str, dict] = {
    "a": {"what": "TP across all GPUs of all nodes, vLLM's own multi-node launch",
          "vars": lambda n, g: {"llmb_tensor_parallel": n * g, "llmb_vllm_multinode": "native"}},
    "b": {"what": "TP across all GPUs of all nodes over Ray (head on node 1)",
          "vars": lambda n, g: {"llmb_tensor_parallel": n * g, "llmb_vllm_multinode": "ray"},
          # an artifact of emulating nodes on ONE host, not a planner bug: vLLM 0.26.0's custom
          # all-reduce asks for P2P by mapping the TP rank to a local device, and on node 2 the Ray
          # worker has CUDA_VISIBLE_DEVICES=2,3, so rank 2 is out of range ("IndexError: device_id 2 is
          # out of range for assigned_physical_gpu_ids [2, 3]", docs/examples/serve-real-multinode/
          # nodes-b-first/). Real nodes number their own GPUs from 0. Added to the common engine args.
          "engine_args": {"disable-custom-all-reduce": True}},
    # each node its own instance (TP over its own GPUs): the cache timings run several side by side
    "one": {"what": "the node alone: TP over its own GPUs (cold / warm / peer-cache start timings)",
            "vars": lambda n, g: {"llmb_tensor_parallel": g}},
    "c": {"what": "DP over all GPUs with expert parallelism: rank 0 + --headless --data-parallel-start-rank",
          "vars": lambda n, g: {"llmb_tensor_parallel": 1, "llmb_data_parallel": n * g,
                                "llmb_data_parallel_local": g, "llmb_expert_parallel": True}},
}


class UsageError(Exception):
    """A bad option value; the message names it."""


@dataclass(frozen=True)
class EmuNode:
    name: str  # the inventory host name (what failures name)
    netns: str
    address: str
    gpus: tuple[int, ...]
    hostid: str  # NCCL_HOSTID: NCCL groups ranks by host identity

    @property
    def netns_path(self) -> str:
        return f"{NETNS_DIR}/{self.netns}"

    @property
    def switch_port(self) -> str:
        return f"llmbsw{self.name.removeprefix('node')}"[:15]


def layout(nodes: int, gpus_per_node: int, total_gpus: int | None = None) -> list[EmuNode]:
    """node1..nodeN, 10.99.0.1.., GPUs [0..G-1], [G..2G-1], ... (checked against total_gpus)."""
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes: expected 1..{MAX_NODES}, found {nodes!r}")
    if not isinstance(gpus_per_node, int) or isinstance(gpus_per_node, bool) or gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node: expected a positive integer, found {gpus_per_node!r}")
    if total_gpus is not None and nodes * gpus_per_node > total_gpus:
        raise UsageError(f"--nodes {nodes} x --gpus-per-node {gpus_per_node} = {nodes * gpus_per_node} GPUs; "
                         f"this machine has {total_gpus}")
    return [EmuNode(name=f"node{i}", netns=f"{NS_PREFIX}{i}", address=f"{SUBNET}.{i}",
                    gpus=tuple(range((i - 1) * gpus_per_node, i * gpus_per_node)), hostid=f"node{i}")
            for i in range(1, nodes + 1)]


def identity_env(node: EmuNode) -> dict[str, str]:
    """What a real node has by being one machine: its own GPUs and host identity (not in the plan)."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in node.gpus), "NCCL_HOSTID": node.hostid}


# ssh options that take a value (what mpirun's ssh launcher may pass through plm_ssh_args)
SSH_OPTS_WITH_VALUE = frozenset("-B -b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w".split())


def node_of(host: str, nodes: list[EmuNode]) -> EmuNode:
    """The node a launch agent names: its inventory name (node<i>) or its cluster address."""
    for node in nodes:
        if host in (node.name, node.address):
            return node
    raise UsageError(f"rsh: host {host!r} is no emulated node ({', '.join(n.name + '/' + n.address for n in nodes)})")


def only(names: str, nodes: list[EmuNode]) -> list[EmuNode]:
    """The nodes --only names (comma-separated, in the order given: the first is the group's node rank 0)."""
    picked = [node_of(n, nodes) for n in names.split(",") if n]
    if not picked or len({n.name for n in picked}) != len(picked):
        raise UsageError(f"--only: expected distinct node names of this layout, found {names!r}")
    return picked


def rsh_split(argv: list[str]) -> tuple[str, str]:
    """(host, remote command) from an ssh-style argv: options, the host, the command's words."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in SSH_OPTS_WITH_VALUE else 1
    if i >= len(argv):
        raise UsageError("rsh: no host")
    if i + 1 >= len(argv):
        raise UsageError(f"rsh: no command for {argv[i]}")
    return argv[i], " ".join(argv[i + 1:])


def enter_node(node: EmuNode) -> dict[str, str]:
    """Join the node's network namespace, take a UTS namespace of its own named after the node (what
    a real node has: its own host name, which Open MPI and nccl-tests tell nodes apart by); returns
    the environment with the node's identity. Python 3.12+ (os.setns / os.unshare), as root."""
    import socket

    fd = os.open(node.netns_path, os.O_RDONLY)
    try:
        os.setns(fd, os.CLONE_NEWNET)
    finally:
        os.close(fd)
    os.unshare(os.CLONE_NEWUTS)
    socket.sethostname(node.name)
    return {**os.environ, **identity_env(node)}


CACHE_ROOT = os.environ.get("LLMB_DEVICE_NODE_CACHE", "/root/llmb-nodecache")
# the plan's compile and kernel cache root (llmb_compile_cache_dir's default; test_emunodes checks it
# against the knob): each node sees its own disk there, ROOT/<node> bound over it in a mount namespace
PLAN_CACHE_ROOT = "/var/cache/llmb/compile"


def node_binds(node: EmuNode, root: str = CACHE_ROOT) -> list[list[str]]:
    """What a node has by being one machine with its own disk: the plan's cache root is the node's own
    (ROOT/<node>); the plan's environment is used unchanged (no cache variable of the emulation's)."""
    return [[f"{root}/{node.name}", PLAN_CACHE_ROOT]]


def node_env(node: EmuNode, state_root: Path, bin_dir: Path = HERE / "bin") -> dict[str, str]:
    """The environment the node's interpreter wrapper adds: identity, runner state, stand-ins first."""
    # RAY_TMPDIR: every real node has its own /tmp, where Ray keeps its session and unix sockets (a
    # short path: a unix socket path is at most 107 bytes)
    return {**identity_env(node), "RAY_TMPDIR": f"/tmp/llmb-ray-{node.name}",
            "LLMB_RUNNER_STATE": str(state_root / node.name),
            "LLMB_DEVICE_NODE": node.name, "PYTHONUNBUFFERED": "1", "PATH_PREPEND": str(bin_dir)}


WRAPPER = '''#!/usr/bin/env python3
# node {name}: Ansible's interpreter for this emulated node (tests/device/emunodes.py, generated):
# enters the node's network namespace and adds its identity, then runs the real interpreter.
import json, os, sys
SPEC = json.loads({spec!r})
env = dict(os.environ)
env.update(SPEC["env"])
env["PATH"] = SPEC["path_prepend"] + os.pathsep + env.get("PATH", "")
if SPEC["binds"] and os.environ.get("LLMB_EMU_MOUNTS") != SPEC["name"]:
    # the node's own disk where the plan keeps caches: a mount namespace of its own (private), the node's
    # folder bound over the plan's path; the engines the runner starts from here inherit it
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        os.unshare(os.CLONE_NEWNS)
        if libc.mount(b"none", b"/", None, 16384 | 262144, None) != 0:  # MS_REC | MS_PRIVATE
            raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
        for src, dst in SPEC["binds"]:
            os.makedirs(src, exist_ok=True)
            os.makedirs(dst, exist_ok=True)
            if libc.mount(src.encode(), dst.encode(), None, 4096, None) != 0:  # MS_BIND
                raise OSError(ctypes.get_errno(), "mount --bind " + src + " " + dst)
        env["LLMB_EMU_MOUNTS"] = SPEC["name"]
    except (OSError, AttributeError) as e:  # AttributeError: os.unshare needs Python 3.12
        sys.stderr.write("emulated node " + SPEC["name"] + ": own cache folder not bound (" + str(e) + ")\\n")
os.execvpe("nsenter", ["nsenter", "--net=" + SPEC["netns_path"], SPEC["python"], *sys.argv[1:]], env)
'''


def wrapper_text(node: EmuNode, python: str, state_root: Path, bin_dir: Path = HERE / "bin") -> str:
    env = node_env(node, state_root, bin_dir)
    path_prepend = env.pop("PATH_PREPEND") + os.pathsep + str(Path(python).parent)
    spec = json.dumps({"name": node.name, "netns_path": node.netns_path, "python": python, "env": env,
                       "path_prepend": path_prepend, "binds": node_binds(node)}, sort_keys=True)
    return WRAPPER.format(name=node.name, spec=spec)


def inventory(nodes: list[EmuNode], shape: str, python: str, state_root: Path, base_vars: dict | None = None,
              common_engine_args: dict | None = None) -> tuple[dict, dict, dict[str, str]]:
    """(hosts.yml, group_vars/all/shape.yml, {host: wrapper text}) for the emulated nodes.
    common_engine_args: llmb_engine_args of the common group_vars, which a shape's own engine args
    extend (shape.yml is read after them and would replace the whole mapping)."""
    if shape not in SHAPES:
        raise UsageError(f"--shape: expected one of {', '.join(SHAPES)}, found {shape!r}")
    gpn = len(nodes[0].gpus)
    hosts = {}
    wrappers = {}
    for node in nodes:
        hosts[node.name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(state_root / "interp" / node.name),
            "ansible_host": node.address,
            "llmb_node_ip": node.address,
        }
        wrappers[node.name] = wrapper_text(node, python, state_root)
    shape_vars = {**(base_vars or {}), **SHAPES[shape]["vars"](len(nodes), gpn),
                  "llmb_cluster_iface": NODE_IFACE,
                  "llmb_run_id": f"device-nodes-{shape}"}
    if SHAPES[shape].get("engine_args"):
        shape_vars["llmb_engine_args"] = {**(common_engine_args or {}), **SHAPES[shape]["engine_args"]}
    return {"all": {"children": {"accel_nodes": {"hosts": hosts}}}}, shape_vars, wrappers


def write_inventory(out: Path, nodes: list[EmuNode], shape: str, python: str, state_root: Path,
                    common_vars_dir: Path = HERE / "inventory-nodes" / "group_vars" / "all",
                    platform: str | None = None) -> Path:
    """OUT/{hosts.yml, group_vars/all/*.yml}, STATE/interp/<node> (mode 0755). platform: llmb_platform in
    shape.yml (read after the common vars), for nodes with another GPU count than the common vars' platform."""
    import yaml

    common: dict = {}
    for f in sorted(common_vars_dir.glob("*.yml")):
        common.update(yaml.safe_load(f.read_text()) or {})
    hosts, shape_vars, wrappers = inventory(nodes, shape, python, state_root,
                                            common_engine_args=common.get("llmb_engine_args"))
    if platform:
        shape_vars["llmb_platform"] = platform
    (out / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    for f in sorted(common_vars_dir.glob("*.yml")):
        shutil.copyfile(f, out / "group_vars" / "all" / f.name)
    head = f"---\n# generated by tests/device/emunodes.py: shape {shape} ({SHAPES[shape]['what']})\n"
    (out / "hosts.yml").write_text(head + yaml.safe_dump(hosts, sort_keys=False))
    (out / "group_vars" / "all" / "shape.yml").write_text(head + yaml.safe_dump(shape_vars, sort_keys=False))
    interp = state_root / "interp"
    interp.mkdir(parents=True, exist_ok=True)
    for name, text in wrappers.items():
        p = interp / name
        p.write_text(text)
        p.chmod(0o755)
        (state_root / name).mkdir(parents=True, exist_ok=True)
    return out


# ---------------------------------------------------------------------------- namespaces (pyroute2)
def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} emunodes: {msg}", flush=True)


def _netns_names() -> set[str]:
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()


def _index(ipr, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise RuntimeError(f"interface {ifname} not found")
    return found[0]


def down(nodes: list[EmuNode]) -> None:
    """Remove every node namespace, the switch namespace and the host's veth end (idempotent)."""
    from pyroute2 import IPRoute, netns

    have = _netns_names()
    for ns in [n.netns for n in nodes] + [SWITCH_NS]:
        if ns in have:
            netns.remove(ns)
            _log(f"removed namespace {ns}")
    with IPRoute() as ipr:
        for idx in ipr.link_lookup(ifname=HOST_IFACE):
            ipr.link("del", index=idx)


def up(nodes: list[EmuNode]) -> None:
    """The switch namespace with its bridge, one namespace per node joined to it, the host on it."""
    from pyroute2 import IPRoute, NetNS, netns

    down(nodes)
    netns.create(SWITCH_NS)
    with NetNS(SWITCH_NS) as sw:
        sw.link("add", ifname=BRIDGE, kind="bridge")
        sw.link("set", index=_index(sw, BRIDGE), state="up")
        sw.link("set", index=_index(sw, "lo"), state="up")
    with IPRoute() as ipr:
        # the host's end: llmbhost (here) <-> port (switch)
        ipr.link("add", ifname=HOST_IFACE, kind="veth", peer="llmbswh")
        ipr.link("set", index=_index(ipr, "llmbswh"), net_ns_fd=SWITCH_NS)
        host = _index(ipr, HOST_IFACE)
        ipr.addr("add", index=host, address=HOST_ADDR, prefixlen=PREFIXLEN)
        ipr.link("set", index=host, state="up")
        for node in nodes:
            netns.create(node.netns)
            tmp = f"llmbv{node.name.removeprefix('node')}"[:15]
            ipr.link("add", ifname=tmp, kind="veth", peer=node.switch_port)
            ipr.link("set", index=_index(ipr, node.switch_port), net_ns_fd=SWITCH_NS)
            ipr.link("set", index=_index(ipr, tmp), net_ns_fd=node.netns)
            with NetNS(node.netns) as ns:
                idx = _index(ns, tmp)
                ns.link("set", index=idx, ifname=NODE_IFACE)
                ns.addr("add", index=idx, address=node.address, prefixlen=PREFIXLEN)
                ns.link("set", index=idx, state="up")
                ns.link("set", index=_index(ns, "lo"), state="up")
            _log(f"{node.name}: namespace {node.netns}, {NODE_IFACE} {node.address}/{PREFIXLEN}, "
                 f"GPUs {','.join(map(str, node.gpus))}, NCCL_HOSTID {node.hostid}")
    with NetNS(SWITCH_NS) as sw:
        br = _index(sw, BRIDGE)
        for port in ["llmbswh"] + [n.switch_port for n in nodes]:
            idx = _index(sw, port)
            sw.link("set", index=idx, master=br)
            sw.link("set", index=idx, state="up")
    _log(f"switch {SWITCH_NS}/{BRIDGE}; the host is {HOST_ADDR} on {HOST_IFACE}")


def show(nodes: list[EmuNode], state_root: Path | None = None) -> dict:
    return {"switch": {"netns": SWITCH_NS, "bridge": BRIDGE, "host_iface": HOST_IFACE, "host_address": HOST_ADDR},
            "nodes": [{"name": n.name, "netns": n.netns, "netns_path": n.netns_path, "iface": NODE_IFACE,
                       "address": n.address, "gpus": list(n.gpus), "identity_env": identity_env(n),
                       **({"wrapper_env": node_env(n, state_root)} if state_root else {})} for n in nodes]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "inventory", "show"):
        p = sub.add_parser(name)
        p.add_argument("--nodes", type=int, default=2)
        p.add_argument("--gpus-per-node", type=int, default=2)
        p.add_argument("--total-gpus", type=int, help="refuse a layout that needs more GPUs than this")
        if name == "inventory":
            p.add_argument("--shape", required=True)
            p.add_argument("--out", type=Path, required=True)
            p.add_argument("--state", type=Path, required=True)
            p.add_argument("--python", required=True, help="the interpreter Ansible runs modules with")
            p.add_argument("--only", help="these nodes alone (node<i>[,node<j>...]): an inventory of them, one serving "
                                          "group of its own (several groups side by side on one machine)")
            p.add_argument("--platform", help="llmb_platform for these nodes (data/platforms/<name>.yml) in place of "
                           "the common vars' (h200-x2: two GPUs a node); e.g. h100-x1 for nodes of one GPU")
        if name == "show":
            p.add_argument("--state", type=Path)
    ex = sub.add_parser("exec")
    ex.add_argument("--node", required=True)
    ex.add_argument("--as-node", action="store_true", help="the node's own host name and identity env too")
    ex.add_argument("--nodes", type=int, default=int(os.environ.get("LLMB_DEVICE_NODES", "2")))
    ex.add_argument("--gpus-per-node", type=int, default=int(os.environ.get("LLMB_DEVICE_GPUS_PER_NODE", "2")))
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    rs = sub.add_parser("rsh", prefix_chars="+")  # every "-..." after it is ssh's, not ours
    rs.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "rsh":
            nodes = layout(int(os.environ.get("LLMB_DEVICE_NODES", "2")),
                           int(os.environ.get("LLMB_DEVICE_GPUS_PER_NODE", "2")))
            host, command = rsh_split(a.argv)
            node = node_of(host, nodes)
            env = enter_node(node)
            os.execve("/bin/sh", ["sh", "-c", command], env)
        if a.cmd == "exec":
            if not NAME_RE.match(a.node) or not a.node.startswith("node"):
                raise UsageError(f"--node: expected node<N>, found {a.node!r}")
            args = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
            if not args:
                raise UsageError("exec: no command after --")
            if a.as_node:
                env = enter_node(node_of(a.node, layout(a.nodes, a.gpus_per_node)))
                os.execvpe(args[0], args, env)
            ns = f"{NETNS_DIR}/{NS_PREFIX}{a.node.removeprefix('node')}"
            os.execvp("nsenter", ["nsenter", f"--net={ns}", *args])
        nodes = layout(a.nodes, a.gpus_per_node, a.total_gpus)
        if a.cmd == "up":
            up(nodes)
        elif a.cmd == "down":
            down(nodes)
        elif a.cmd == "show":
            print(json.dumps(show(nodes, a.state), indent=1))
        else:
            if a.only:
                nodes = only(a.only, nodes)
            if a.platform is not None and (not NAME_RE.match(a.platform)
                                           or not (REPO_DATA / "platforms" / f"{a.platform}.yml").is_file()):
                raise UsageError(f"--platform: expected a profile of data/platforms, found {a.platform!r}")
            out = write_inventory(a.out, nodes, a.shape, a.python, a.state, platform=a.platform)
            print(out)
        return 0
    except UsageError as err:
        print(f"emunodes: {err}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as err:
        print(f"emunodes: {a.cmd} failed: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
