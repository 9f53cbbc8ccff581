"""Documentation of the llmb_collect_write action plugin (plugins/action/llmb_collect_write.py)."""

DOCUMENTATION = r"""
---
module: llmb_collect_write
short_description: Write one host's support bundle, secrets masked, to the run's artifacts directory
description:
  - >-
    Writes O(files) (from llmb_collect) under C(<artifacts_dir>/collect/<host>/), every text masked by
    the one secret rule (llmbctl.secrets.redact_text) and the secret values the run knows (its secret
    environment, O(secrets)), with C(MANIFEST.json) and C(SHA256SUMS); records C(collect/<host>.json).
    Runs on the controller.
version_added: "0.1.0"
author: llm-bringup
options:
  artifacts_dir: {description: The run's artifacts directory., type: path, required: true}
  files: {description: "{relative path: text} of the host's bundle.", type: dict, required: true}
  secrets: {description: Secret values to mask wherever they appear (vault values)., type: list, elements: raw, default: []}
  host: {description: The host (default the task's inventory_hostname)., type: str}
attributes:
  check_mode: {support: full, description: Writes the controller-side bundle in check mode too.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Write the bundle
  llmb_collect_write:
    artifacts_dir: "{{ llmb_artifacts_dir }}"
    files: "{{ __collect.files }}"
  no_log: true
"""

RETURN = r"""
dir: {description: The host's bundle directory., returned: always, type: str}
files: {description: Number of files written., returned: always, type: int}
bytes: {description: Bytes written., returned: always, type: int}
"""
