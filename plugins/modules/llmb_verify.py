"""Documentation of the llmb_verify action plugin (plugins/action/llmb_verify.py); no code runs here."""

DOCUMENTATION = r"""
---
module: llmb_verify
short_description: Probe a node's accelerators and compare them with a platform profile
description:
  - Runs M(accel_probe) on the node (one module call), then on the controller parses the raw outputs
    with llmb.hw, compares the facts with C(data/platforms/<platform>.yml) and writes
    C(<artifacts_dir>/verify/<inventory_hostname>.json) (ok, checks with id / expected / found / hint,
    the facts, parse warnings).
  - Deviations do not fail the task; M(llmb_verify_report) fails once at the end of the play with
    every deviation of every host.
  - With I(bundle_dir) it also writes every raw output as C(<bundle_dir>/<host>/<probe>.txt) (the
    capture format C(scripts/hwfacts --bundle) reads); with I(verify=false) it only collects.
version_added: "0.1.0"
author: llm-bringup
options:
  platform: {description: Platform profile name (data/platforms/NAME.yml); required unless verify is false., type: str}
  artifacts_dir: {description: Directory on the controller for results (results go to its verify/ subdirectory)., type: path}
  run_id: {description: Run identifier recorded in the result., type: str}
  profile_overrides:
    description: Mapping deep-merged over the profile (for example C({"rdma":{"nics":4}})).
    type: dict
    default: {}
  waive: {description: Check id patterns (fnmatch) reported but not failing (marked waived)., type: list, elements: str, default: []}
  timeout: {description: Seconds per probe command on the node., type: int, default: 60}
  vendor: {description: Vendor, or auto., type: str, default: auto, choices: [auto, nvidia, amd, ascend, none]}
  verify: {description: Compare with the profile (false only collects)., type: bool, default: true}
  bundle_dir: {description: Also write the raw outputs under this controller directory, one subdirectory per host., type: path}
  platforms_dir: {description: Profile directory (default the repository's data/platforms)., type: path}
attributes:
  check_mode: {support: full, description: The node is only read; results are written on the controller in check mode too.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Verify the node against its platform profile
  llmb_verify:
    platform: "{{ llmb_platform }}"
    artifacts_dir: "{{ playbook_dir }}/../artifacts/{{ llmb_run_id }}"
  register: __verify_result
"""

RETURN = r"""
ok: {description: Every check passed (waived ones count as passed)., returned: when verify, type: bool}
platform: {description: Profile name., returned: when verify, type: str}
result_file: {description: Path of the host's result JSON on the controller., returned: when verify, type: str}
counts: {description: Totals (total / failed / waived / skipped)., returned: when verify, type: dict}
failed_checks: {description: The failed checks (id / expected / found / hint)., returned: when verify, type: list}
bundle: {description: Directory of the raw outputs, when bundle_dir is set., returned: when bundle_dir, type: str}
"""
