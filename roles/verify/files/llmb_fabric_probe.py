#!/usr/bin/env python3
"""Cross-node fabric probe (verify stage, tag `fabric`; runs ON a node, python3 >= 3.9, stdlib only).

    llmb_fabric_probe.py ibbw --devices mlx5_0,mlx5_1 --serve-only [--port-base 18515] ...
    llmb_fabric_probe.py ibbw --devices mlx5_0,mlx5_1 [--peer ADDR] [--port-base 18515] [--seconds 2]
                              [--gid-index N] [--timeout 60] [--connect-wait 15]
        perftest ib_write_bw on every rail: a server per local device (port-base + rail index) and,
        with --peer, a client per device to the same rail of the peer (its server). Prints one JSON
        object: {"host", "servers": [...], "clients": [...]} with each side's raw output. With
        --serve-only the servers are started detached and the call returns; the next call (clients)
        collects their outputs, so every node's servers listen before any client starts.
    llmb_fabric_probe.py allreduce --hosts A:8,B:8 [--ssh-config FILE] [--ssh-port N] [--env K=V ...]
                              [--launcher mpirun] [--test all_reduce_perf] [--timeout 300]
        the vendor's all-reduce test (nccl-tests / rccl-tests all_reduce_perf, one rank per device)
        across all nodes through mpirun over the SSH mesh, NCCL_DEBUG=INFO; prints {"rc", "output"}.

    llmb_fabric_probe.py hccn-ping --pairs 0=192.168.100.2,1=192.168.101.2 [--timeout 60] [--workers 16]
        Ascend: `hccn_tool -i N -ping -g address A` for every local NPU N and peer NPU address A (in
        parallel); prints {"host", "pings": [{"device", "address", "rc", "output"}]}.

Exit status 0 when it ran (the controller judges the outputs), 2 for bad arguments, 3 when a tool
is missing. Every value goes into an argv list; nothing is passed through a shell.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/bin", "/usr/bin", "/usr/local/nvidia/bin",
                        "/opt/rocm/bin", "/usr/local/openmpi/bin", "/usr/local/Ascend/driver/tools"])
IPV4 = re.compile(r"^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$")


def which(tool: str) -> str | None:
    return shutil.which(tool, path=PATH)


def run(argv: list[str], timeout: float) -> dict:
    started = time.monotonic()
    try:
        cp = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False,
                            env=dict(os.environ, LC_ALL="C", PATH=PATH))
        rc, out = cp.returncode, cp.stdout.decode("utf-8", "replace") + cp.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as exc:
        rc = 124
        out = ((exc.stdout or b"") + (exc.stderr or b"")).decode("utf-8", "replace") + f"\ntimed out after {timeout:g} s\n"
    except OSError as exc:
        rc, out = 126, f"{argv[0]}: {exc}\n"
    return {"cmd": argv, "rc": rc, "output": out[-60000:], "seconds": round(time.monotonic() - started, 2)}


def ibbw(args) -> int:
    tool = which("ib_write_bw")
    if not tool:
        print(json.dumps({"host": socket.gethostname(), "missing": "ib_write_bw (perftest) is not installed"}))
        return 3
    devices = [d for d in args.devices.split(",") if d]
    common = ["--report_gbits", "-D", str(args.seconds), "-F"]
    if args.gid_index is not None:
        common += ["-x", str(args.gid_index)]
    state = args.state_dir or f"/tmp/llmb-fabric-{args.port_base}"
    if args.serve_only:
        # Servers detached from this call (their own session): a second call runs the clients once every
        # node's servers listen (Ansible's linear strategy is the barrier), then collects these.
        shutil.rmtree(state, ignore_errors=True)
        os.makedirs(state, mode=0o700)
        started = []
        for i, dev in enumerate(devices):
            argv = [tool, "-d", dev, "-p", str(args.port_base + i)] + common
            out = os.path.join(state, f"server-{i}.json")
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve-one", "--out", out,
                                     "--timeout", str(args.timeout), "--"] + argv,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            started.append({"device": dev, "cmd": argv, "pid": proc.pid, "out": out})
        with open(os.path.join(state, "servers.json"), "w") as fh:
            json.dump(started, fh)
        time.sleep(0.5)  # let them bind
        print(json.dumps({"host": socket.gethostname(), "serving": [s["device"] for s in started]}))
        return 0
    servers = []
    try:
        with open(os.path.join(state, "servers.json")) as fh:
            detached = json.load(fh)
    except (OSError, ValueError):
        detached = None
    if detached is None:
        for i, dev in enumerate(devices):
            argv = [tool, "-d", dev, "-p", str(args.port_base + i)] + common
            servers.append((dev, argv, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                        stdin=subprocess.DEVNULL, env=dict(os.environ, LC_ALL="C"))))

    def client(item):
        i, dev = item
        argv = [tool, "-d", dev, "-p", str(args.port_base + i)] + common + [args.peer]
        wait_until = time.monotonic() + args.connect_wait
        while True:  # the peer's server may start a moment after this node's client (no longer: its rail is down)
            res = run(argv, args.timeout)
            res["device"] = dev
            res["peer"] = args.peer
            if res["rc"] == 0 or "Couldn't connect" not in res["output"] or time.monotonic() > wait_until:
                return res
            time.sleep(0.5)

    clients = []
    if args.peer:
        with ThreadPoolExecutor(max_workers=max(1, len(devices))) as pool:
            clients = list(pool.map(client, enumerate(devices)))
    out_servers = []
    # A server waits for its client; one whose client cannot come (that rail is down on the peer) is
    # stopped once the clients are done and a grace period has passed.
    grace = time.monotonic() + args.connect_wait + 2 * args.seconds + 5
    for dev, argv, proc in servers:
        try:
            out, _ = proc.communicate(timeout=max(1.0, min(args.timeout, grace - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            out += b"\ntimed out waiting for a client\n"
        out_servers.append({"device": dev, "cmd": argv, "rc": proc.returncode,
                            "output": out.decode("utf-8", "replace")[-20000:]})
    for srv in detached or []:
        while not os.path.exists(srv["out"]) and time.monotonic() < grace:
            time.sleep(0.2)
        try:
            with open(srv["out"]) as fh:
                got = json.load(fh)
        except (OSError, ValueError):
            try:
                os.killpg(srv["pid"], 9)
            except OSError:
                pass
            got = {"rc": 124, "output": "timed out waiting for a client\n"}
        out_servers.append({"device": srv["device"], "cmd": srv["cmd"], "rc": got["rc"], "output": got["output"]})
    if detached is not None:
        shutil.rmtree(state, ignore_errors=True)
    print(json.dumps({"host": socket.gethostname(), "servers": out_servers, "clients": clients}))
    return 0


def serve_one(args) -> int:
    """One detached ib_write_bw server: its output and exit status, written atomically to --out."""
    res = run(args.argv, args.timeout)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"rc": res["rc"], "output": res["output"][-20000:]}, fh)
    os.replace(tmp, args.out)
    return 0


def allreduce(args) -> int:
    launcher, test = which(args.launcher), which(args.test)
    if not launcher or not test:
        print(json.dumps({"host": socket.gethostname(),
                          "missing": f"{args.launcher if not launcher else args.test} is not installed"}))
        return 3
    hosts = args.hosts.split(",")
    ranks = sum(int(h.rsplit(":", 1)[1]) for h in hosts)
    argv = [launcher, "--allow-run-as-root", "-np", str(ranks), "-H", args.hosts, "--bind-to", "none"]
    if args.ssh_config:
        rsh = f"-F {args.ssh_config}" + (f" -p {args.ssh_port}" if args.ssh_port else "")
        argv += ["-mca", "plm_rsh_args", rsh]
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    for item in args.env or []:
        key, _, value = item.partition("=")
        env[key] = value
    for key, value in env.items():
        os.environ[key] = value
        argv += ["-x", key]
    argv += [test, "-b", args.min_bytes, "-e", args.max_bytes, "-f", "2", "-g", "1"]
    res = run(argv, args.timeout)
    res["host"] = socket.gethostname()
    print(json.dumps(res))
    return 0


def hccn_ping(args) -> int:
    tool = which("hccn_tool")
    if not tool:
        print(json.dumps({"host": socket.gethostname(), "missing": "hccn_tool is not installed "
                                                                   "(/usr/local/Ascend/driver/tools)"}))
        return 3
    pairs = [(int(d), a) for d, _, a in (p.partition("=") for p in args.pairs.split(",") if p)]

    def one(pair):
        dev, addr = pair
        res = run([tool, "-i", str(dev), "-ping", "-g", "address", addr], args.timeout)
        return {"device": dev, "address": addr, "rc": res["rc"], "output": res["output"][-4000:]}

    with ThreadPoolExecutor(max_workers=max(1, min(args.workers, len(pairs) or 1))) as pool:
        pings = list(pool.map(one, pairs))
    print(json.dumps({"host": socket.gethostname(), "pings": pings}))
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="llmb_fabric_probe.py")
    sub = ap.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("ibbw")
    b.add_argument("--devices", required=True)
    b.add_argument("--peer")
    b.add_argument("--port-base", type=int, default=18515)
    b.add_argument("--seconds", type=int, default=2)
    b.add_argument("--gid-index", type=int)
    b.add_argument("--timeout", type=float, default=60)
    b.add_argument("--connect-wait", type=float, default=15)
    b.add_argument("--serve-only", action="store_true")
    b.add_argument("--state-dir")
    o = sub.add_parser("serve-one")
    o.add_argument("--out", required=True)
    o.add_argument("--timeout", type=float, default=60)
    o.add_argument("argv", nargs=argparse.REMAINDER)
    h = sub.add_parser("hccn-ping")
    h.add_argument("--pairs", required=True)
    h.add_argument("--timeout", type=float, default=60)
    h.add_argument("--workers", type=int, default=16)
    a = sub.add_parser("allreduce")
    a.add_argument("--hosts", required=True)
    a.add_argument("--ssh-config")
    a.add_argument("--ssh-port", type=int)
    a.add_argument("--env", action="append")
    a.add_argument("--launcher", default="mpirun")
    a.add_argument("--test", default="all_reduce_perf")
    a.add_argument("--min-bytes", default="1M")
    a.add_argument("--max-bytes", default="1G")
    a.add_argument("--timeout", type=float, default=300)
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    bad = []
    if args.mode == "serve-one":
        args.argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        return serve_one(args)
    if args.mode == "hccn-ping":
        for p in args.pairs.split(","):
            d, sep, a = p.partition("=")
            if p and (not sep or not re.fullmatch(r"\d{1,3}", d) or not IPV4.match(a)):
                bad.append(f"--pairs: {p!r} (expected DEVICE=IPv4)")
        if bad:
            sys.stderr.write("llmb_fabric_probe.py: bad arguments: " + "; ".join(bad) + "\n")
            return 2
        return hccn_ping(args)
    if args.mode == "ibbw":
        bad += [f"--devices: {d!r}" for d in args.devices.split(",") if d and not NAME.match(d)]
        if args.peer and not NAME.match(args.peer):
            bad.append(f"--peer: {args.peer!r}")
        if args.state_dir and not os.path.isabs(args.state_dir):
            bad.append(f"--state-dir: {args.state_dir!r} is not an absolute path")
        if not 1 <= args.port_base <= 65000:
            bad.append(f"--port-base: {args.port_base}")
    else:
        bad += [f"--hosts: {h!r}" for h in args.hosts.split(",") if not re.fullmatch(r"[A-Za-z0-9_.:-]+:\d{1,4}", h)]
        bad += [f"--env: {e!r}" for e in args.env or [] if not ENV_KEY.match(e.partition("=")[0])
                or any(c in e for c in "\n\r\x00")]
        for opt in ("min_bytes", "max_bytes"):
            if not re.fullmatch(r"\d+[KMG]?", getattr(args, opt)):
                bad.append(f"--{opt.replace('_', '-')}: {getattr(args, opt)!r}")
        if args.ssh_config and not os.path.isabs(args.ssh_config):
            bad.append(f"--ssh-config: {args.ssh_config!r} is not an absolute path")
    if bad:
        sys.stderr.write("llmb_fabric_probe.py: bad arguments: " + "; ".join(bad) + "\n")
        return 2
    return ibbw(args) if args.mode == "ibbw" else allreduce(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
