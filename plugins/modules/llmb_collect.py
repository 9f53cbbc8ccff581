#!/usr/bin/python
"""One node's part of a support bundle (llmb collect): units, journals, engine and kernel logs, versions."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_collect
short_description: Read this node's part of a support bundle (units, journals, engine logs, device errors, versions)
description:
  - Returns C(files), {relative path - text} - the unit files of the plan's services and the group's
    units, each unit's journal since the last boot (the last O(max_bytes)), container logs, kernel
    lines with Xid and other device errors, versions of driver, firmware, kernel, OS, engine and
    packages (llmb.collect.gather).
  - Only reads. The caller runs it with no_log and masks secrets on the controller before writing
    (llmb_collect_write, llmbctl.secrets.redact_text).
options:
  units: {description: Units to read (name or name.service / .target)., type: list, elements: str, default: []}
  containers: {description: Containers whose log to read., type: list, elements: str, default: []}
  max_bytes: {description: Size cap of each journal and log (its last bytes are kept)., type: int, default: 2000000}
  version_command: {description: The engine's version command (host install)., type: list, elements: str, default: []}
  venv: {description: The engine venv (its packages are listed)., type: str}
  vendor: {description: "Accelerator vendor (nvidia: the driver and VBIOS of each device).", type: str}
attributes:
  check_mode: {support: full, description: Only reads.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: This node's part of the bundle
  llmb_collect:
    units: [llmb-ray, llmb-vllm, llmb-group.target]
  register: __collect
  no_log: true
"""

RETURN = r"""
files: {description: "{relative path: text} of the node's bundle (not yet redacted).", type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.collect import gather  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="str", default=[]),
            containers=dict(type="list", elements="str", default=[]),
            max_bytes=dict(type="int", default=2_000_000),
            version_command=dict(type="list", elements="str", default=[]),
            venv=dict(type="str"),
            vendor=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["max_bytes"] < 1000:
        module.fail_json(msg=f"llmb_collect: max_bytes {p['max_bytes']}: expected 1000 or more")

    def run(argv):
        try:
            return module.run_command(argv, handle_exceptions=False)
        except OSError as e:  # not there, not executable: a finding, not a module failure
            return 127, "", f"{argv[0]}: {e}"

    files = gather(run, p["units"], p["containers"], p["max_bytes"], p["version_command"], p["venv"], p["vendor"])
    module.exit_json(changed=False, files=files)


if __name__ == "__main__":
    main()
