#!/usr/bin/python
"""Write report.json and report.md for a run directory."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_report
short_description: Aggregate per-host stage results of a run into report.json and report.md
description:
  - Reads C(<run_dir>/<stage>/<host>.json) written by the stages and writes C(report.json) and
    C(report.md) atomically in C(run_dir). Runs on the controller.
options:
  run_dir: {description: The run's artifacts directory., type: path, required: true}
attributes:
  check_mode: {support: none, description: Writes only the run's own report files.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Report
  llmb_report: {run_dir: /srv/llm-bringup/artifacts/20261122T010000Z}
  delegate_to: localhost
"""

RETURN = r"""
report: {description: The aggregate (ok, failed, endpoint, stages)., type: dict, returned: always}
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.report import write_report  # noqa: E402


def main():
    m = AnsibleModule(argument_spec=dict(run_dir=dict(type="path", required=True)), supports_check_mode=False)
    if not os.path.isdir(m.params["run_dir"]):
        m.fail_json(msg=f"report: no results directory {m.params['run_dir']} (did any stage run?)")
    rep = write_report(m.params["run_dir"])
    m.exit_json(changed=False, report=rep)


if __name__ == "__main__":
    main()
