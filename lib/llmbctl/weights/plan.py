"""Who fetches the weights from where: the fan-out plan of the three strategies.

    plan = fetch_plan("relay", ["n1", "n2", "n3", "n4"], complete=[])
    plan["n3"] == {"action": "fetch", "source": "n1", "round": 2, "wait_for": ["n1", "n2"]}

- ``each``: every node that lacks a verified copy downloads from the hub.
- ``shared``: one node (the seed) downloads onto the shared filesystem; the others only verify.
- ``relay``: the hub serves the model once: the seed downloads it, then in every round each node
  that holds a verified copy sends it to one node that lacks it, so the number of holders doubles
  per round (ceil(log2 N) rounds after the download). Nodes that already hold a verified copy
  (a re-run, or a rebuilt node rejoining) are senders from the first round and the hub is not
  asked at all. A receiver starts when every host in ``wait_for`` is complete: its source, and the
  source's previous receiver (a sender serves one receiver at a time).
"""

from __future__ import annotations

STRATEGIES = ("shared", "each", "relay")


class PlanError(Exception):
    pass


def _entry(action: str, source: str | None, rnd: int, wait_for: list[str] | None = None) -> dict:
    return {"action": action, "source": source, "round": rnd, "wait_for": list(wait_for or [])}


def fetch_plan(strategy: str, hosts: list[str], complete=(), seed: str | None = None) -> dict[str, dict]:
    """Per host: action (fetch | verify | none), source ("hub", a host, or None), round, wait_for."""
    if strategy not in STRATEGIES:
        raise PlanError(f"weights_strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    hosts = list(dict.fromkeys(hosts))
    if not hosts:
        raise PlanError("no hosts to plan the weights for")
    done = {h for h in complete if h in hosts}
    if seed is not None and seed not in hosts:
        raise PlanError(f"weights seed {seed!r} is not one of the play's hosts ({', '.join(hosts)})")
    seed = seed or hosts[0]
    plan: dict[str, dict] = {}
    if strategy == "each":
        for h in hosts:
            plan[h] = _entry("none", None, 0) if h in done else _entry("fetch", "hub", 0)
        return plan
    if strategy == "shared":
        for h in hosts:
            if h == seed:
                plan[h] = _entry("none", None, 0) if h in done else _entry("fetch", "hub", 0)
            else:
                plan[h] = _entry("verify", None, 1, [] if seed in done else [seed])
        return plan
    # relay
    holders = [h for h in hosts if h in done]
    need = [h for h in hosts if h not in done]
    for h in holders:
        plan[h] = _entry("none", None, 0)
    if not holders:
        first = seed if seed in need else need[0]
        need.remove(first)
        plan[first] = _entry("fetch", "hub", 0)
        holders = [first]
    last_receiver: dict[str, str] = {}
    rnd = 1
    while need:
        new = []
        for sender in list(holders):
            if not need:
                break
            receiver = need.pop(0)
            wait = [sender] + ([last_receiver[sender]] if sender in last_receiver else [])
            plan[receiver] = _entry("fetch", sender, rnd, wait)
            last_receiver[sender] = receiver
            new.append(receiver)
        holders.extend(new)
        rnd += 1
    return {h: plan[h] for h in hosts}


def rounds(plan: dict[str, dict]) -> int:
    return max((e["round"] for e in plan.values() if e["action"] == "fetch"), default=0)


def hub_fetchers(plan: dict[str, dict]) -> list[str]:
    return [h for h, e in plan.items() if e["action"] == "fetch" and e["source"] == "hub"]


def senders(plan: dict[str, dict]) -> list[str]:
    return sorted({e["source"] for e in plan.values() if e["action"] == "fetch" and e["source"] not in (None, "hub")})


def relay_servers(plan: dict[str, dict]) -> list[str]:
    """Hosts that must answer over HTTP during a relay: the senders, and every host a receiver
    waits for (a sender's previous receiver may be a receiver only)."""
    out = set(senders(plan))
    for e in plan.values():
        if e["action"] == "fetch" and e["source"] not in (None, "hub"):
            out.update(e["wait_for"])
    return sorted(out)
