"""Documentation of the llmb_collect_pack action plugin (plugins/action/llmb_collect_pack.py)."""

DOCUMENTATION = r"""
---
module: llmb_collect_pack
short_description: Pack the cluster's support bundles into one archive with an index page, manifest and checksums
description:
  - >-
    Makes C(<artifacts_dir>/llmb-collect-<run_id>.tar.gz): index.html, MANIFEST.json, SHA256SUMS,
    deployment.json, verify/<host>/ (the verify bundle hwfacts --bundle reads) and hosts/<host>/
    (llmb_collect_write's files), every file masked again by the one secret rule. Runs on the controller.
version_added: "0.1.0"
author: llm-bringup
options:
  artifacts_dir: {description: The run's artifacts directory., type: path, required: true}
  run_id: {description: The run id (names the archive)., type: str, required: true}
  hosts: {description: The hosts whose bundles to pack., type: list, elements: str, required: true}
  secrets: {description: Secret values to mask wherever they appear (vault values)., type: list, elements: raw, default: []}
attributes:
  check_mode: {support: full, description: Writes the controller-side archive in check mode too.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Pack
  llmb_collect_pack: {artifacts_dir: "{{ llmb_artifacts_dir }}", run_id: "{{ llmb_run_id }}", hosts: [node1, node2]}
"""

RETURN = r"""
archive: {description: Path of the archive., returned: always, type: str}
files: {description: Files in the archive., returned: always, type: int}
bytes: {description: Size of the archive., returned: always, type: int}
"""
