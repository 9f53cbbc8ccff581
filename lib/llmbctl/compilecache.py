"""Which node fills a cold compile cache from which peer: the controller's one decision about it.

    plan = peer_plan(states, plans)
    plan["receivers"]["n2"] == {"llmb-vllm": {"source": "n1", "digest": "9f2c..."}}
    plan["senders"]["n1"] == ["llmb-vllm"]

``states`` is each host's llmb_compile_cache result (service -> cold | warm | peer, before the start);
``plans`` each host's serve plan (HostPlan.to_dict()). A cold service gets a source when another host
runs a service of the same name whose cache is ``warm`` (its own engine wrote it: a ``peer`` copy is
never passed on, so a bad copy cannot spread, until the node's group has started whole on it: the serve role
then adopts it, llmb.compile_cache.adopt, and it is ``warm``) and whose plan digest is the same.

The digest (``service_digest``) covers what decides what the engine compiles: the image, argv and
environment, with what differs per node left out because it changes no compiled kernel:

- argv flags naming the node's place or address: PER_NODE_FLAGS (with their value) and --headless;
- environment naming the node's address, network interface or GPU slice: PER_NODE_ENV, any
  ``*_SOCKET_IFNAME``, the llmb-bindto preload's ``LLMB_BIND_*`` and its library in ``LD_PRELOAD`` (set
  only where a node binds a listener: rank 0's master port; found by the e2e on the native launch).

The GPU model is not in the plan: a cache is only shared inside one inventory's accelerator group,
whose nodes the hardware check holds to one profile. Senders are spread: the cold hosts of a service
take its warm hosts in turn, starting at the ``seed`` (default: the first warm host in inventory
order), so N receivers over M senders put at most ceil(N/M) on one sender. One round: a peer copy is
never a sender, and a sender's relay serves its receivers in parallel.
"""

from __future__ import annotations

import hashlib
import json

from llmbctl.layout import BINDTO

STATES = ("cold", "warm", "peer")
# flags whose value is this node's rank or an address (the value follows as the next word or after '=')
PER_NODE_FLAGS = frozenset({
    "--node-rank", "--master-addr", "--data-parallel-address", "--data-parallel-start-rank",
    "--data-parallel-rank", "--dist-init-addr", "--host",
})
# flags without a value that only followers carry
PER_NODE_SWITCHES = frozenset({"--headless"})
PER_NODE_ENV = frozenset({
    "VLLM_HOST_IP", "SGLANG_HOST_IP", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_HOSTID",
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "MASTER_ADDR", "NODE_RANK",
})


def common_env(env: dict) -> dict[str, str]:
    """env less what is per node (see the module's docstring)."""
    out = {}
    for k, v in sorted(env.items()):
        if k in PER_NODE_ENV or k.endswith("_SOCKET_IFNAME") or k.startswith("LLMB_BIND_"):
            continue
        if k == "LD_PRELOAD":
            v = " ".join(w for w in str(v).replace(":", " ").split() if w != BINDTO)
            if not v:
                continue
        out[k] = str(v)
    return out


class PeerPlanError(ValueError):
    pass


