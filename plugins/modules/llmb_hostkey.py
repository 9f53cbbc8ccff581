#!/usr/bin/python
"""The host key a node presents against the one known_hosts pins; accept exactly one new key."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llmb_hostkey
short_description: Check the host key a node presents against known_hosts; pin exactly an accepted new one
description:
  - Runs on the controller. Asks the node for its host keys with C(ssh-keygen)'s companion
    C(ssh-keyscan) (argv, O(timeout_s) seconds) and compares them with what the known_hosts file
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

import os  # noqa: E402
import subprocess  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.fsutil import atomic_write_text  # noqa: E402
from ansible.module_utils.llmb.hostkeys import (  # noqa: E402
    HostKeyError,
    check_fingerprint,
    choose,
    decide,
    guidance,
    known_hosts_files,
    lookup_name,
    parse_keyscan,
    pinned,
    repin,
)


def main():
    m = AnsibleModule(
        argument_spec=dict(
            host=dict(type="str", required=True), address=dict(type="str", required=True),
            port=dict(type="int", default=22), user=dict(type="str"), ssh_args=dict(type="str", default=""),
            accept=dict(type="str"), inventory=dict(type="str", default="<inventory>"),
            timeout_s=dict(type="int", default=5), control_path=dict(type="str", default="~/.ansible/cp/%C"),
        ),
        supports_check_mode=True,
    )
    p = m.params
    host, addr, port = p["host"], p["address"], p["port"]
    try:
        if p["accept"]:
            check_fingerprint(p["accept"])
        files = known_hosts_files(p["ssh_args"])
    except HostKeyError as e:
        m.fail_json(msg=f"recover: {host}: {e}")
    out = {"known_hosts": files[0], "presented": []}
    scan = subprocess.run(["ssh-keyscan", "-T", str(p["timeout_s"]), "-p", str(port), addr],
                          capture_output=True, text=True)
    presented = parse_keyscan(scan.stdout)
    out["presented"] = [{"type": k.type, "fingerprint": k.fingerprint} for k in presented]
    if not presented:
        m.fail_json(msg=f"recover: {host} ({addr} port {port}) presents no SSH host key within {p['timeout_s']} s "
                        f"(ssh-keyscan: {scan.stderr.strip()[-300:] or 'no answer'}): check that the node is up, "
                        "sshd runs and the address in the inventory is right", **out)
    names = [lookup_name(addr, port)] + ([host] if host != addr else [])
    try:
        text = open(files[0]).read() if os.path.exists(files[0]) else ""
    except OSError as e:
        m.fail_json(msg=f"recover: {host}: cannot read {files[0]}: {e}", **out)
    verdict = decide(presented, pinned(text, names[:1]))
    if verdict.status == "pinned":
        m.exit_json(changed=False, status="pinned", fingerprint=next(
            k.fingerprint for k in presented if k in verdict.pinned), **out)
    if not p["accept"]:
        m.fail_json(msg=guidance(host, addr, port, verdict, files, p["inventory"], presented), status=verdict.status,
                    offer=verdict.offer.fingerprint if verdict.offer else None, **out)
    try:
        key = choose(presented, p["accept"])
    except HostKeyError as e:
        m.fail_json(msg=f"recover: {host} ({addr} port {port}): {e}", **out)
    if not m.check_mode:
        os.makedirs(os.path.dirname(os.path.abspath(files[0])), exist_ok=True)
        atomic_write_text(files[0], repin(text, names, key), mode=0o600 if not os.path.exists(files[0])
                          else os.stat(files[0]).st_mode & 0o777)
        # a control master opened to the old machine would carry the next connections: close it
        argv = ["ssh", "-O", "exit", "-o", f"ControlPath={os.path.expanduser(p['control_path'])}", "-p", str(port)]
        if p["user"]:
            argv += ["-l", p["user"]]
        try:
            subprocess.run([*argv, addr], capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            pass  # no master, or it does not answer: the next connection opens a new one
    m.exit_json(changed=True, status="accepted", fingerprint=key.fingerprint, **out)


if __name__ == "__main__":
    main()
