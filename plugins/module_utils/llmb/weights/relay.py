"""The relay sender's HTTP server: the standard library's file server as a transient systemd unit.

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
# The server: the standard library's threading HTTP file server with a listen backlog of 128
# instead of socketserver's 5. With 5, a receiver's parallel pulls plus the other receivers'
# record polls overflow the accept queue; the kernel drops the SYN and the client retries after
# its 1 s initial retransmission timeout, a full second lost per relay round (measured on the
# simulated cluster: 14 files pulled 8 at a time, 0.5-1.07 s with `python3 -m http.server`, 0.03 s
# with this). Arguments: port, bind address, directory. No '$' or '%' in it (systemd-run would
# expand them).
SERVER_SOURCE = """\
import functools, http.server, socket, sys
port, bind, directory = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128
    address_family = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0][0]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
Server((bind, port), handler).serve_forever()
"""
# systemctl stop: 0 stopped, 5 no such unit (nothing to stop)
STOP_OK = (0, 5)


class RelayError(Exception):
    pass


def unit_argv(port: int, address: str, directory: str, unit: str = UNIT, python: str = "/usr/bin/python3") -> list[str]:
    """systemd-run argv of the relay server (every decision about the unit is here)."""
    return ["systemd-run", f"--unit={unit}", "--collect",
            "--property=DynamicUser=yes", "--property=ProtectSystem=strict", "--property=ProtectHome=yes",
            "--property=PrivateTmp=yes", "--property=NoNewPrivileges=yes", python, "-c", SERVER_SOURCE,
            str(int(port)), address.strip("[]"), directory]


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
