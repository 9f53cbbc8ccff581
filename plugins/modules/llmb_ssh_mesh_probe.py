#!/usr/bin/python
"""Ansible module: what the SSH mesh needs to know about a node (read-only)."""
# ruff: noqa: E402  (Ansible module layout: imports follow DOCUMENTATION, EXAMPLES and RETURN)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llmb_ssh_mesh_probe
short_description: Read a node's host name, host keys, a user's home and who listens on given ports
description:
  - Read-only probe for the C(ssh_mesh) role. Returns the node's host name, the public host keys
    named in O(host_keys), the home directory and ids of O(user), and the processes listening on
    each port in O(ports) (read from C(/proc), no C(ss) needed).
  - Fails, naming the file, when a host key file is missing or does not hold an OpenSSH public key.
version_added: "0.1.0"
author: llm-bringup
options:
  user:
    description: Account whose home directory and ids are returned.
    type: str
    default: root
  host_keys:
    description: Public host key files to read (all must exist).
    type: list
    elements: path
    default: [/etc/ssh/ssh_host_ed25519_key.pub]
  optional_host_keys:
    description: Public key files read when they exist (listed in RV(missing_host_keys) otherwise).
    type: list
    elements: path
    default: []
  ports:
    description: TCP ports whose listeners are reported.
    type: list
    elements: int
    default: []
attributes:
  check_mode: {support: full, description: Only reads.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Read host keys and who holds port 2233
  llmb_ssh_mesh_probe:
    host_keys: [/etc/ssh/ssh_host_ed25519_key.pub, /etc/llmb/ssh-mesh/ssh_host_ed25519_key.pub]
    ports: [2233]
  register: __ssh_mesh_probe
"""

RETURN = r"""
hostname:
  description: The node's host name (C(hostname) output).
  type: str
  returned: always
home:
  description: Home directory of O(user).
  type: str
  returned: always
uid:
  description: User id of O(user).
  type: int
  returned: always
gid:
  description: Primary group id of O(user).
  type: int
  returned: always
host_keys:
  description: Path -> C(type base64) of each host key read (comment dropped).
  type: dict
  returned: always
missing_host_keys:
  description: The O(optional_host_keys) that do not exist.
  type: list
  elements: str
  returned: always
listeners:
  description: Port (as a string) -> list of C({pid, comm, cmdline}) listening on it; empty list when free.
  type: dict
  returned: always
"""

import os
import pwd
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.llmb.sshmesh import MeshError, listeners, parse_public_key


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "user": {"type": "str", "default": "root"},
            "host_keys": {"type": "list", "elements": "path", "default": ["/etc/ssh/ssh_host_ed25519_key.pub"]},
            "optional_host_keys": {"type": "list", "elements": "path", "default": []},
            "ports": {"type": "list", "elements": "int", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    host = socket.gethostname()
    try:
        pw = pwd.getpwnam(p["user"])
    except KeyError:
        module.fail_json(msg=f"{host}: user {p['user']!r} does not exist; create it or set ssh_mesh_user")
    keys = {}
    missing = [path for path in p["optional_host_keys"] if not os.path.exists(path)]
    for path in p["host_keys"] + [k for k in p["optional_host_keys"] if k not in missing]:
        try:
            with open(path, encoding="ascii", errors="replace") as fh:
                text = fh.read()
        except OSError as err:
            module.fail_json(msg=f"{host}: host key {path} cannot be read ({err.strerror}); "
                                 "sshd generates it with `ssh-keygen -A`")
        try:
            ktype, blob, _ = parse_public_key(text)
        except MeshError as err:
            module.fail_json(msg=f"{host}: {path}: {err}")
        keys[path] = f"{ktype} {blob}"
    module.exit_json(
        changed=False,
        hostname=host,
        home=pw.pw_dir,
        uid=pw.pw_uid,
        gid=pw.pw_gid,
        host_keys=keys,
        missing_host_keys=missing,
        listeners={str(port): listeners(port) for port in p["ports"]},
    )


if __name__ == "__main__":
    main()
