#!/usr/bin/python
"""Preflight's one call per node: its minimal facts, its NVIDIA driver and a C compiler (llmb_preflight action)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_preflight
short_description: What preflight reads of a node, in one call
description:
  - Gathers the node's minimal facts with Ansible's own collectors (the C(setup) module's C(gather_subset=min)),
    and where asked reads the NVIDIA driver version (C(nvidia-smi --query-gpu=driver_version
    --format=csv,noheader)) and looks for a C compiler (cc, gcc or clang on the PATH). Changes nothing.
  - The action plugin of the same name judges the result on the controller (llmbctl.nodeos.preflight_problems).
options:
  driver: {description: Read the NVIDIA driver version., type: bool, default: false}
  compiler: {description: Look for a C compiler., type: bool, default: false}
attributes:
  check_mode: {support: full, description: reads only.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Node facts, driver and compiler
  llmb_preflight:
    driver: true
    compiler: false
"""

RETURN = r"""
ansible_facts: {description: The minimal facts (as setup's gather_subset=min)., type: dict, returned: always}
driver_query: {description: "nvidia-smi's rc, stdout and stderr (rc 127: no nvidia-smi)", type: dict, returned: when driver}
compiler: {description: The C compiler's path, or null when none is found., type: str, returned: when compiler}
"""

import shutil  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.facts import ansible_collector, default_collectors  # noqa: E402
from ansible.module_utils.facts.namespace import PrefixFactNamespace  # noqa: E402

MINIMAL = frozenset(["apparmor", "caps", "cmdline", "date_time", "distribution", "dns", "env", "fips", "local", "lsb",
                     "pkg_mgr", "platform", "python", "selinux", "service_mgr", "ssh_pub_keys", "user"])
SMI_ARGV = ["--query-gpu=driver_version", "--format=csv,noheader"]


def main():
    m = AnsibleModule(argument_spec=dict(driver=dict(type="bool", default=False),
                                         compiler=dict(type="bool", default=False)),
                      supports_check_mode=True)
    collector = ansible_collector.get_ansible_collector(
        all_collector_classes=default_collectors.collectors,
        namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
        filter_spec=[], gather_subset=["min"], gather_timeout=10, minimal_gather_subset=MINIMAL)
    out = {"changed": False, "ansible_facts": collector.collect(module=m)}
    if m.params["driver"]:
        smi = m.get_bin_path("nvidia-smi")
        if smi is None:
            out["driver_query"] = {"rc": 127, "stdout": "", "stderr": "nvidia-smi: not found"}
        else:
            rc, so, se = m.run_command([smi] + SMI_ARGV)
            out["driver_query"] = {"rc": rc, "stdout": so, "stderr": se}
    if m.params["compiler"]:
        out["compiler"] = next((p for p in map(shutil.which, ("cc", "gcc", "clang")) if p), None)
    m.exit_json(**out)


if __name__ == "__main__":
    main()
