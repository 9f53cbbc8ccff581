"""Documentation of the llmb_verify_fabric action plugin (plugins/action/llmb_verify_fabric.py)."""

DOCUMENTATION = r"""
---
module: llmb_verify_fabric
short_description: Judge the cross-node fabric probes and record the working RDMA rails
description:
  - Reads every host's C(ib_write_bw) probe (each rail, client to the next host's server) and the
    launcher's C(all_reduce_perf) run (C(NCCL_DEBUG=INFO)), and checks them with the platform
    profile's thresholds (C(fabric.*), C(rdma.rate_gbps)) - rails down, slow rails, the transport NCCL
    used (IB / RoCE vs TCP sockets), the rails NCCL opened, the all-reduce bus bandwidth.
  - Writes C(<artifacts_dir>/verify/fabric.json); unless in check mode, records each host's working
    rails (and the RoCE GID index) in C(<inventory_dir>/host_vars/<host>/llmb_rdma.yml), which the
    planner turns into C(NCCL_IB_HCA) / C(NCCL_IB_GID_INDEX).
  - Never fails; M(llmb_verify_report) lists its failed checks with every host's.
version_added: "0.1.0"
author: llm-bringup
options:
  platform: {description: Platform profile name., type: str, required: true}
  profile_overrides: {description: Mapping deep-merged over the profile., type: dict, default: {}}
  artifacts_dir: {description: Results directory on the controller., type: path, required: true}
  platforms_dir: {description: Profile directory., type: path}
  hosts: {description: The nodes in ring order., type: list, elements: str, required: true}
  result_var: {description: Registered llmb_verify result of each host., type: str, default: __verify_result}
  ibbw_var: {description: Registered ib_write_bw probe of each host., type: str, default: __verify_fabric_ibbw}
  allreduce_var: {description: Registered all-reduce probe of the launcher., type: str, default: __verify_fabric_allreduce}
  hccn_ping_var: {description: "Registered Ascend NPU ping probe of each host (hccn_tool -ping to its peer NPUs).", type: str, default: __verify_fabric_hccn_ping}
  record_rails: {description: Write host_vars/<host>/llmb_rdma.yml., type: bool, default: true}
  rdma: {description: "Whether the RDMA part (ib_write_bw, all-reduce) was in play; false: no all-reduce skip is reported.", type: bool, default: true}
  allreduce_skipped: {description: Why the all-reduce did not run (reported as a skipped check)., type: str, default: ""}
attributes:
  check_mode: {support: full, description: Nothing is written to the inventory in check mode.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Judge the fabric probes
  llmb_verify_fabric:
    platform: "{{ verify_platform }}"
    artifacts_dir: "{{ _verify_artifacts_dir }}"
    hosts: "{{ ansible_play_hosts }}"
  run_once: true
  register: __verify_fabric
"""

RETURN = r"""
checks: {description: Per host, the fabric checks (id / ok / expected / found / hint)., returned: always, type: dict}
failed_checks: {description: Per host, the failed fabric checks., returned: always, type: dict}
rails: {description: Per host, llmb_rdma_rails and llmb_rdma_gid_index., returned: always, type: dict}
recorded: {description: host_vars files written., returned: always, type: list}
result_file: {description: Path of fabric.json., returned: always, type: str}
"""
