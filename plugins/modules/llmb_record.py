"""Documentation of the llmb_record action plugin (plugins/action/llmb_record.py)."""

DOCUMENTATION = r"""
---
module: llmb_record
short_description: Write this host's result of a stage to the run's artifacts directory
description:
  - >-
    Writes C(<artifacts_dir>/<stage>/<host>.json) on the controller, atomically: C({host, stage,
    ok: true}) updated with O(data). The one writer of per-host results (llmbctl.results); the report
    stage reads them. Results are controller-side state, so it writes in check mode too and never
    reports a change.
  - >-
    Stage serve: the record also keeps C(starts), the host's start history, carried over from its previous
    record and appended with the health waits of O(data)'s C(started_services)
    (llmbctl.serveresult.record_serve); a previous record that cannot be used starts a fresh one, with a
    warning naming the host and the file.
version_added: "0.1.0"
author: llm-bringup
options:
  artifacts_dir: {description: The run's artifacts directory (llmb_artifacts_dir)., type: path, required: true}
  stage: {description: Stage name (directory under artifacts_dir)., type: str, required: true}
  data: {description: Fields of the result (ok may be set to false)., type: dict, default: {}}
  host: {description: Host the result is of (default the task's inventory_hostname)., type: str}
  hosts:
    description: The same result for each of these hosts, in one task (run_once; not with O(host)).
    type: list
    elements: str
    default: []
attributes:
  check_mode: {support: full, description: Writes the controller-side result in check mode too.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Record the result
  llmb_record:
    artifacts_dir: "{{ llmb_artifacts_dir }}"
    stage: serve
    data: {services: [llmb-vllm]}
"""

RETURN = r"""
path: {description: Path of the result file., returned: without hosts, type: str}
paths: {description: Paths of the result files, one per host., returned: with hosts, type: list}
"""
