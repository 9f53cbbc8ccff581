"""`ray start --head|--address`, `ray stop`, `ray status` stand-in (a tiny GCS: members with GPU counts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from . import flagset, runtime

PIDS = "ray_pids"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    log = runtime.Log("ray")
    if argv[:1] == ["--version"]:
        print(f"ray, version {flagset.load('ray')['version']}")
        return 0
    cmd = argv[:1]
    if cmd == ["stop"]:
        return stop(log)
    if cmd == ["status"]:
        return status(log)
    if cmd != ["start"]:
        print("Usage: ray [OPTIONS] COMMAND [ARGS]...\nTry 'ray --help' for help.\n", file=sys.stderr)
        print(f"Error: No such command '{argv[0] if argv else ''}'.", file=sys.stderr)
        return 2
    fs = flagset.load("ray")
    try:
        args, pos = flagset.parse(fs, argv[1:])
        if pos:
            raise flagset.UsageError(f"Got unexpected extra argument ({pos[0]})")
    except flagset.UsageError as err:
        print("Usage: ray start [OPTIONS]\nTry 'ray start --help' for help.\n", file=sys.stderr)
        print(f"Error: {err}", file=sys.stderr)
        return 2
    if "ray_exit_at_start" in runtime.faults():
        runtime.die(log, "RuntimeError: ray start failed (enginesim fault ray_exit_at_start)")
    if not args.get("--block"):
        return _daemonize(argv, args, log)
    if args.get("--head"):
        return head(args, log)
    if args.get("--address"):
        return worker(args, log)
    print("Error: either --head or --address must be given.", file=sys.stderr)
    return 2


def _record_pid() -> None:
    path = runtime.state_dir() / PIDS
    with path.open("a") as fh:
        fh.write(f"{os.getpid()}\n")


def head(args: dict, log: runtime.Log) -> int:
    port = int(args.get("--port", 6379))
    ip = args.get("--node-ip-address") or "127.0.0.1"
    gpus = int(args.get("--num-gpus") or runtime.local_devices())
    rdv = runtime.Rendezvous("0.0.0.0", port, log)
    rdv.members.append({"node_ip": ip, "gpus": gpus, "head": True})
    (runtime.state_dir() / "ray_current_cluster").write_text(f"{ip}:{port}\n")
    _record_pid()
    log.raw("Local node IP: " + ip)
    log.raw("--------------------\nRay runtime started.\n--------------------")
    log.raw(
        f"Next steps\n  To add another node to this Ray cluster, run\n    ray start --address='{ip}:{port}'"
    )
    return runtime.wait_for_signal(log, "ray head")


def worker(args: dict, log: runtime.Log) -> int:
    address = args["--address"]
    host, _, port = address.rpartition(":")
    ip = args.get("--node-ip-address") or "127.0.0.1"
    gpus = int(args.get("--num-gpus") or runtime.local_devices())
    timeout = runtime.connect_timeout()
    sock = runtime.join(host, int(port), {"node_ip": ip, "gpus": gpus, "head": False}, timeout)
    if sock is None:
        log.raw(
            f"ConnectionError: Unable to connect to GCS (ray head) at {address} within {timeout:g} s. Check "
            "that (1) Ray with matching version started successfully at the specified address, (2) this "
            "node can reach the specified address, and (3) there is no firewall setting preventing access.",
            err=True,
        )
        return 1
    (runtime.state_dir() / "ray_current_cluster").write_text(f"{address}\n")
    _record_pid()
    log.raw("Local node IP: " + ip)
    log.raw("--------------------\nRay runtime started.\n--------------------")
    runtime.watch_master(sock, log, f"Ray head {address}")
    return runtime.wait_for_signal(log, "ray worker")


def _daemonize(argv: list[str], args: dict, log: runtime.Log) -> int:
    """`ray start` without --block: run the node in the background and return once it is up."""
    child = subprocess.Popen(
        [sys.executable, "-m", "enginesim.ray_cli", *argv, "--block"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    deadline = time.monotonic() + runtime.connect_timeout() + 5
    while time.monotonic() < deadline:
        if child.poll() is not None:
            log.raw("ray start failed; run with --block to see why", err=True)
            return 1
        if (runtime.state_dir() / "ray_current_cluster").exists() and _is_member(child.pid):
            log.raw("Ray runtime started.")
            return 0
        time.sleep(0.2)
    return 1


def _is_member(pid: int) -> bool:
    path = runtime.state_dir() / PIDS
    return path.exists() and str(pid) in path.read_text().split()


def stop(log: runtime.Log) -> int:
    path = runtime.state_dir() / PIDS
    stopped = 0
    if path.exists():
        for line in path.read_text().split():
            try:
                os.kill(int(line), signal.SIGTERM)
                stopped += 1
            except (OSError, ValueError):
                pass
        path.unlink()
    (runtime.state_dir() / "ray_current_cluster").unlink(missing_ok=True)
    log.raw(f"Stopped all {stopped} Ray processes.")
    return 0


def status(log: runtime.Log) -> int:
    path = runtime.state_dir() / "ray_current_cluster"
    if not path.exists():
        log.raw("ConnectionError: Could not find any running Ray instance.", err=True)
        return 1
    host, _, port = path.read_text().strip().rpartition(":")
    info = runtime.query(host, int(port))
    if info is None:
        log.raw(f"ConnectionError: Ray head at {host}:{port} does not answer.", err=True)
        return 1
    members = info["members"]
    log.raw("======== Autoscaler status ========\nActive:")
    for m in members:
        log.raw(f" 1 node_{m['node_ip']}{' (head)' if m.get('head') else ''}")
    log.raw(f"Resources\n {sum(int(m['gpus']) for m in members)}.0 GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
