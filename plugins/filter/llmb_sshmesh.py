"""Filters of the ssh_mesh role (controller side); the logic is llmb.sshmesh.

    line: "{{ pubkey | llmb_ssh_authorized_line(addresses, comment, extra) }}"
    rx:   "{{ pubkey | llmb_ssh_authorized_regexp }}"
    text: "{{ entries | llmb_ssh_known_hosts(header) }}"
    text: "{{ nodes | llmb_ssh_known_hosts_for(22, 2233, ansible_check_mode, header) }}"
    bad:  "{{ addresses | llmb_ssh_not_addresses }}"
    n:    "{{ rows | llmb_ssh_mesh_bad_pairs }}"
    nodes: "{{ hostvars | llmb_ssh_mesh_targets(groups.accel_nodes) }}"           # [{name, address}]
    rows: "{{ hostvars | llmb_ssh_mesh_rows(nodes, '__ssh_mesh_check', port) }}"   # {source: [pairs]}
    text: "{{ rows | llmb_ssh_mesh_matrix(port, pairs, mode) }}"
    pairs: "{{ nodes | llmb_ssh_mesh_pairs(mode, radix) }}"                       # {source: [{target, role}]}
    mine: "{{ targets | llmb_ssh_mesh_my_targets(pairs, inventory_hostname) }}"   # this node's row
    msgs: "{{ pairs | llmb_ssh_mesh_failures(inventory_hostname) }}"
    bad:  "{{ listeners | llmb_ssh_port_conflict(config_path) }}"
    names: "{{ stdout | llmb_mpirun_hostnames }}"
    hosts: "{{ nodes | llmb_mpirun_hosts(slots, launcher_hostname) }}"            # node0's name:1,addr:1
    stale: "{{ hostvars | llmb_ssh_mesh_stale(nodes, known_hosts_text, '__slurped_host_key', 22) }}"  # [lines]
"""

from __future__ import annotations

import base64

from ansible.errors import AnsibleFilterError
from llmb import sshmesh
from llmbctl.plugin import reraise_each


def llmb_ssh_authorized_line(pubkey, addresses, comment="", extra=None):
    return sshmesh.authorized_key_line(str(pubkey), [str(a) for a in addresses], str(comment or ""),
                                       [str(e) for e in extra or []])


def llmb_ssh_authorized_regexp(pubkey):
    return sshmesh.authorized_key_regexp(str(pubkey))


def llmb_ssh_known_hosts(entries, header=""):
    return sshmesh.known_hosts_text(list(entries), str(header or ""))


def llmb_ssh_known_hosts_for(nodes, port=22, container_port=None, allow_missing=False, header=""):
    return sshmesh.known_hosts_for_nodes(list(nodes), int(port),
                                         None if container_port in (None, "") else int(container_port),
                                         bool(allow_missing), str(header or ""))


def llmb_ssh_not_addresses(values):
    """The entries of a list that are not IP addresses or CIDR networks."""
    return [v for v in values or [] if not sshmesh.is_address(str(v))]


def llmb_ssh_mesh_bad_pairs(rows):
    """Number of failed (or missing) pairs in {source: [pairs]}: a source without results counts once."""
    return sum((0 if pairs else 1) + sum(1 for r in pairs if not r["ok"]) for pairs in dict(rows).values())


def llmb_ssh_mesh_targets(hostvars, nodes):
    """[{name, address}] of the nodes: llmb_node_ip, else ansible_host, else the inventory name."""
    out = []
    for node in nodes:
        hv = hostvars[node]
        address = hv.get("llmb_node_ip") or hv.get("ansible_host") or node
        out.append({"name": str(node), "address": str(address)})
    return out


def llmb_ssh_mesh_rows_bad(port, hostvars, nodes, register_name):
    """Failed or missing pairs on one port (argument order suits map('llmb_ssh_mesh_rows_bad', ...))."""
    return llmb_ssh_mesh_bad_pairs(llmb_ssh_mesh_rows(hostvars, nodes, register_name, port))


