#!/usr/bin/python3
"""The serving group's restart, on the nodes (stdlib only, python3 >= 3.9; the serve role installs
this file as <opt>/bin/llmb-group and the group's units call it).

A multi-node instance is one group: losing any rank or worker leaves the others waiting (rank 0 for a
headless rank that never returns, Ray for a worker). systemd ties the units of one node together
(llmb-group.target, PartOf=, BindsTo= on the same node: llmb.serve.systemd_unit); across nodes this tool
carries the loss to the head, which restarts the whole group in plan order:

    llmb-group stopped UNIT --head ADDRESS|local --ssh-config FILE   (ExecStopPost= of every group unit)
        when the unit's process died ($SERVICE_RESULT is not "success") or ended with status 0
        while systemd holds no stop job for it (vLLM's rank 0 after a lost node; a stop asked for
        by systemctl or Ansible is not a loss), start llmb-group-restart.service on the head (over
        the SSH mesh: cluster key, pinned host keys), never blocking the stop.
    llmb-group restart --settle S --ssh-config FILE MEMBER...    (llmb-group-restart.service, head)
        restart llmb-group.target here (this node's units, stopped then started in plan order by
        After=), then llmb-group.target on every member node; a member's units wait for the head
        (ExecStartPre= llmb-group wait). A loss within S seconds of the last group restart is that
        restart's own start and is left to systemd's Restart=.
    llmb-group wait HOST PORT TIMEOUT                            (ExecStartPre= of a member unit)
        until HOST:PORT accepts a TCP connection (the head's readiness port of the plan).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

TARGET = "llmb-group.target"
RESTART_UNIT = "llmb-group-restart.service"
STAMP = "/run/llmb-group-restarted"


def log(msg: str) -> None:
    print(f"llmb-group: {msg}", flush=True)


def lost(service_result: str) -> bool:
    """Whether a unit's stop is a loss ($SERVICE_RESULT of ExecStopPost=): anything but success."""
    return service_result not in ("", "success")


def settled(now: float, stamp: float | None, settle: float) -> bool:
    """Whether the last group restart (stamp) is older than settle seconds."""
    return stamp is None or now - stamp >= settle


def _ssh(ssh_config: str, address: str, *remote: str) -> list[str]:
    return ["ssh", "-F", ssh_config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", address, "--", *remote]


def stop_asked(unit: str, jobs_text: str) -> bool:
    """Whether systemd holds a stop or restart job for the unit (`systemctl list-jobs --no-legend
    --plain`: JOB UNIT TYPE STATE): a stop someone asked for, not the process ending by itself."""
    for line in (jobs_text or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == unit and parts[2] in ("stop", "restart", "try-restart", "reload-or-restart"):
            return True
    return False


def _jobs() -> str:
    try:
        done = subprocess.run(["systemctl", "list-jobs", "--no-legend", "--plain"], capture_output=True, text=True,
                              timeout=10)
        return done.stdout if done.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def exited_by_itself(unit: str, env: dict, jobs=_jobs) -> bool:
    """A clean exit (status 0) nobody asked for is a loss too: vLLM 0.26.0's node rank 0 ends with
    status 0 once a request meets the ranks a lost node took with it ("NCCL error: remote process
    exited", docs/examples/serve-real-multinode/faults/kill-rank/), and its $SERVICE_RESULT is success."""
    if env.get("EXIT_CODE") != "exited" or env.get("EXIT_STATUS") != "0":
        return False
    return not stop_asked(unit if unit.endswith(".service") else unit + ".service", jobs())


def stopped(unit: str, head: str, ssh_config: str, env: dict | None = None, jobs=_jobs) -> int:
    env = os.environ if env is None else env
    result = env.get("SERVICE_RESULT", "")
    if not lost(result) and not exited_by_itself(unit, env, jobs):
        return 0
    log(f"{unit} stopped ({result}, exit {env.get('EXIT_CODE', '?')} {env.get('EXIT_STATUS', '')}): "
        f"restarting the group from the head ({head})")
    argv = ["systemctl", "--no-block", "start", RESTART_UNIT]
    if head != "local":
        argv = _ssh(ssh_config, head, *argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            log(f"could not reach the head: {' '.join(argv[:1])} exit {done.returncode}: {done.stderr.strip()[-300:]}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"could not reach the head: {exc}")
    return 0  # never fail the stop itself


def _read_stamp(path: str) -> float | None:
    try:
        with open(path) as fh:
            return float(fh.read().strip())
    except (OSError, ValueError):
        return None


def restart(members: list[str], ssh_config: str, settle: float, stamp_path: str = STAMP) -> int:
    now = time.time()
    if not settled(now, _read_stamp(stamp_path), settle):
        log(f"a group restart ran less than {settle:g} s ago; this loss is its own start (systemd's Restart= acts)")
        return 0
    with open(stamp_path, "w") as fh:
        fh.write(f"{now}\n")
    log(f"restarting {TARGET} here, then on {len(members)} member node(s): {' '.join(members)}")
    rc = subprocess.run(["systemctl", "restart", TARGET]).returncode
    failures: list[str] = []

    def one(address: str) -> None:
        try:
            done = subprocess.run(_ssh(ssh_config, address, "systemctl", "--no-block", "restart", TARGET),
                                  capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                failures.append(f"{address}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            failures.append(f"{address}: {exc}")

    threads = [threading.Thread(target=one, args=(m,)) for m in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures:
        log(f"member not restarted: {f}")
    return 1 if rc != 0 or failures else 0


def wait(host: str, port: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=3):
                return 0
        except OSError as exc:
            if time.monotonic() >= deadline:
                log(f"the head's {host}:{port} did not accept a connection within {timeout:g} s: {exc}")
                return 1
        time.sleep(1)


def main(argv: list[str]) -> int:
    if argv[:1] == ["stopped"] and len(argv) == 6 and argv[2] == "--head" and argv[4] == "--ssh-config":
        return stopped(argv[1], argv[3], argv[5])
    if argv[:1] == ["restart"] and len(argv) >= 5 and argv[1] == "--settle" and argv[3] == "--ssh-config":
        return restart(argv[5:], argv[4], float(argv[2]))
    if argv[:1] == ["wait"] and len(argv) == 4:
        return wait(argv[1], int(argv[2]), float(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
