"""Filters of the serve role's port check (controller side); the logic is llmb.ports.

    own:     "{{ hostvars['localhost'].llmb_deployment_doc | llmb_port_listeners(inventory_hostname) }}"
    targets: "{{ doc | llmb_port_targets(inventory_hostname, listen_results_of_every_host) }}"
    msgs:    "{{ probes | llmb_port_failures(listens) }}"   # registered results of every host -> lines
"""

from __future__ import annotations

from llmb import ports
from llmbctl.plugin import reraise_each

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # imported by the unit tests without Ansible
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]


def llmb_port_listeners(doc, host):
    return ports.own_listeners(doc, str(host))


def llmb_port_targets(doc, host, listening=None):
    return ports.targets(doc, str(host), listening)


def llmb_port_failures(probes, listens=None):
    """Every failed pair (probe results) and every taken port (listen results) of every host, a line each."""
    out = []
    for r in listens or []:
        out += [ports.taken_message(rec["host"], rec) for rec in (r or {}).get("taken") or []]
    for r in probes or []:
        out += [rec["message"] for rec in (r or {}).get("results") or [] if not rec.get("ok")]
    return out


class FilterModule:
    def filters(self):
        return reraise_each((llmb_port_listeners, llmb_port_targets, llmb_port_failures), ValueError,
                            AnsibleFilterError)
