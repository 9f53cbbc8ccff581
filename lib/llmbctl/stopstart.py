"""`llmb stop` / `llmb start`: which hosts, in which order, and which workers a router drains first.

The order is the plan's (the deployment document's start levels: Ray head 10, workers 20, API 30,
router 40, ...): start goes up the levels, stop comes down them (roles/serve/tasks/stop.yml,
start.yml loop over :func:`levels`). A front that can take a worker out of rotation is a
prefill/decode router of the plan (role ``router``, sglang-router's ``--prefill URL [PORT]`` /
``--decode URL`` arguments): before a stop of hosts that serve one of its workers, and the router
itself not stopped with them, the worker is removed from the router and its requests in flight
finish (llmb.router.remove); after a start it is added back (:func:`drains`). Pure functions over
the deployment document.
"""

from __future__ import annotations

from urllib.parse import urlsplit

ACTIONS = ("stop", "start")
_ROLE_FLAGS = {"--prefill": "prefill", "--decode": "decode"}


def levels(doc: dict, action: str) -> list[int]:
    """The plan's start levels in the order ``action`` goes through them."""
    if action not in ACTIONS:
        raise ValueError(f"action {action!r}: expected one of {ACTIONS}")
    got = sorted(int(x) for x in doc.get("start_levels") or [])
    return got if action == "start" else got[::-1]


def _workers(argv: list[str]) -> list[tuple[str, str]]:
    """(worker URL, worker type) of a PD router's argv."""
    out = []
    for i, a in enumerate(argv[:-1]):
        if a in _ROLE_FLAGS and argv[i + 1].startswith(("http://", "https://")):
            out.append((argv[i + 1].rstrip("/"), _ROLE_FLAGS[a]))
    return out


def drains(doc: dict, hosts: list[str]) -> list[dict]:
    """The router workers that ``hosts`` serve and a router outside ``hosts`` routes to:
    [{router_host, router (its base URL), url, worker_type, host}]."""
    stopped = set(hosts)
    by_address = {str(h.get("address")): name for name, h in (doc.get("hosts") or {}).items() if h}
    out = []
    for rhost, h in (doc.get("hosts") or {}).items():
        if rhost in stopped:
            continue
        for svc in ((h or {}).get("plan") or {}).get("services") or []:
            if svc.get("role") != "router" or not svc.get("health"):
                continue
            base = svc["health"]["url"].rsplit("/", 1)[0]
            for url, wtype in _workers(svc.get("argv") or []):
                owner = by_address.get(urlsplit(url).hostname or "")
                if owner in stopped:
                    out.append({"router_host": rhost, "router": base, "url": url, "worker_type": wtype, "host": owner})
    return out
