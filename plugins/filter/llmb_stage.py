"""Filters of the stages' fast path on a converged re-run (controller side); the logic is llmbctl.stagegate.

    digest: "{{ llmb_deployment_doc | llmb_stage_digest(inventory_hostname, 'serve', hostvars[inventory_hostname]) }}"
    watch:  "{{ llmb_deployment_doc | llmb_stage_watch(inventory_hostname, 'serve') }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmbctl import stagegate
from llmbctl.plugin import reraise_each


def llmb_stage_digest(doc, host, stage, hostvars):
    """Digest of the stage's inputs for the host (its part of the document, its variables, its code)."""
    return stagegate.digest(dict(doc), str(host), str(stage), hostvars)


def llmb_stage_digests(doc, hosts, stage, hostvars):
    """The stage's digest for each host of ``hosts`` ({host: digest}; hostvars: Ansible's hostvars)."""
    return stagegate.digests(dict(doc), [str(h) for h in hosts], str(stage), hostvars)


def llmb_stage_watch(doc, host, stage):
    """What of the node's state the stage compares with its record."""
    return stagegate.watch(dict(doc), str(host), str(stage))


def llmb_stage_specs(doc, host, hostvars):
    """Every gated stage's digest and watch for the host (site.yml's one check_all call per host)."""
    return stagegate.specs(dict(doc), str(host), hostvars)


class FilterModule:
    def filters(self):
        return reraise_each((llmb_stage_digest, llmb_stage_digests, llmb_stage_watch, llmb_stage_specs),
                            stagegate.StageGateError, AnsibleFilterError, "stage gate: ")
