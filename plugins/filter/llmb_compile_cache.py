"""Filters of the serve stage's compile cache peer copy (controller side), over llmbctl.compilecache.

    peers: "{{ ansible_play_hosts | llmb_compile_cache_peers(hostvars, '__serve_compile_cache') }}"
    jobs: "{{ peers.receivers[inventory_hostname] | llmb_compile_cache_jobs(hostvars, '__serve_cache_send', services) }}"
    state: "{{ __serve_compile_cache.state | llmb_compile_cache_after(__serve_cache_received | default({})) }}"
    group: "{{ ansible_play_hosts | llmb_compile_cache_group(hostvars, '__serve_compile_cache', '__serve_cache_received') }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmbctl.compilecache import PeerPlanError, group_states, peer_plan


def _get(hostvars, host, key):
    try:
        return hostvars[host].get(key)
    except (KeyError, AttributeError):
        return None


def llmb_compile_cache_peers(hosts, hostvars, result_var="__serve_compile_cache", seed=None, enabled=True):
    """The peer plan over the play's hosts: each host's llmb_compile_cache state and its serve plan
    (llmb_deployment.host.plan). A host whose call was skipped has no cache to give or take."""
    states, plans = {}, {}
    for h in hosts:
        res = _get(hostvars, h, result_var) or {}
        plan = ((_get(hostvars, h, "llmb_deployment") or {}).get("host") or {}).get("plan") or {"services": []}
        states[h] = dict(res.get("state") or {})
        plans[h] = plan
    try:
        return peer_plan(states, plans, seed=seed or None, enabled=bool(enabled))
    except PeerPlanError as err:
        raise AnsibleFilterError(f"compile cache peers: {err}") from None


def llmb_compile_cache_jobs(mine, hostvars, send_var, services):
    """This receiver's llmb_compile_cache_peer ``receive``: each service whose source served its cache
    (the source's manifest and URL); a service whose source could not serve it stays cold."""
    dirs = {s["name"]: s.get("cache_dir") for s in services or []}
    jobs = {}
    for name, pick in sorted((mine or {}).items()):
        sent = ((_get(hostvars, pick["source"], send_var) or {}).get("manifests") or {}).get(name) or {}
        if not sent.get("files") or sent.get("unservable"):
            continue
        jobs[name] = {"cache_dir": dirs.get(name), "url": sent["url"], "source": pick["source"],
                      "digest": pick["digest"], "files": sent["files"]}
    return jobs


def llmb_compile_cache_after(state, received):
    """The states the report shows: what each cache held before the start, a cache filled from a peer
    in this run being ``peer``."""
    out = dict(state or {})
    for name in ((received or {}).get("received") or {}):
        out[name] = "peer"
    return out


def llmb_compile_cache_group(hosts, hostvars, result_var="__serve_compile_cache", received_var="__serve_cache_received",
                             host=None):
    """Each host's {service: state as a start of the group} (llmbctl.compilecache.group_states) over the
    play's hosts, or ``host``'s alone; a host whose cache call was skipped has none."""
    after = {}
    for h in hosts:
        res = _get(hostvars, h, result_var) or {}
        got = _get(hostvars, h, received_var) or {}
        after[h] = llmb_compile_cache_after(res.get("state") if isinstance(res, dict) else {},
                                            got if isinstance(got, dict) else {})
    try:
        groups = group_states(after)
    except PeerPlanError as err:
        raise AnsibleFilterError(f"compile cache group: {err}") from None
    return groups.get(host, {}) if host is not None else groups


class FilterModule:
    def filters(self):
        return {
            "llmb_compile_cache_peers": llmb_compile_cache_peers,
            "llmb_compile_cache_jobs": llmb_compile_cache_jobs,
            "llmb_compile_cache_after": llmb_compile_cache_after,
            "llmb_compile_cache_group": llmb_compile_cache_group,
        }
