#!/usr/bin/python
"""Ansible module: this node's row of the SSH all-pairs matrix."""
# ruff: noqa: E402  (Ansible module layout: imports follow DOCUMENTATION, EXAMPLES and RETURN)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llmb_ssh_mesh_check
short_description: SSH from this node to every other node with BatchMode, in parallel
description:
  - Runs C(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes ... <address> hostname) to each of
    O(targets) at once (up to O(parallel) at a time) and returns one result per target (this node's
    row of the cluster's ordered-pair matrix). It never changes anything. Failed pairs are data
    (RV(failed_pairs)) unless O(fail_on_error) is set, in which case the module fails with one message per
    failed pair, naming both ends, and still returns RV(pairs).
  - Transient failures caused by sshd's MaxStartups limit (many nodes connecting at once) are
    retried up to O(attempts) times; refusals, timeouts and key errors are not.
version_added: "0.1.0"
author: llm-bringup
options:
  targets:
    description: Nodes to reach, each with C(name) (for the report) and C(address) (what ssh connects to), and
      optionally C(role), why the pair is checked (C(launcher), C(tree), C(all)), repeated in failures.
    type: list
    elements: dict
    required: true
  port:
    description: SSH port on the targets.
    type: int
    default: 22
  user:
    description: Remote user (C(-l)); empty for ssh's default.
    type: str
    default: ""
  config:
    description: ssh client configuration file (C(-F)); empty for the user's own.
    type: path
  timeout:
    description: ConnectTimeout in seconds; an attempt may take twice that plus 10 s in all.
    type: int
    default: 10
  parallel:
    description: How many connections this node opens at once.
    type: int
    default: 16
  attempts:
    description: Attempts per pair for transient errors.
    type: int
    default: 3
  command:
    description: Remote command; its output is returned per pair.
    type: str
    default: hostname
  me:
    description: This node's name in O(order); targets are tried starting after it (spreads load).
    type: str
    default: ""
  order:
    description: All node names in one fixed order (same on every node).
    type: list
    elements: str
    default: []
  fail_on_error:
    description: Fail when any pair fails (the message names this node, each target and the cause).
    type: bool
    default: false
attributes:
  check_mode: {support: full, description: Only connects and runs O(command); the same in check mode.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: This node's row of the matrix
  llmb_ssh_mesh_check:
    targets:
      - {name: n2, address: 10.0.0.2}
      - {name: n3, address: 10.0.0.3}
    config: /etc/llmb/ssh-mesh/ssh_config
    port: 2233
  register: __ssh_mesh_row
"""

RETURN = r"""
hostname:
  description: Host name of this node.
  type: str
  returned: always
pairs:
  description: One result per target (C(target), C(address), C(port), C(ok), C(rc), C(output), C(error), C(hint), C(attempts), C(seconds)), in O(targets) order.
  type: list
  elements: dict
  returned: always
failed_pairs:
  description: Number of targets not reached.
  type: int
  returned: always
seconds:
  description: Wall time of the whole row.
  type: float
  returned: always
"""

import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.llmb.sshmesh import check_pairs, failures, rotate


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "targets": {"type": "list", "elements": "dict", "required": True},
            "port": {"type": "int", "default": 22},
            "user": {"type": "str", "default": ""},
            "config": {"type": "path"},
            "timeout": {"type": "int", "default": 10},
            "parallel": {"type": "int", "default": 16},
            "attempts": {"type": "int", "default": 3},
            "command": {"type": "str", "default": "hostname"},
            "me": {"type": "str", "default": ""},
            "order": {"type": "list", "elements": "str", "default": []},
            "fail_on_error": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [t for t in p["targets"] if not t.get("name") or not t.get("address")]
    if bad:
        module.fail_json(msg=f"{socket.gethostname()}: targets need name and address: {bad!r}")
    targets = rotate([{"name": str(t["name"]), "address": str(t["address"]), "role": str(t.get("role") or "")}
                      for t in p["targets"]], p["me"], p["order"])
    t0 = time.monotonic()
    results = check_pairs(targets, port=p["port"], user=p["user"], config=p["config"], timeout=p["timeout"],
                          parallel=p["parallel"], attempts=p["attempts"], command=p["command"])
    by_name = {r["target"]: r for r in results}
    ordered = [by_name[str(t["name"])] for t in p["targets"]]
    result = {
        "changed": False,
        "hostname": socket.gethostname(),
        "pairs": ordered,
        "failed_pairs": sum(1 for r in ordered if not r["ok"]),
        "seconds": round(time.monotonic() - t0, 3),
    }
    if p["fail_on_error"] and result["failed_pairs"]:
        module.fail_json(msg=" | ".join(failures(p["me"] or result["hostname"], ordered)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