def llmb_ssh_mesh_rows(hostvars, nodes, register_name, port):
    """{source: [pair results]} for one port, from each node's registered llmb_ssh_mesh_check loop."""
    rows = {}
    for node in nodes:
        reg = hostvars[node].get(register_name) or {}
        rows[node] = []
        for res in reg.get("results") or []:
            if "pairs" in res and int(res.get("item", -1)) == int(port):
                rows[node] = list(res["pairs"])
    return rows


def llmb_ssh_mesh_matrix(rows, port=None, expected=None, mode="all"):
    return sshmesh.format_matrix(dict(rows), None if port is None else int(port),
                                 None if expected is None else dict(expected), str(mode))


def llmb_ssh_mesh_pairs(order, mode="mpirun", radix=sshmesh.MPI_TREE_RADIX):
    """{source: [{target, role}]}: the pairs the check proves (mpirun's launcher and tree, or all)."""
    if isinstance(radix, str) and radix.strip().isdigit():
        radix = int(radix)
    return sshmesh.mesh_pairs([str(n) for n in order], str(mode), radix)


def llmb_ssh_mesh_my_targets(targets, pairs, me):
    """The [{name, address, role}] this node checks: its row of llmb_ssh_mesh_pairs, in that order."""
    by_name = {str(t["name"]): t for t in targets}
    out = []
    for p in dict(pairs).get(str(me)) or []:
        t = by_name.get(str(p["target"]))
        if t is None:
            raise sshmesh.MeshError(f"{me}: the pair's target {p['target']!r} is not a node of the mesh")
        out.append({"name": str(t["name"]), "address": str(t["address"]), "role": str(p.get("role") or "")})
    return out


def llmb_ssh_mesh_failures(pairs, source):
    return sshmesh.failures(str(source), list(pairs or []))


def llmb_ssh_port_conflict(found, config_path):
    return sshmesh.port_conflict(list(found or []), str(config_path))


def llmb_mpirun_hostnames(stdout):
    return sshmesh.mpirun_hostnames(str(stdout or ""))


def llmb_ssh_mesh_stale(hostvars, targets, known_hosts, register_name, port=22):
    """The nodes [{name, address}] whose host key (each node's registered slurp of its public host key)
    the mesh's known_hosts text does not pin for their address: one line each (llmb.sshmesh)."""
    nodes = []
    for t in targets or []:
        reg = hostvars[t["name"]].get(register_name) or {}
        try:
            key = base64.b64decode(reg.get("content") or "").decode()
        except (ValueError, UnicodeDecodeError):
            key = ""
        nodes.append({"name": t["name"], "address": t["address"], "host_key": key})
    return sshmesh.stale_known_hosts(str(known_hosts or ""), nodes, int(port))


def llmb_mpirun_hosts(targets, slots, launcher_hostname):
    """mpirun's -H list from the first target: that node by its host name, the others by address."""
    return sshmesh.mpirun_hosts(list(targets or []), slots, str(launcher_hostname or ""))


class FilterModule:
    def filters(self):
        return reraise_each(
            (
                llmb_ssh_authorized_line,
                llmb_ssh_authorized_regexp,
                llmb_ssh_known_hosts,
                llmb_ssh_known_hosts_for,
                llmb_ssh_not_addresses,
                llmb_ssh_mesh_bad_pairs,
                llmb_ssh_mesh_rows_bad,
                llmb_ssh_mesh_targets,
                llmb_ssh_mesh_rows,
                llmb_ssh_mesh_matrix,
                llmb_ssh_mesh_pairs,
                llmb_ssh_mesh_my_targets,
                llmb_ssh_mesh_failures,
                llmb_ssh_port_conflict,
                llmb_mpirun_hostnames,
                llmb_mpirun_hosts,
                llmb_ssh_mesh_stale,
            ),
            sshmesh.MeshError, AnsibleFilterError, "ssh_mesh: ",
        )
