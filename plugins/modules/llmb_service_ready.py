#!/usr/bin/python
"""Wait until a launch-plan service is ready or healthy, failing fast when it dies."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_service_ready
short_description: Wait for a launch-plan service (systemd unit or container) to be ready and healthy
description:
  - Polls the readiness (TCP port open; the service's processes holding an established connection to
    its master, for ranks that join one; or unit started and staying up) or the HTTP health of one
    service of the launch plan, from the node itself.
  - While waiting it watches the unit or container; an exit, a restart by systemd or a container in
    a restart loop fails at once, with the journal or container log tail in the message.
  - With a health spec it also requires C(/v1/models) to list the served model name.
  - A failure names the host and the service, with C(cause) - exited, restarting, gone, not-ready,
    not-joined (a rank without its connection to the master; the message says whether the master's
    port accepts TCP from this node), unhealthy, wrong-model.
options:
  name: {description: Unit or container name., type: str, required: true}
  kind: {description: "systemd, mpirun, exec (units) or container.", type: str, required: true, choices: [systemd, mpirun, exec, container]}
  host: {description: Inventory name of the node, for messages., type: str}
  role: {description: "The service's role in the plan (ray-worker, sshd, ...), for messages.", type: str}
  exec_in: {description: "For kind exec, the container the unit's process runs in (its loss fails the wait at once).", type: str}
  ready: {description: "Plan readiness spec: {type: tcp|connected|started, host, port, timeout_s}.", type: dict}
  health: {description: "Plan health spec: {url, models_path, expect_model, timeout_s, interval_s}.", type: dict}
  timeout_s: {description: Override of the plan's timeout., type: int}
  interval_s: {description: Seconds between probes., type: int, default: 5}
  log_lines: {description: Log lines shown on failure., type: int, default: 40}
  alive:
    description:
      - One look, no waiting - is the service still running? Returns C(alive), C(why), C(cause) and
        C(engine_error) and never fails; the serve role's group check (tasks/group.yml) judges every
        member of a group with them, since rank 0's C(/health) stays 200 when another node's rank is lost.
    type: bool
    default: false
  api_key: {description: "Bearer token for /v1/models when the server requires one (llmb_api_key).", type: str, no_log: true}
attributes:
  check_mode: {support: full, description: Only reads.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Wait for the API server
  llmb_service_ready:
    name: llmb-vllm
    kind: systemd
    health: {url: "http://10.0.0.1:8000/health", models_path: /v1/models, expect_model: kimi-k2, timeout_s: 1800}
"""

RETURN = r"""
alive: {description: "With alive=true: whether the service is running.", type: bool, returned: when alive is true}
why: {description: "With alive=true: why it is not running (unit failed, restarting, gone).", type: str, returned: when alive is true}
waited_s: {description: Seconds waited., type: float, returned: always}
since_start_s: {description: "Seconds from the service's (last) start to healthy: systemd's ExecMainStartTimestampMonotonic, a container's StartedAt.", type: float, returned: when healthy and the start time is known}
engine_error: {description: "The engine's own error line from the log tail (last exception or usage error), on failure.", type: str, returned: failure}
cause: {description: "On failure: exited, restarting, gone, not-ready, not-joined, unhealthy, wrong-model.", type: str, returned: failure}
models: {description: Model ids listed by /v1/models when a health spec was given., type: list, returned: success}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.ready import NotReady, Watch, alive, wait  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            kind=dict(type="str", required=True, choices=["systemd", "mpirun", "exec", "container"]),
            host=dict(type="str"),
            role=dict(type="str"),
            exec_in=dict(type="str"),
            ready=dict(type="dict"),
            health=dict(type="dict"),
            timeout_s=dict(type="int"),
            interval_s=dict(type="int", default=5),
            log_lines=dict(type="int", default=40),
            api_key=dict(type="str", no_log=True),
            alive=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["alive"]:
        look = alive(Watch(module.run_command, p["name"], p["kind"], p.get("exec_in"), p["log_lines"]))
        module.exit_json(changed=False, waited_s=0.0, **look)
    if not (p["health"] or p["ready"]):
        module.exit_json(changed=False, waited_s=0.0)
    watch = Watch(module.run_command, p["name"], p["kind"], p.get("exec_in"), p["log_lines"])
    try:
        result = wait(watch, p["ready"], p["health"], p["timeout_s"], p["interval_s"], p["role"], p["api_key"])
    except NotReady as err:
        where = f"{p['host']}: " if p.get("host") else ""
        module.fail_json(msg=f"{where}{p['name']} ({p['kind']}): {err.why} after {err.waited:.0f}s."
                             + (f" Engine error: {err.engine_error}" if err.engine_error else "") + "\n"
                             f"--- last {p['log_lines']} log lines ---\n{err.logs}",
                         waited_s=round(err.waited, 1), cause=err.cause, why=err.why, engine_error=err.engine_error)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
