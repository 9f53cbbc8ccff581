#!/usr/bin/python
"""Build the llmb-bindto preload on the node and prove it works (llmb.bindto)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_bindto
short_description: Build the preload that binds an engine's every-interface listeners to the cluster address
description:
  - "Builds the library from I(source) with the node's C compiler, loads it into a child Python that binds
    0.0.0.0 and :: on listed ports and must find both on 127.0.0.1, then renames it to I(dest) with a stamp
    of the source beside it. The same source again changes nothing."
options:
  source: {description: The library's C source (roles/serve/files/llmb-bindto.c)., type: str, required: true}
  dest: {description: Where the library goes (the plan's LD_PRELOAD path)., type: path, required: true}
  host: {description: This node's inventory name (for messages)., type: str, required: true}
attributes:
  check_mode: {support: full, description: Says whether a build would happen (and that a compiler is there); builds nothing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- llmb_bindto:
    source: "{{ lookup('ansible.builtin.file', 'llmb-bindto.c') }}"
    dest: /opt/llmb/lib/llmb-bindto.so
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
path: {description: The library., type: str, returned: always}
stamp: {description: sha256 of the source and compiler flags it was built from., type: str, returned: always}
compiler: {description: The compiler used (null when nothing was built)., type: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb import bindto  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            source=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            host=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    try:
        result = bindto.ensure(m.params["source"], m.params["dest"], check=m.check_mode)
    except bindto.BindtoError as exc:
        m.fail_json(msg=f"{m.params['host']}: {exc}", dest=m.params["dest"])
    except OSError as exc:
        m.fail_json(msg=f"{m.params['host']}: cannot write {m.params['dest']}: {exc}", dest=m.params["dest"])
    m.exit_json(**result)


if __name__ == "__main__":
    main()
