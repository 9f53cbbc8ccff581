"""SGLang prefill/decode disaggregation in the stand-in: what the real router (sglang-router's PD mode)
and the two groups say to each other, without GPUs.

Observed with the real router (sglang-router 0.3.2) in front of two recording servers: it registers
every worker with GET /health, /server_info and /model_info, then sends each chat request to the
prefill and the decode worker at once, both bodies carrying ``bootstrap_host``, ``bootstrap_port``
and ``bootstrap_room``, and answers the client with the decode worker's response.

Here the prefill worker runs a bootstrap server on --disaggregation-bootstrap-port (default 8998):
for each request it publishes the room's "KV" (a digest of the request), and the decode worker fetches
it from ``http://bootstrap_host:bootstrap_port/kv/<room>`` before it answers: a decode worker that
cannot reach its prefill group fails the request as SGLang's would (KV transfer failed), and a
request without a bootstrap room is refused (it did not come through the router). Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .api import ApiError
from .runtime import Log, serve_in_thread

KV_WAIT_S = 10.0


def _digest(req: dict) -> str:
    body = {k: v for k, v in req.items() if not k.startswith("bootstrap_")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


class Bootstrap:
    """The prefill group's bootstrap server: rooms -> KV digests, served over HTTP."""

    def __init__(self, host: str, port: int, log: Log):
        self.rooms: dict[str, str] = {}
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                room = self.path.rsplit("/", 1)[-1]
                deadline = time.monotonic() + KV_WAIT_S
                with outer.cond:
                    while room not in outer.rooms and time.monotonic() < deadline:
                        outer.cond.wait(deadline - time.monotonic())
                    kv = outer.rooms.get(room)
                data = json.dumps({"room": room, "kv": kv}).encode()
                self.send_response(200 if kv else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = serve_in_thread(
            ThreadingHTTPServer, (host, port), Handler, log,
            lambda exc: f"OSError: [Errno {exc.errno}] bootstrap server cannot bind ({host!r}, {port}): {exc.strerror}",
            "bootstrap_server.py:1",
        )
        log.info(f"Disaggregation bootstrap server listening on {host}:{self.httpd.server_address[1]}")

    def publish(self, room: str, kv: str) -> None:
        with self.cond:
            self.rooms[room] = kv
            self.cond.notify_all()


class PdWorker:
    """One worker's side of the protocol: prefill publishes, decode fetches before answering."""

    def __init__(self, mode: str, log: Log, bootstrap: Bootstrap | None = None, ib_device: str | None = None):
        self.mode = mode
        self.log = log
        self.bootstrap = bootstrap
        self.ib_device = ib_device

    def before_chat(self, req: dict) -> None:
        room, host, port = req.get("bootstrap_room"), req.get("bootstrap_host"), req.get("bootstrap_port")
        if room is None or not host:
            raise ApiError(400, f"this server runs --disaggregation-mode {self.mode}: requests come through the "
                           "router (no bootstrap_room / bootstrap_host in the request)", "BadRequestError")
        kv = _digest(req)
        if self.mode == "prefill":
            assert self.bootstrap is not None
            self.bootstrap.publish(str(room), kv)
            return
        url = f"http://{host}:{port}/kv/{room}"
        try:
            with urllib.request.urlopen(url, timeout=KV_WAIT_S + 2) as resp:  # noqa: S310 - the test's own URL
                got = json.loads(resp.read() or b"{}").get("kv")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.log.error(f"KV transfer failed for room {room} from {host}:{port} over {self.ib_device}: {exc}")
            raise ApiError(500, f"KV transfer from the prefill bootstrap server {host}:{port} failed: {exc}",
                           "InternalServerError") from None
        if got != kv:
            raise ApiError(500, f"KV of room {room} does not match the request (prefill has {got!r})",
                           "InternalServerError")
        self.log.info(f"KV of room {room} received from {host}:{port} over {self.ib_device}")
