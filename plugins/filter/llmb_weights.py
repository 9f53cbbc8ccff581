"""Filters of the weights stage (controller side), over llmbctl.weights.plan.

    plan: "{{ weights_strategy | llmb_weights_plan(ansible_play_hosts, complete_hosts, seed) }}"
    senders: "{{ plan | llmb_weights_senders }}"            # hosts that serve a copy to a peer
    servers: "{{ plan | llmb_weights_relay_servers }}"      # hosts that run the relay HTTP server
    patches: "{{ profile | llmb_weights_patches(llmb_engine, llmb_platform) }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmbctl.catalog import CatalogError, select_config_patches
from llmbctl.weights.plan import PlanError, fetch_plan, hub_fetchers, relay_servers, senders


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
    """config.json patches of the model profile for this engine and platform: the choice the launch
    planner makes too (llmbctl.catalog.select_config_patches)."""
    try:
        table = (profile or {}).get("config_patches")
        return [p.to_dict() for p in select_config_patches(table, engine, platform)]
    except (CatalogError, AttributeError) as err:
        raise AnsibleFilterError(f"weights patches: {err}") from None


class FilterModule:
    def filters(self):
        return {
            "llmb_weights_plan": llmb_weights_plan,
            "llmb_weights_senders": llmb_weights_senders,
            "llmb_weights_hub_fetchers": llmb_weights_hub_fetchers,
            "llmb_weights_relay_servers": llmb_weights_relay_servers,
            "llmb_weights_patches": llmb_weights_patches,
        }
