#!/usr/bin/python
"""Run one launch-plan container with the docker CLI, recreating it only when its spec changed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_container
short_description: Run a launch-plan container service (docker CLI), idempotently
description:
  - Builds the C(docker run) command line from the plan's container spec (image, argv, env,
    devices, mounts, options such as network, ipc, shm_size, cap_add, restart); env values go
    through a private C(--env-file), never the command line.
  - The spec's hash (image reference, the image ID found on the node, the pins, argv, env, devices,
    mounts, options, the content of the plan's config files it reads) is kept as the label C(io.llm-bringup.spec-hash); a running container with the
    same hash is left alone, any other is removed and recreated, a stopped one with the same hash started.
  - Before changing anything it checks the node - the image under the plan's name carries the pinned
    digest / ID, every device exists (a CDI device is declared by a CDI spec), nothing else listens on a
    planned port of a host-network container - and after a start that the container stays up.
    A failure names the host, the container and the cause (C(cause) - image-missing, image-drift,
    device-missing, port-taken, run-failed, exited-at-start, bad-spec) with the container's log tail.
  - Logic in module_utils/llmb/container.py. Uses the docker CLI on the node (no Python SDK).
options:
  name: {description: Container name., type: str, required: true}
  image: {description: Image reference (the name the engine stage tags the pinned image with)., type: str, required: true}
  digest: {description: "Pinned registry digest of the image (sha256:...); the local image must carry it.", type: str}
  image_id: {description: "Pinned image ID (sha256:...); the local image must be it.", type: str}
  argv: {description: Command after the image., type: list, elements: str, default: []}
  env: {description: Environment., type: dict, default: {}}
  secret_env: {description: "Environment whose values are secrets (masked in Ansible's output); merged into env.", type: dict, default: {}}
  devices: {description: "Devices (host paths, CDI names vendor/class=name, or dicts).", type: list, elements: raw, default: []}
  mounts:
    description: Mounts (C(host:container[:ro]) or dicts).
    type: list
    elements: raw
    default: []
  options: {description: "Container options from the plan (network, ipc, shm_size, privileged, cap_add, restart, entrypoint...).", type: dict, default: {}}
  config_files: {description: "The plan's config files the container reads ([{path, content}]); a change replaces it.", type: list, elements: dict, default: []}
  ports: {description: "Ports the container listens on ([{port, purpose}]), checked free with host networking.", type: list, elements: dict, default: []}
  host: {description: Inventory name of the node, for messages (default the node's hostname)., type: str}
  settle_s: {description: Seconds a started container must stay up., type: float, default: 2}
  log_lines: {description: Container log lines shown on failure., type: int, default: 40}
  state: {description: started or absent., type: str, default: started, choices: [started, absent]}
attributes:
  check_mode: {support: full, description: Reports what would change (create, replace, start) without touching the node.}
  diff_mode: {support: full, description: Shows old and new spec hash and state.}
"""

EXAMPLES = r"""
- name: Start the vllm-ascend server
  llmb_container:
    name: llmb-vllm
    image: quay.io/ascend/vllm-ascend:v0.11.0rc0-a3
    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    argv: [serve, /root/.cache/Kimi-K2-Thinking]
    options: {network: host, shm_size: 1g, entrypoint: vllm}
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
action: {description: "none, start, create, replace or remove.", type: str, returned: always}
cmd: {description: The docker run argv used (the env file shown as <env-file>)., type: list, returned: when created}
spec_hash: {description: Hash of the spec (label io.llm-bringup.spec-hash)., type: str, returned: always}
image_id: {description: ID of the image the container runs., type: str, returned: when the image is on the node}
cause: {description: "On failure: image-missing, image-drift, device-missing, port-taken, run-failed, exited-at-start, bad-spec.", type: str, returned: failure}
log_tail: {description: The container's last log lines, on failure., type: str, returned: failure}
"""

import socket  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.container import ContainerFault, Reconciler, Spec  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            image=dict(type="str", required=True),
            digest=dict(type="str"),
            image_id=dict(type="str"),
            argv=dict(type="list", elements="str", default=[]),
            env=dict(type="dict", default={}),
            secret_env=dict(type="dict", default={}, no_log=True),
            devices=dict(type="list", elements="raw", default=[]),
            mounts=dict(type="list", elements="raw", default=[]),
            options=dict(type="dict", default={}),
            ports=dict(type="list", elements="dict", default=[]),
            config_files=dict(type="list", elements="dict", default=[]),
            host=dict(type="str"),
            settle_s=dict(type="float", default=2.0),
            log_lines=dict(type="int", default=40),
            state=dict(type="str", default="started", choices=["started", "absent"]),
        ),
        supports_check_mode=True,
    )
    p = m.params
    host = p["host"] or socket.gethostname()
    if not m.get_bin_path("docker"):
        m.fail_json(msg=f"{host}: container {p['name']}: the docker CLI is not on this node. "
                        "Fix: run the engine stage (playbooks/engine.yml) first", cause="no-docker")
    spec = Spec(
        name=p["name"], image=p["image"], argv=p["argv"],
        env={str(k): str(v) for k, v in {**p["env"], **p["secret_env"]}.items()},
        devices=p["devices"], mounts=p["mounts"], options=p["options"], ports=p["ports"],
        digest=p["digest"] or None, image_id=p["image_id"] or None, config=p["config_files"],
    )
    rec = Reconciler(lambda argv: m.run_command(argv), host, settle_s=p["settle_s"], log_lines=p["log_lines"])
    try:
        out = rec.reconcile(spec, check_mode=m.check_mode, state=p["state"])
    except ContainerFault as fault:
        m.fail_json(msg=fault.message(), cause=fault.cause, host=fault.host, container=fault.name,
                    log_tail=fault.log_tail)
    for w in out.warnings:
        m.warn(w)
    result = dict(changed=out.changed, action=out.action, spec_hash=out.spec_hash, image_id=out.image_id,
                  diff={"before": out.before, "after": out.after})
    if out.cmd:
        result["cmd"] = out.cmd
    m.exit_json(**result)


if __name__ == "__main__":
    main()
