"""Documentation of the llmb_hostkey action plugin (plugins/action/llmb_hostkey.py): the host key a
node presents against the one known_hosts pins; accept exactly one new key. Runs in the controller
process (no module round trip): recover.yml must say what to do within seconds."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llmb_hostkey
short_description: Check the host key a node presents against known_hosts; pin exactly an accepted new one
description:
  - Runs on the controller. Asks the node for its host keys with C(ssh-keyscan) (argv, O(timeout_s) seconds) and compares them with what the known_hosts file
    of the connection pins (C(-o UserKnownHostsFile=) in O(ssh_args), else C(~/.ssh/known_hosts)).
  - A pinned key passes. An unknown or changed key fails at once with the presented key's SHA256
    fingerprint and the one way to accept it (O(accept) with that fingerprint), unless O(accept)
    is one of the fingerprints the node presents now; then this host's entries of the file are
    replaced by that key (atomically; other hosts' lines untouched) and a stale SSH control master
    to the address is closed.
version_added: "0.1.0"
author: llm-bringup
options:
  host: {description: Inventory name of the node., type: str, required: true}
  address: {description: Address ssh connects to (ansible_host)., type: str, required: true}
  port: {description: SSH port., type: int, default: 22}
  user: {description: SSH user (to close a stale control master)., type: str}
  ssh_args: {description: The connection's extra ssh arguments (ansible_ssh_common_args and ansible_ssh_extra_args)., type: str, default: ""}
  accept: {description: "SHA256 fingerprint of the new key to pin (ssh-keygen -l format, C(SHA256:...)).", type: str}
  inventory: {description: Inventory path, for the command shown in the message., type: str, default: "<inventory>"}
  timeout_s: {description: Seconds ssh-keyscan waits for the node., type: int, default: 5}
  control_path: {description: ControlPath of Ansible's SSH connections (ansible.cfg)., type: str, default: "~/.ansible/cp/%C"}
attributes:
  check_mode: {support: full, description: Reports the key it would pin without writing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Host key of the node to recover
  llmb_hostkey:
    host: node2
    address: 10.0.0.12
    ssh_args: "-o UserKnownHostsFile=/srv/cluster/known_hosts"
    accept: "SHA256:Vn0bJH5gXf2w1m3ylEv0eI8wE0+Q1Qc5eX9y4bJmYtI"
  delegate_to: localhost
"""

RETURN = r"""
status: {description: "pinned (known key), accepted (new key pinned now).", type: str, returned: success}
fingerprint: {description: Fingerprint of the presented key that is pinned now., type: str, returned: success}
known_hosts: {description: The known_hosts file checked., type: str, returned: always}
presented: {description: "The node's keys: [{type, fingerprint}].", type: list, returned: always}
"""
