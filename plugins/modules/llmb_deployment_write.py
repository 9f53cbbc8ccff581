"""Documentation of the llmb_deployment_write action plugin (plugins/action/llmb_deployment_write.py)."""

DOCUMENTATION = r"""
---
module: llmb_deployment_write
short_description: Make the run's artifacts directory and write deployment.json into it
description:
  - >-
    Stage 0 (playbooks/_run.yml): creates O(artifacts_dir) (mode 0755) and writes O(document) to
    C(<artifacts_dir>/deployment.json) atomically, as C(scripts/launch-plan --deployment) prints it
    (llmbctl.deployment.dumps); a file that already holds it is left alone. Runs in the controller's own
    process, no module is sent anywhere. Controller-side results of the run: it writes in check mode too
    and never reports a change.
version_added: "0.1.0"
author: llm-bringup
options:
  artifacts_dir: {description: The run's artifacts directory., type: path, required: true}
  document: {description: The deployment document (the llmb_deployment filter's result)., type: dict, required: true}
attributes:
  check_mode: {support: full, description: Writes the controller-side document in check mode too.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Write deployment.json
  llmb_deployment_write:
    artifacts_dir: "{{ _llmb_run.dir }}"
    document: "{{ llmb_deployment_doc }}"
"""

RETURN = r"""
path: {description: Path of deployment.json., returned: always, type: str}
written: {description: The file was (re)written (false when it already held the document)., returned: always, type: bool}
"""
