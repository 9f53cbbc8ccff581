#!/usr/bin/python
"""accel_probe: run a node's accelerator and host probe commands in one call, return raw outputs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: accel_probe
short_description: Run the accelerator and host probe commands of a node in one call
description:
  - Detects the accelerator vendor by which management tool exists (C(nvidia-smi), C(npu-smi),
    C(amd-smi) / C(rocm-smi)) and runs every probe command for it, plus the host probes, in
    parallel threads with a timeout each.
  - "NVIDIA: C(nvidia-smi -q -x), C(--query-gpu ... --format=csv), C(topo -m), C(nvlink -s),
    C(/proc/driver/nvidia/version), C(systemctl is-active nvidia-fabricmanager), a scan of /proc for
    C(nv-fabricmanager), and a CUDA-init probe (cuInit + cuDeviceGetCount through ctypes on
    libcuda.so.1, in a child process) when that library exists."
  - "Ascend: C(npu-smi info), C(npu-smi info -t topo), /usr/local/Ascend/driver/version.info, and
    C(hccn_tool -i N -link|-ip|-net_health -g) for every device."
  - "AMD: C(amd-smi static|topology|list --json) and C(rocm-smi --showtopo)."
  - "Host: C(numactl -H), C(lscpu -J), /proc/sys/kernel/numa_balancing, C(ibstat) when present, and
    the accelerators' and RDMA NICs' PCI NUMA node / local CPUs from sysfs."
  - Returns the raw outputs and exit status; it never parses them (the controller does, with the same
    parsers that C(scripts/hwfacts) uses) and never changes anything on the node.
version_added: "0.1.0"
author: llm-bringup
options:
  vendor:
    description: Accelerator vendor; C(auto) detects it from the tools present.
    type: str
    default: auto
    choices: [auto, nvidia, amd, ascend, none]
  timeout:
    description: Seconds each probe command may run before it is killed (reported as exit status 124).
    type: int
    default: 60
  probes:
    description: Run only the probes of these names (default all of the vendor's and the host's).
    type: list
    elements: str
  hccn_queries:
    description: Which C(hccn_tool -i N ... -g) queries to run for every Ascend device.
    type: list
    elements: str
    default: [link, ip, net_health]
    choices: [link, ip, net_health, gateway, netdetect]
  hccn_devices:
    description: Ascend device ids for C(hccn_tool -i); default the /dev/davinciN present, else the chips C(npu-smi info) lists.
    type: list
    elements: int
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same in check mode.
  diff_mode:
    support: none
notes:
  - Runs on the managed node with its python3 (3.8 or later), standard library only.
"""

EXAMPLES = r"""
- name: Probe the node's accelerators
  accel_probe:
  register: __verify_probe

- name: Only topology and NVLink state, 20 s per command
  accel_probe:
    vendor: nvidia
    probes: [topo, nvlink-s]
    timeout: 20
"""

RETURN = r"""
vendor:
  description: Vendor detected (or given).
  returned: always
  type: str
  sample: nvidia
host:
  description: The node's hostname.
  returned: always
  type: str
tools:
  description: Path of each known tool, or null when absent.
  returned: always
  type: dict
probes:
  description: One entry per probe run.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Probe name (also the bundle file name), type: str, sample: topo}
    kind: {description: Parser kind for the output, type: str, sample: nvidia-smi-topo}
    cmd: {description: Command line run, type: str, sample: nvidia-smi topo -m}
    rc: {description: Exit status (127 tool missing, 124 timed out), type: int}
    stdout: {description: Standard output, type: str}
    stderr: {description: Last 4000 characters of standard error, type: str}
    ok_rcs: {description: Exit statuses that are answers, not failures, type: list}
    duration_s: {description: Seconds the probe took, type: float}
duration_s:
  description: Seconds all probes took together.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402 -- after the documentation, as Ansible modules do
from ansible.module_utils.llmb.hw.probes import run_probes  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "vendor": {"type": "str", "default": "auto", "choices": ["auto", "nvidia", "amd", "ascend", "none"]},
            "timeout": {"type": "int", "default": 60},
            "probes": {"type": "list", "elements": "str"},
            "hccn_devices": {"type": "list", "elements": "int"},
            "hccn_queries": {"type": "list", "elements": "str", "default": ["link", "ip", "net_health"],
                             "choices": ["link", "ip", "net_health", "gateway", "netdetect"]},
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {module.params['timeout']}")
    result = run_probes(
        vendor=module.params["vendor"],
        timeout=module.params["timeout"],
        only=module.params["probes"],
        devices=module.params["hccn_devices"],
        hccn_queries=module.params["hccn_queries"],
    )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
