"""The relay sender's HTTP server: ``python3 -m http.server`` as a transient systemd unit.

    argv = unit_argv(port=18090, address="10.0.0.11", directory="/opt/llmb/models/kimi")
    res = start(port=18090, address="10.0.0.11", directory="/opt/llmb/models/kimi")   # stop, start, wait
    res = stop()

The unit is unprivileged (``DynamicUser``) with a read-only view of the filesystem
(``ProtectSystem=strict``), bound to the node's cluster address; receivers verify every file on
arrival against the manifest, so the server needs no integrity of its own. ``start`` stops a unit
left by an interrupted run, starts a new one and waits until it listens: what were three tasks
(three SSH round trips per sender) is one call. ``stop`` is the stage's ``always`` step.
"""

from __future__ import annotations

import socket
import subprocess
import time

UNIT = "llmb-weights-relay"
# systemctl stop: 0 stopped, 5 no such unit (nothing to stop)
STOP_OK = (0, 5)


class RelayError(Exception):
    pass


def unit_argv(port: int, address: str, directory: str, unit: str = UNIT, python: str = "/usr/bin/python3") -> list[str]:
    """systemd-run argv of the relay server (every decision about the unit is here)."""
    return ["systemd-run", f"--unit={unit}", "--collect",
            "--property=DynamicUser=yes", "--property=ProtectSystem=strict", "--property=ProtectHome=yes",
            "--property=PrivateTmp=yes", "--property=NoNewPrivileges=yes", python, "-m", "http.server",
            str(int(port)), "--bind", address, "--directory", directory]


def stop_argv(unit: str = UNIT) -> list[str]:
    return ["systemctl", "stop", f"{unit}.service"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True)


def stop(unit: str = UNIT, run=_run) -> dict:
    proc = run(stop_argv(unit))
    if proc.returncode not in STOP_OK:
        raise RelayError(f"{' '.join(stop_argv(unit))}: rc {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return {"rc": proc.returncode}


def wait_listening(address: str, port: int, timeout: float = 30.0, poll: float = 0.05, sleep=time.sleep) -> float:
    """Seconds until a TCP connection to address:port succeeds; RelayError after ``timeout``."""
    t0 = time.monotonic()
    host = address.strip("[]")
    last = ""
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return round(time.monotonic() - t0, 3)
        except OSError as exc:
            last = exc.strerror or str(exc)
        if time.monotonic() - t0 > timeout:
            raise RelayError(f"relay server on {address}:{port} not listening after {timeout:.0f}s ({last})")
        sleep(poll)


def start(port: int, address: str, directory: str, unit: str = UNIT, timeout: float = 30.0, run=_run,
          wait=wait_listening) -> dict:
    """Stop a unit left by an interrupted run, start the server, wait until it listens."""
    stale = stop(unit, run=run)
    argv = unit_argv(port, address, directory, unit)
    proc = run(argv)
    if proc.returncode != 0:
        raise RelayError(f"systemd-run {unit}: rc {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-500:]}")
    waited = wait(address, port, timeout)
    return {"argv": argv, "stale_rc": stale["rc"], "listen_seconds": waited}
