#!/usr/bin/python
"""Write report.json, report.md and report.html for a run directory."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_report
short_description: Aggregate per-host stage results of a run into report.json, report.md and report.html
description:
  - Reads C(<run_dir>/<stage>/<host>.json) written by the stages and writes C(report.json),
    C(report.md) and a self-contained C(report.html) atomically in C(run_dir). Runs on the controller.
  - The verdict is computed from every expected (stage, host) result (the deployment's hosts for
    each of O(expected_stages); only the API hosts for bench and accuracy); a missing one counts as failed.
options:
  run_dir: {description: The run's artifacts directory., type: path, required: true}
  expected_stages:
    description: Stages the run was to complete on its hosts (site.yml passes all of them); default the stages that recorded any result.
    type: list
    elements: str
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
report: {description: "The aggregate (ok, verdict, failed, endpoint, stages, results, topology, weights, serve, bench, accuracy).", type: dict, returned: always}
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.report import STAGE_ORDER, write_report  # noqa: E402


def main():
    m = AnsibleModule(argument_spec=dict(run_dir=dict(type="path", required=True),
                                         expected_stages=dict(type="list", elements="str")),
                      supports_check_mode=False)
    if not os.path.isdir(m.params["run_dir"]):
        m.fail_json(msg=f"report: no results directory {m.params['run_dir']} (did any stage run?)")
    bad = [s for s in m.params["expected_stages"] or [] if s not in STAGE_ORDER]
    if bad:
        m.fail_json(msg=f"report: expected_stages {bad}: expected stages of {STAGE_ORDER}; fix llmb_report_stages")
    rep = write_report(m.params["run_dir"], m.params["expected_stages"])
    m.exit_json(changed=False, report=rep)


if __name__ == "__main__":
    main()
