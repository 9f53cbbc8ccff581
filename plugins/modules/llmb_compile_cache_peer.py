#!/usr/bin/python
"""Share a warm compile cache with a node whose cache is cold, through the weights relay (llmb.compile_cache)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_compile_cache_peer
short_description: Serve a warm compile cache to peers, or fill a cold one from a peer, verified like the weights
description:
  - "O(state=serving): for each service in O(dirs) (service name to its cache_dir), lists the files (path, size,
    sha256) and starts the weights relay's HTTP server over the directory as the unit C(llmb-cache-relay-<service>)
    on O(address):O(port) + the service's index in O(dirs). A cache with a link, a special file, or a file or
    directory others cannot read is not served (the relay runs as a DynamicUser): RV(manifests) gives its
    reasons under C(unservable) and the receivers stay cold. Files and directories the engine wrote private
    (vLLM 0.26.0 writes some with mode 0600) are first given read access for others (C(opened), with a warning);
    a link or a special file is never changed nor served."
  - "O(state=received): for each service in O(receive) ({cache_dir, url, source, digest, files}), pulls every file
    through the weights stage's peer fetch (size and sha256 on arrival) into a staging directory beside the cache,
    writes the marker C(.llmb-cache-peer.json) last and renames the staging directory onto the cold cache."
  - "O(state=stopped): stops the relay units of the services in O(dirs) (the stage's always step)."
options:
  state: {description: serving, received or stopped., type: str, choices: [serving, received, stopped], required: true}
  dirs: {description: "Service name to its cache directory (serving, stopped).", type: dict, default: {}}
  receive: {description: "Service name to {cache_dir, url, source, digest, files} (received).", type: dict, default: {}}
  address: {description: Cluster address the relay binds (serving)., type: str}
  port: {description: First relay port; service i of O(dirs) gets port + i., type: int, default: 18190}
  timeout: {description: Seconds per file transfer and to wait until a relay listens., type: int, default: 60}
  host: {description: This node's inventory name (for messages)., type: str, required: true}
attributes:
  check_mode: {support: full, description: Lists the manifests or what it would fetch; starts and fetches nothing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- llmb_compile_cache_peer:
    state: serving
    dirs: {llmb-vllm: /var/cache/llmb/compile/llmb-vllm}
    address: 10.0.0.11
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
manifests: {description: "Service to {files, unservable, opened, url, manifest_sha256} (serving).", type: dict, returned: always}
received: {description: "Service to the marker written (peer, digest, manifest_sha256, files, bytes) and seconds.", type: dict, returned: always}
"""

import os  # noqa: E402
import re  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb import compile_cache  # noqa: E402
from ansible.module_utils.llmb.weights import peer, relay  # noqa: E402

UNIT_PREFIX = "llmb-cache-relay-"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,80}$")


def unit_name(service: str) -> str:
    if not NAME_RE.match(service):
        raise ValueError(f"dirs: service name {service!r} cannot name a unit (letters, digits, '-', '_', '.')")
    return UNIT_PREFIX + service


def url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def serve(m, dirs, address, port, timeout):
    out = {}
    for i, (name, path) in enumerate(compile_cache.check_dirs(dirs)):
        unit = unit_name(name)
        opened = compile_cache.open_for_relay(path, check=m.check_mode) if os.path.isdir(path) else []
        if os.path.isdir(path):
            # in check mode nothing was opened: list what would be served once it is
            man = compile_cache.manifest(path, modes=not (opened and m.check_mode))
        else:
            man = {"files": [], "unservable": [f"{path}: missing"]}
        man["opened"] = opened
        if opened:
            m.warn(f"{m.params['host']}: the compile cache of {name}: gave others read access to {len(opened)} "
                   f"entr{'y' if len(opened) == 1 else 'ies'} the engine wrote private, for the relay (e.g. {'; '.join(opened[:3])})")
        if not man["files"]:
            man["unservable"].append(f"{path}: no file")
        entry = dict(man, url=url(address, port + i), manifest_sha256=compile_cache.manifest_sha256(man["files"]))
        if not man["unservable"] and not m.check_mode:
            relay.start(port + i, address, path, unit, timeout=float(timeout))
        elif man["unservable"]:
            # its cold peers start cold: say so on the sender, with what the relay could not read
            m.warn(f"{m.params['host']}: the compile cache of {name} is not served to its cold peers (they start cold): "
                   f"{len(man['unservable'])} entr{'y' if len(man['unservable']) == 1 else 'ies'} the relay cannot serve, "
                   f"e.g. {'; '.join(man['unservable'][:3])}")
        out[name] = entry
    return out


def receive(m, todo, timeout):
    out = {}
    for name, job in sorted(todo.items()):
        if not isinstance(job, dict):
            raise ValueError(f"receive[{name}]: expected {{cache_dir, url, source, digest, files}}, found {job!r:.80}")
        (path,) = [p for _, p in compile_cache.check_dirs({name: job.get("cache_dir")})]
        for key in ("url", "source", "digest"):
            if not isinstance(job.get(key), str) or not job[key]:
                raise ValueError(f"receive[{name}].{key}: expected a string, found {job.get(key)!r}")
        if not job["url"].startswith("http://"):
            raise ValueError(f"receive[{name}].url: expected http://address:port, found {job['url']!r}")
        files = compile_cache.check_manifest(job.get("files"))
        if m.check_mode:
            out[name] = {"peer": job["source"], "files": len(files), "bytes": sum(f["size"] for f in files)}
            continue

        def fetch(base, entries, dest):
            return peer.fetch(base, entries, dest, timeout=float(timeout), originals=False)

        out[name] = compile_cache.receive(job["url"], files, path, job["source"], job["digest"], fetch)
    return out


def main():
    m = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["serving", "received", "stopped"]),
            dirs=dict(type="dict", default={}),
            receive=dict(type="dict", default={}),
            address=dict(type="str"),
            port=dict(type="int", default=18190),
            timeout=dict(type="int", default=60),
            host=dict(type="str", required=True),
        ),
        required_if=[("state", "serving", ["address"])],
        supports_check_mode=True,
    )
    p, host = m.params, m.params["host"]
    try:
        if p["state"] == "stopped":
            units = [unit_name(n) for n, _ in compile_cache.check_dirs(p["dirs"])]
            if not m.check_mode:
                for u in units:
                    relay.stop(u)
            m.exit_json(changed=bool(units), manifests={}, received={}, stopped=units)
        if p["state"] == "serving":
            if not 1 <= p["port"] <= 65535 - len(p["dirs"]):
                raise ValueError(f"port: expected a TCP port with room for {len(p['dirs'])} relays, found {p['port']}")
            man = serve(m, p["dirs"], p["address"], p["port"], p["timeout"])
            m.exit_json(changed=any(not e["unservable"] or e["opened"] for e in man.values()), manifests=man, received={})
        got = receive(m, p["receive"], p["timeout"])
        m.exit_json(changed=bool(got), manifests={}, received=got)
    except ValueError as exc:
        m.fail_json(msg=f"{host}: {exc}")
    except (relay.RelayError, peer.PeerError, OSError) as exc:
        m.fail_json(msg=f"{host}: compile cache peer copy ({p['state']}): {exc}")


if __name__ == "__main__":
    main()