def common_argv(argv: list[str]) -> list[str]:
    """argv less the per-node flags (and their values) and switches."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        flag = word.split("=", 1)[0]
        if word in PER_NODE_SWITCHES:
            continue
        if flag in PER_NODE_FLAGS:
            skip = "=" not in word
            continue
        out.append(word)
    return out


def service_digest(svc: dict) -> str:
    """sha256 of what a service's compiled kernels depend on (see the module's docstring)."""
    doc = {
        "name": svc.get("name"),
        "image": svc.get("image"),
        "argv": common_argv([str(w) for w in svc.get("argv") or []]),
        "env": common_env(svc.get("env") or {}),
        "cache_dir": svc.get("cache_dir"),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _services(host: str, plan: object) -> dict[str, dict]:
    if not isinstance(plan, dict) or not isinstance(plan.get("services"), list):
        raise PeerPlanError(f"{host}: plan: expected a host plan with a services list, found {type(plan).__name__}")
    return {s["name"]: s for s in plan["services"] if isinstance(s, dict) and s.get("cache_dir") and s.get("name")}


def peer_plan(states: dict, plans: dict, seed: str | None = None, enabled: bool = True) -> dict:
    """{"receivers": {host: {service: {source, digest}}}, "senders": {host: [service]}} (see the docstring).
    Hosts are taken in ``plans``' order (the inventory's)."""
    if not isinstance(states, dict) or not isinstance(plans, dict):
        raise PeerPlanError("compile cache states and plans: expected mappings of host to result")
    if seed is not None and seed not in plans:
        raise PeerPlanError(f"compile cache seed {seed!r} is not one of the play's hosts ({', '.join(plans)})")
    receivers: dict[str, dict] = {}
    senders: dict[str, list[str]] = {}
    if not enabled:
        return {"receivers": receivers, "senders": senders}
    hosts = list(plans)
    by_host = {h: _services(h, plans[h]) for h in hosts}
    for h in hosts:
        st = states.get(h) or {}
        if not isinstance(st, dict):
            raise PeerPlanError(f"{h}: compile cache state: expected service -> cold|warm|peer, found {st!r}")
        for name, value in st.items():
            if value not in STATES:
                raise PeerPlanError(f"{h}: compile cache state of {name}: expected one of {', '.join(STATES)}, found {value!r}")
    names = sorted({n for svcs in by_host.values() for n in svcs})
    for name in names:
        groups: dict[str, dict[str, list[str]]] = {}
        for h in hosts:
            svc = by_host[h].get(name)
            state = (states.get(h) or {}).get(name)
            if svc is None or state not in ("cold", "warm"):
                continue
            g = groups.setdefault(service_digest(svc), {"cold": [], "warm": []})
            g[state].append(h)
        for digest, g in groups.items():
            warm = g["warm"]
            if not warm or not g["cold"]:
                continue
            if seed in warm:
                i = warm.index(seed)
                warm = warm[i:] + warm[:i]
            for k, h in enumerate(g["cold"]):
                src = warm[k % len(warm)]
                receivers.setdefault(h, {})[name] = {"source": src, "digest": digest}
                if name not in senders.setdefault(src, []):
                    senders[src].append(name)
    return {"receivers": {h: receivers[h] for h in hosts if h in receivers},
            "senders": {h: sorted(senders[h]) for h in hosts if h in senders}}


# a start is as cold as its coldest node: one rank that compiles holds the group back
_COLDEST_FIRST = ("cold", "peer", "warm")


def group_states(after: dict) -> dict[str, dict[str, str]]:
    """The compile cache state of each host's services as a start of the serving group: for a service, the
    coldest state (cold, then peer, then warm) over every host running a service of that name (the one
    group of the inventory: a group's rank 0 answers the health check while its other nodes hold ranks
    of the same start). ``after`` is each host's states after a peer copy (llmb_compile_cache_after);
    hosts or services without a known state are left out. The report's start history files a start under
    it: a rebuilt node filled from a peer makes the group's start a ``peer`` start, not rank 0's ``warm``."""
    if not isinstance(after, dict):
        raise PeerPlanError("compile cache states: expected a mapping of host to {service: state}")
    seen: dict[str, list[str]] = {}
    for h, st in after.items():
        if not isinstance(st, dict):
            raise PeerPlanError(f"{h}: compile cache state: expected service -> cold|warm|peer, found {st!r:.80}")
        for name, value in st.items():
            if value in STATES:
                seen.setdefault(name, []).append(value)
    coldest = {n: next(s for s in _COLDEST_FIRST if s in vals) for n, vals in seen.items()}
    return {h: {n: coldest[n] for n, v in st.items() if v in STATES} for h, st in after.items()}
