#!/usr/bin/python
"""The port check before serve: stand-in listeners, TCP connects between the nodes, stop."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_port_check
short_description: Check that every node reaches every port the launch plan uses on the other nodes
description:
  - C(listen) opens a stand-in listener on every port of this node's plan that nothing listens on yet
    (bound to the node's cluster address, held by a detached process until C(stop) or I(hold_s)) and
    reports ports held already, by the plan's own service (a later run) or by something else (taken).
  - C(probe) connects to every port of the other nodes' plans (I(targets)) at once and reports each
    pair that fails, naming both hosts, the address, the port and the service.
  - C(stop) ends the stand-in listeners, before the services start.
options:
  mode: {description: listen, probe or stop., type: str, required: true, choices: [listen, probe, stop]}
  listeners: {description: This node's listeners (llmb_port_listeners)., type: list, elements: dict, default: []}
  targets: {description: The other nodes' listeners (llmb_port_targets)., type: list, elements: dict, default: []}
  host: {description: This node's inventory name (for messages)., type: str, required: true}
  timeout_s: {description: Connect timeout per port., type: float, default: 3}
  hold_s: {description: Longest time the stand-in listeners stay up., type: float, default: 300}
  pidfile: {description: "Where the stand-in listener process is recorded; default /run/llmb-port-check-I(host).pid, a file per inventory host (hosts may share a filesystem).", type: path}
attributes:
  check_mode: {support: full, description: Opens and closes sockets only; changes nothing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Stand-in listeners
  llmb_port_check: {mode: listen, host: "{{ inventory_hostname }}", listeners: "{{ own }}"}
"""

RETURN = r"""
opened: {description: Ports given a stand-in listener (listen)., type: list, returned: listen}
in_use: {description: Ports already held by the plan's own service (listen)., type: list, returned: listen}
taken: {description: Ports held by something else (listen)., type: list, returned: listen}
starting: {description: Ports of a service running or starting that does not hold them yet; not probed (listen)., type: list, returned: listen}
results: {description: One record per target with ok and message (probe)., type: list, returned: probe}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb import ports  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", required=True, choices=["listen", "probe", "stop"]),
            listeners=dict(type="list", elements="dict", default=[]),
            targets=dict(type="list", elements="dict", default=[]),
            host=dict(type="str", required=True),
            timeout_s=dict(type="float", default=3.0),
            hold_s=dict(type="float", default=300.0),
            pidfile=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = m.params
    pidfile = p["pidfile"] or ports.pidfile_for(p["host"])
    if p["mode"] == "listen":
        ports.stop_listeners(pidfile)  # a run interrupted before its stop
        out = ports.hold_listeners(p["listeners"], p["hold_s"], pidfile)
        m.exit_json(changed=False, host=p["host"], **out)
    if p["mode"] == "probe":
        results = ports.probe(p["host"], p["targets"], p["timeout_s"])
        m.exit_json(changed=False, results=results, failed_pairs=sum(not r["ok"] for r in results))
    m.exit_json(changed=False, stopped=ports.stop_listeners(pidfile))


if __name__ == "__main__":
    main()
