#!/usr/bin/python
"""Run one launch-plan container with the docker CLI, recreating it only when its spec changed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_container
short_description: Run a launch-plan container service (docker CLI), idempotently
description:
  - Builds the C(docker run) command line from the plan's container spec (image, argv, env,
    devices, mounts, options such as network, ipc, shm_size, cap_add, restart).
  - The spec's hash is kept as a container label; an existing container with the same hash that
    is running is left alone, a different hash is removed and recreated, a stopped one started.
  - Uses the docker CLI on the node (no Python SDK needed there).
options:
  name: {description: Container name., type: str, required: true}
  image: {description: Image reference (tag or digest)., type: str, required: true}
  argv: {description: Command after the image., type: list, elements: str, default: []}
  env: {description: Environment., type: dict, default: {}}
  devices: {description: Devices (host paths or dicts)., type: list, elements: raw, default: []}
  mounts:
    description: Mounts (C(host:container[:ro]) or dicts).
    type: list
    elements: raw
    default: []
  options: {description: "Container options from the plan (network, ipc, shm_size, privileged, cap_add, restart, entrypoint...).", type: dict, default: {}}
  state: {description: started or absent., type: str, default: started, choices: [started, absent]}
attributes:
  check_mode: {support: full, description: Reports what would change.}
  diff_mode: {support: full, description: Shows old and new spec hash.}
"""

EXAMPLES = r"""
- name: Start the vllm-ascend server
  llmb_container:
    name: llmb-vllm
    image: quay.io/ascend/vllm-ascend:v0.11.0rc0-a3
    argv: [vllm, serve, /root/.cache/Kimi-K2-Thinking]
    options: {network: host, shm_size: 1g}
"""

RETURN = r"""
cmd: {description: The docker run argv used (env values of secret-looking keys masked)., type: list, returned: changed}
spec_hash: {description: Hash of the spec., type: str, returned: always}
"""

import json  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.secrets import masked_argv as masked  # noqa: E402
from ansible.module_utils.llmb.serve import SPEC_LABEL, docker_run_argv  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            image=dict(type="str", required=True),
            argv=dict(type="list", elements="str", default=[]),
            env=dict(type="dict", default={}),
            devices=dict(type="list", elements="raw", default=[]),
            mounts=dict(type="list", elements="raw", default=[]),
            options=dict(type="dict", default={}),
            state=dict(type="str", default="started", choices=["started", "absent"]),
        ),
        supports_check_mode=True,
    )
    p = m.params
    if not m.get_bin_path("docker"):
        m.fail_json(msg=f"container {p['name']}: the docker CLI is not on this node (run the engine stage first)")
    env = {k: str(v) for k, v in p["env"].items()}
    run = docker_run_argv(p["name"], p["image"], p["argv"], env, p["devices"], p["mounts"], p["options"])
    want = next(a.split("=", 1)[1] for a in run if a.startswith(SPEC_LABEL + "="))
    rc, out, err = m.run_command(["docker", "inspect", "-f", "{{json .}}", p["name"]])
    cur = json.loads(out) if rc == 0 else None
    have = ((cur or {}).get("Config", {}).get("Labels") or {}).get(SPEC_LABEL)
    running = bool(cur and cur["State"].get("Running"))
    diff = {"before": {"spec_hash": have, "running": running}, "after": {"spec_hash": want, "running": True}}

    if p["state"] == "absent":
        if cur is None:
            m.exit_json(changed=False, spec_hash=want)
        if not m.check_mode:
            m.run_command(["docker", "rm", "-f", p["name"]], check_rc=True)
        m.exit_json(changed=True, spec_hash=want)

    if cur is not None and have == want and running:
        m.exit_json(changed=False, spec_hash=want)
    if m.check_mode:
        m.exit_json(changed=True, spec_hash=want, diff=diff)
    if cur is not None and have == want:
        rc, _, err = m.run_command(["docker", "start", p["name"]])
        if rc != 0:
            m.fail_json(msg=f"container {p['name']}: docker start failed: {err.strip()}")
        m.exit_json(changed=True, spec_hash=want, diff=diff)
    if cur is not None:
        m.run_command(["docker", "rm", "-f", p["name"]], check_rc=True)
    rc, out, err = m.run_command(run)
    if rc != 0:
        m.fail_json(msg=f"container {p['name']}: docker run of {p['image']} failed (rc={rc}): {err.strip()[-1500:]}",
                    cmd=masked(run))
    m.exit_json(changed=True, spec_hash=want, cmd=masked(run), diff=diff)


if __name__ == "__main__":
    main()
