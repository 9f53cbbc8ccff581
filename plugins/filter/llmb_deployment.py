"""Filters exposing the deployment resolver (plugins/module_utils/llmb/deployment.py) to stage 0.

doc:  "{{ hostvars | llmb_deployment(groups, run_id, artifacts_dir) }}"   # the whole document
text: "{{ doc | llmb_deployment_json }}"                                  # deployment.json's bytes
mine: "{{ doc | llmb_deployment_host(inventory_hostname) }}"              # shared sections + this host
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MODULE_UTILS not in sys.path:
    sys.path.insert(0, _MODULE_UTILS)

from llmb.deployment import DeploymentError, dumps, host_view, resolve, validate_run_id  # noqa: E402


def llmb_deployment(hostvars, groups, run_id=None, artifacts_dir=None, data_dir=None):
    """The deployment document of the inventory (planned: false and problems when it cannot be planned)."""
    try:
        rid = validate_run_id(run_id) if run_id is not None else None
    except DeploymentError as err:
        raise AnsibleFilterError(str(err)) from None
    return resolve(hostvars, dict(groups), rid, str(artifacts_dir) if artifacts_dir else None, data_dir)


def llmb_deployment_json(doc):
    """The document as deployment.json holds it."""
    return dumps(dict(doc))


def llmb_deployment_host(doc, host):
    """One host's view: every shared section, and `host` = its own entry (address, rank, patches, plan)."""
    return host_view(dict(doc), str(host))


class FilterModule:
    def filters(self):
        return {
            "llmb_deployment": llmb_deployment,
            "llmb_deployment_json": llmb_deployment_json,
            "llmb_deployment_host": llmb_deployment_host,
        }
