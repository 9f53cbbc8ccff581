"""Documentation of the llmb_verify_bandwidth action plugin (plugins/action/llmb_verify_bandwidth.py)."""

DOCUMENTATION = r"""
---
module: llmb_verify_bandwidth
short_description: Compare a bandwidth probe's output with the platform profile's thresholds
description:
  - Parses the output of nccl-tests C(all_reduce_perf) or of the verify role's torch probe
    (C(gpuA->gpuB GB/s X), C(allreduce busbw GB/s Y)) and checks it against C(bandwidth.p2p_gbps) and
    C(bandwidth.allreduce_busbw_gbps) of the profile; writes C(<artifacts_dir>/verify/<host>.bandwidth.json).
  - Never fails; M(llmb_verify_report) includes its failed checks in the play's one summary.
version_added: "0.1.0"
author: llm-bringup
options:
  output: {description: Standard output of the probe., type: str, default: ""}
  rc: {description: Exit status of the probe., type: int, default: 0}
  platform: {description: Platform profile name., type: str, required: true}
  profile_overrides: {description: Mapping deep-merged over the profile., type: dict, default: {}}
  artifacts_dir: {description: Results directory on the controller., type: path, required: true}
  platforms_dir: {description: Profile directory., type: path}
attributes:
  check_mode: {support: full, description: Runs on the controller only.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Compare the measured bandwidth with the profile
  llmb_verify_bandwidth:
    output: "{{ __verify_bw_probe.stdout }}"
    rc: "{{ __verify_bw_probe.rc }}"
    platform: "{{ verify_platform }}"
    artifacts_dir: "{{ _verify_artifacts_dir }}"
  register: __verify_bandwidth
"""

RETURN = r"""
checks: {description: Bandwidth checks (id / ok / expected / found / hint)., returned: always, type: list}
ok: {description: Every bandwidth check passed., returned: always, type: bool}
result_file: {description: Path of the host's bandwidth JSON., returned: always, type: str}
"""
