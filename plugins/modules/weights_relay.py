#!/usr/bin/python
"""Ansible module: start or stop the weights relay server of this node (llmb.weights.relay)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.llmb.weights import relay

DOCUMENTATION = r"""
---
module: weights_relay
short_description: Start or stop the relay HTTP server that serves this node's verified weights to its peers
description:
  - With O(state=started), stops a relay unit left by an interrupted run, starts the standard
    library's threading HTTP file server (listen backlog 128) over O(directory) as the transient systemd unit O(unit)
    (C(systemd-run), C(DynamicUser), C(ProtectSystem=strict); unprivileged, read-only), bound to
    O(address):O(port), and waits until it listens. One call instead of three tasks.
  - With O(state=stopped), stops the unit (an absent unit is not an error).
  - Receivers verify every file on arrival against the manifest; the server needs no integrity of its own.
version_added: "0.2.0"
author: llm-bringup
options:
  state:
    description: Whether the server should run.
    type: str
    choices: [started, stopped]
    default: started
  directory:
    description: The model directory to serve (O(state=started)).
    type: path
  address:
    description: Address to bind, the node's cluster address (O(state=started)).
    type: str
  port:
    description: TCP port (O(state=started)).
    type: int
    default: 18090
  unit:
    description: Name of the transient unit.
    type: str
    default: llmb-weights-relay
  timeout:
    description: Seconds to wait until the server listens.
    type: int
    default: 30
attributes:
  check_mode: {support: full, description: Reports changed with the argv it would run; starts or stops nothing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Start the relay server (stopping one left by an interrupted run)
  weights_relay:
    directory: /opt/llmb/models/kimi-k2-thinking
    address: 10.0.0.11
    port: 18090

- name: Stop the relay server
  weights_relay:
    state: stopped
"""

RETURN = r"""
argv:
  description: The systemd-run argv of the server (O(state=started)).
  returned: when state is started
  type: list
  elements: str
listen_seconds:
  description: Seconds from the start until the server accepted a connection.
  returned: when state is started, not in check mode
  type: float
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["started", "stopped"], "default": "started"},
            "directory": {"type": "path"},
            "address": {"type": "str"},
            "port": {"type": "int", "default": 18090},
            "unit": {"type": "str", "default": relay.UNIT},
            "timeout": {"type": "int", "default": 30},
        },
        required_if=[("state", "started", ("directory", "address"))],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "stopped":
            if module.check_mode:
                module.exit_json(changed=True, argv=relay.stop_argv(p["unit"]))
            res = relay.stop(p["unit"])
            # stopping an absent unit (rc 5) changes nothing
            module.exit_json(changed=res["rc"] == 0, **res)
        argv = relay.unit_argv(p["port"], p["address"], p["directory"], p["unit"])
        if module.check_mode:
            module.exit_json(changed=True, argv=argv)
        res = relay.start(p["port"], p["address"], p["directory"], p["unit"], timeout=float(p["timeout"]))
    except relay.RelayError as exc:
        module.fail_json(msg=f"weights relay: {exc}")
    module.exit_json(changed=True, **res)


if __name__ == "__main__":
    main()
