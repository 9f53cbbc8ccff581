"""Taking a worker out of a prefill/decode router's rotation and back (`llmb stop` / `llmb start`).

The router is sglang-router's PD mode (0.3.2, the pin of data/engines/hand/sglang.yml): its worker
API, as the real router answers it (tests/fixtures/captures/sglang-router/):

    GET    /workers        {"workers": [{"id", "url", "worker_type", "is_healthy", "load", ...}], ...}
    DELETE /workers/<id>   202 {"status": "accepted", ...}: removal queued; 404 WORKER_NOT_FOUND
    POST   /workers        {"url", "worker_type"} -> 202 {"status": "accepted", "worker_id", ...}

:func:`remove` deletes the worker, waits until the router no longer lists it (no new request goes
there), then lets the requests in flight finish: until the worker's own ``/get_load`` (SGLang's)
says none runs, or, where the worker has no such endpoint, ``drain_s`` seconds. :func:`add` puts it
back and waits until the router lists it healthy. Stdlib only, python3 >= 3.9.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable


class RouterError(Exception):
    """The router did not do what was asked; the message says what it answered."""


def request(method: str, url: str, body: dict | None = None, timeout: float = 10) -> tuple[int | None, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        return None, str(e).encode()


Http = Callable[..., "tuple[int | None, bytes]"]


def workers(router: str, http: Http = request) -> list[dict]:
    status, body = http("GET", f"{router}/workers")
    if status != 200:
        raise RouterError(f"GET {router}/workers -> {status or 'no answer'}: {body[:200].decode(errors='replace')}")
    try:
        doc = json.loads(body)
    except ValueError:
        raise RouterError(f"GET {router}/workers: not JSON: {body[:200]!r}") from None
    return [w for w in (doc.get("workers") or []) if isinstance(w, dict)]


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def running_requests(worker: str, http: Http = request) -> int | None:
    """Requests the worker runs or queues (SGLang's /get_load); None when it has no such endpoint."""
    status, body = http("GET", f"{worker}/get_load")
    if status != 200:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    loads = doc if isinstance(doc, list) else [doc]
    total = 0
    for d in loads:
        if not isinstance(d, dict):
            return None
        total += int(d.get("num_reqs") or 0) + int(d.get("num_waiting_reqs") or 0)
    return total


def remove(router: str, worker: str, drain_s: float = 30, timeout_s: float = 60, http: Http = request,
           sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> dict:
    """Take ``worker`` out of the router's rotation and let its requests in flight finish:
    {"changed", "worker_type", "load", "drained_s", "how", "running"}; ``running``: the requests the
    worker still ran when the wait ended (its /get_load; None where it has none), which the stop ends."""
    listed = [w for w in workers(router, http) if _same(str(w.get("url", "")), worker)]
    if not listed:
        return {"changed": False, "worker_type": None, "load": None, "drained_s": 0.0, "how": "not in rotation"}
    wtype, load = listed[0].get("worker_type"), sum(int(w.get("load") or 0) for w in listed)
    for w in listed:
        status, body = http("DELETE", f"{router}/workers/{w.get('id')}")
        if status not in (200, 202, 404):
            raise RouterError(f"DELETE {router}/workers/{w.get('id')} ({worker}) -> {status or 'no answer'}: "
                              f"{body[:200].decode(errors='replace')}")
    t0 = clock()
    while any(_same(str(w.get("url", "")), worker) for w in workers(router, http)):
        if clock() - t0 > timeout_s:
            raise RouterError(f"{router} still lists {worker} {timeout_s:.0f}s after its removal")
        sleep(0.5)
    t1 = clock()
    how = f"waited {drain_s:g}s (the worker has no /get_load)"
    n = None
    while clock() - t1 < drain_s:
        n = running_requests(worker, http)
        if n == 0:
            how = "the worker's /get_load says none runs"
            break
        if n is None and load == 0 and clock() - t1 >= min(drain_s, 2.0):
            how = "the router counted no request on it"
            break
        sleep(0.5)
    else:
        n = running_requests(worker, http)  # what the stop now ends with the service
        if n:
            how = f"{n} request(s) still running after {drain_s:g}s"
    return {"changed": True, "worker_type": wtype, "load": load, "drained_s": round(clock() - t0, 1), "how": how,
            "running": n}


def add(router: str, worker: str, worker_type: str, timeout_s: float = 120, http: Http = request,
        sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> dict:
    """Put ``worker`` back into the router's rotation; wait until the router lists it healthy."""
    def listed() -> list[dict]:
        return [w for w in workers(router, http) if _same(str(w.get("url", "")), worker)]

    if any(w.get("is_healthy") is not False for w in listed()):
        return {"changed": False, "waited_s": 0.0}
    if not listed():
        status, body = http("POST", f"{router}/workers", {"url": worker, "worker_type": worker_type})
        if status not in (200, 201, 202):
            raise RouterError(f"POST {router}/workers {worker} ({worker_type}) -> {status or 'no answer'}: "
                              f"{body[:200].decode(errors='replace')}")
    t0 = clock()
    while not any(w.get("is_healthy") is not False for w in listed()):
        if clock() - t0 > timeout_s:
            raise RouterError(f"{router} does not list {worker} as a healthy {worker_type} worker {timeout_s:.0f}s "
                              "after adding it")
        sleep(1.0)
    return {"changed": True, "waited_s": round(clock() - t0, 1)}
