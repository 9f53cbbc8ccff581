#!/usr/bin/python
"""Create the serve stage's compile cache directories and say what each held before its start (llmb.compile_cache)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_compile_cache
short_description: Create each engine service's compile and kernel cache directory, saying cold, warm or peer
description:
  - "For each service in I(dirs) (the plan's cache_dir), says what the directory held before the serve stage
    starts it (cold: missing or no file; warm: this node's engine wrote files; peer: copied from another node,
    a marker beside them), then creates it when missing (I(mode)). One call for every service of the host."
options:
  dirs: {description: "Service name to its cache directory (absolute).", type: dict, required: true}
  state:
    description: "C(present): create and describe (before the start). C(adopted): after the group started whole,
      a cache of O(dirs) filled from a peer becomes this node's own (warm from then on; its marker kept as
      C(.llmb-cache-peer.adopted.json))."
    type: str
    choices: [present, adopted]
    default: present
  mode: {description: Mode of a directory it creates., type: str, default: "0755"}
  host: {description: This node's inventory name (for messages)., type: str, required: true}
attributes:
  check_mode: {support: full, description: Says the states and which directories it would create; creates nothing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- llmb_compile_cache:
    dirs: {llmb-vllm: /var/cache/llmb/compile/llmb-vllm}
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
state: {description: "Service name to cold, warm or peer (before this run's start).", type: dict, returned: always}
created: {description: Directories created (in check mode, that would be)., type: list, returned: always}
adopted: {description: Directories adopted (state=adopted; in check mode, that would be)., type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb import compile_cache  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            dirs=dict(type="dict", required=True),
            state=dict(type="str", default="present", choices=["present", "adopted"]),
            mode=dict(type="str", default="0755"),
            host=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    host = m.params["host"]
    try:
        mode = int(m.params["mode"], 8)
        if not 0 <= mode <= 0o7777:
            raise ValueError
    except ValueError:
        m.fail_json(msg=f"{host}: mode: expected an octal file mode such as 0755, found {m.params['mode']!r}")
    if m.params["state"] == "adopted":
        try:
            adopted = compile_cache.adopt(m.params["dirs"], check=m.check_mode)
        except ValueError as exc:
            m.fail_json(msg=f"{host}: {exc}")
        except OSError as exc:
            m.fail_json(msg=f"{host}: cannot adopt a compile cache filled from a peer: {exc}")
        m.exit_json(changed=bool(adopted), state={}, created=[], adopted=adopted)
    try:
        result = compile_cache.prepare(m.params["dirs"], mode, check=m.check_mode)
    except ValueError as exc:
        m.fail_json(msg=f"{host}: {exc}")
    except OSError as exc:
        m.fail_json(msg=f"{host}: cannot create a compile cache directory: {exc}")
    m.exit_json(changed=bool(result["created"]), adopted=[], **result)


if __name__ == "__main__":
    main()
