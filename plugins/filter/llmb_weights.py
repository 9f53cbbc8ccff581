"""Filters of the weights stage (controller side), over llmb.weights.plan.

    plan: "{{ weights_strategy | llmb_weights_plan(ansible_play_hosts, complete_hosts, seed) }}"
    senders: "{{ plan | llmb_weights_senders }}"            # hosts that serve a copy to a peer
    servers: "{{ plan | llmb_weights_relay_servers }}"      # hosts that run the relay HTTP server
    patches: "{{ profile | llmb_weights_patches(llmb_engine, llmb_platform) }}"
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from llmb.weights.plan import PlanError, fetch_plan, hub_fetchers, relay_servers, senders  # noqa: E402


def llmb_weights_plan(strategy, hosts, complete=(), seed=None):
    try:
        return fetch_plan(str(strategy), list(hosts), list(complete or []), seed or None)
    except PlanError as err:
        raise AnsibleFilterError(f"weights plan: {err}") from None


def llmb_weights_senders(plan):
    return senders(plan)


def llmb_weights_relay_servers(plan):
    return relay_servers(plan)


def llmb_weights_hub_fetchers(plan):
    return hub_fetchers(plan)


def llmb_weights_patches(profile, engine, platform=None):
    """config.json patches of the model profile for this engine, then this platform (the same
    selection as the launch planner's)."""
    table = (profile or {}).get("config_patches") or {}
    out = []
    for key in (engine, platform):
        if not key:
            continue
        for patch in table.get(key) or []:
            if not isinstance(patch, dict) or "path" not in patch or "value" not in patch:
                raise AnsibleFilterError(f"config_patches.{key}: each patch needs path and value, got {patch!r}")
            item = {"path": patch["path"], "value": patch["value"], "key": key}
            if patch.get("expect") is not None:
                item["expect"] = patch["expect"]
            out.append(item)
    return out


class FilterModule:
    def filters(self):
        return {
            "llmb_weights_plan": llmb_weights_plan,
            "llmb_weights_senders": llmb_weights_senders,
            "llmb_weights_hub_fetchers": llmb_weights_hub_fetchers,
            "llmb_weights_relay_servers": llmb_weights_relay_servers,
            "llmb_weights_patches": llmb_weights_patches,
        }
