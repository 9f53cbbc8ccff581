"""Documentation of the llmb_verify_report action plugin (plugins/action/llmb_verify_report.py)."""

DOCUMENTATION = r"""
---
module: llmb_verify_report
short_description: Summarise the verify results of every play host and fail once, listing every deviation
description:
  - >-
    Reads each play host's registered M(llmb_verify) result (and M(llmb_verify_bandwidth) result when
    the bandwidth tag ran), writes C(<artifacts_dir>/verify/summary.json), and fails with one message
    listing every failed check of every host as C(host: check: expected X, found Y. hint). Hosts that
    were unreachable or failed before verify are listed too.
  - Run it once per play (C(run_once: true)) after M(llmb_verify).
version_added: "0.1.0"
author: llm-bringup
options:
  artifacts_dir: {description: Same directory as given to llmb_verify., type: path, required: true}
  result_var: {description: Name of the variable llmb_verify registered., type: str, default: __verify_result}
  bandwidth_var: {description: Name of the variable llmb_verify_bandwidth registered., type: str, default: __verify_bandwidth}
  fail: {description: Fail when a host deviates (false only writes the summary)., type: bool, default: true}
attributes:
  check_mode: {support: full, description: Only reads results; writes the summary on the controller.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Fail once with every deviation of every host
  llmb_verify_report:
    artifacts_dir: "{{ _verify_artifacts_dir }}"
  run_once: true
"""

RETURN = r"""
ok: {description: All hosts passed., returned: always, type: bool}
report: {description: One line per failed check., returned: always, type: list}
failed_hosts: {description: Hosts with a failed check or no result., returned: always, type: list}
summary_file: {description: Path of summary.json., returned: always, type: str}
"""
