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
waited_s: {description: Seconds waited., type: float, returned: always}
engine_error: {description: "The engine's own error line from the log tail (last exception or usage error), on failure.", type: str, returned: failure}
cause: {description: "On failure: exited, restarting, gone, not-ready, not-joined, unhealthy, wrong-model.", type: str, returned: failure}
models: {description: Model ids listed by /v1/models when a health spec was given., type: list, returned: success}
"""

import json  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.serve import (  # noqa: E402
    connected_to,
    container_verdict,
    engine_error_line,
    not_joined_text,
    parse_systemctl_show,
    unit_verdict,
)


class Waiter:
    def __init__(self, module):
        self.m = module
        p = module.params
        self.name, self.kind = p["name"], p["kind"]
        self.restarts0 = int(self._unit_props().get("NRestarts", "0") or 0) if self.kind != "container" else 0

    def _unit_props(self):
        rc, out, _ = self.m.run_command(["systemctl", "show", self.name, "-p",
                                         "ActiveState,SubState,NRestarts,ExecMainStatus,Result"])
        return parse_systemctl_show(out) if rc == 0 else {}

    def main_pid(self):
        """The unit's main process or the container's init process (0 when none)."""
        if self.kind == "container":
            rc, out, _ = self.m.run_command(["docker", "inspect", "-f", "{{.State.Pid}}", self.name])
        else:
            rc, out, _ = self.m.run_command(["systemctl", "show", self.name, "-p", "MainPID", "--value"])
        try:
            return int(out.strip()) if rc == 0 else 0
        except ValueError:
            return 0

    def logs(self):
        n = str(self.m.params["log_lines"])
        if self.kind == "container":
            _, out, err = self.m.run_command(["docker", "logs", "--tail", n, self.name])
            return (out + err).strip()
        _, out, _ = self.m.run_command(["journalctl", "-u", self.name, "-n", n, "--no-pager", "-o", "cat"])
        return out.strip()

    def dead(self):
        if self.kind == "container":
            rc, out, _ = self.m.run_command(["docker", "inspect", "-f", "{{json .State}}", self.name])
            if rc != 0:
                return "container does not exist"
            return container_verdict(json.loads(out))
        if self.kind == "exec":
            return unit_verdict(self._unit_props(), self.restarts0) or self._exec_container_gone()
        return unit_verdict(self._unit_props(), self.restarts0)

    def _exec_container_gone(self):
        """An exec unit's container: its process cannot outlive it."""
        box = self.m.params.get("exec_in")
        if not box:
            return None
        rc, out, _ = self.m.run_command(["docker", "container", "inspect", "-f", "{{json .State}}", box])
        if rc != 0:
            return f"its container {box} is gone"
        verdict = container_verdict(json.loads(out))
        return f"its container {box}: {verdict}" if verdict else None

    def fail(self, why, waited, cause):
        logs = self.logs()
        err = engine_error_line(logs)
        where = f"{self.m.params['host']}: " if self.m.params.get("host") else ""
        self.m.fail_json(msg=f"{where}{self.name} ({self.kind}): {why} after {waited:.0f}s."
                             + (f" Engine error: {err}" if err else "") + "\n"
                             f"--- last {self.m.params['log_lines']} log lines ---\n{logs}",
                         waited_s=round(waited, 1), cause=cause, why=why, engine_error=err)


def _dead_cause(why):
    if "restart" in why:
        return "restarting"
    if "does not exist" in why or "is gone" in why:
        return "gone"
    return "exited"


def tcp_open(host, port):
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def http_get(url, timeout=5, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError, TimeoutError):
        return None, b""


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
        ),
        supports_check_mode=True,
    )
    p = module.params
    spec = p["health"] or p["ready"]
    if not spec:
        module.exit_json(changed=False, waited_s=0.0)
    timeout = p["timeout_s"] or spec.get("timeout_s") or 600
    interval = min(p["interval_s"], spec.get("interval_s") or p["interval_s"])
    w = Waiter(module)
    t0 = time.monotonic()
    stable_since = None
    last = "no answer yet"
    while True:
        waited = time.monotonic() - t0
        why = w.dead()
        if why:
            w.fail(why, waited, _dead_cause(why))
        if p["health"]:
            status, _ = http_get(spec["url"])
            last = f"GET {spec['url']} -> {status or 'connection refused'}"
            if status == 200:
                base = spec["url"].rsplit("/", 1)[0]
                mstatus, body = http_get(base + spec.get("models_path", "/v1/models"), token=p["api_key"])
                try:
                    models = [d.get("id") for d in json.loads(body or b"{}").get("data", [])]
                except ValueError:
                    models = []
                want = spec.get("expect_model")
                if not want or want in models:
                    module.exit_json(changed=False, waited_s=round(waited, 1), models=models)
                w.fail(f"healthy, but GET {spec.get('models_path', '/v1/models')} lists {models} "
                       f"(HTTP {mstatus}), not the served name {want!r}: clients asking for {want!r} get 404", waited,
                       "wrong-model")
        elif spec.get("type") == "tcp":
            if tcp_open(spec["host"], spec["port"]):
                module.exit_json(changed=False, waited_s=round(waited, 1))
            last = f"TCP {spec['host']}:{spec['port']} closed"
        elif spec.get("type") == "connected":
            ok, held = connected_to("/proc", [w.main_pid()], spec["host"], int(spec["port"]))
            if ok:
                module.exit_json(changed=False, waited_s=round(waited, 1))
            last = not_joined_text(p["role"], spec["host"], int(spec["port"]), None, held)
        else:  # started: up and staying up for a few seconds
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= 3:
                module.exit_json(changed=False, waited_s=round(waited, 1))
        if waited >= timeout:
            if spec.get("type") == "connected" and not p["health"]:
                reachable = tcp_open(spec["host"], spec["port"])
                last = not_joined_text(p["role"], spec["host"], int(spec["port"]), reachable, held)
                w.fail(f"not ready within {timeout}s: {last}", waited, "not-joined")
            w.fail(f"not ready within {timeout}s (last probe: {last})", waited,
                   "unhealthy" if p["health"] else "not-ready")
        time.sleep(min(interval, 1.0 if waited < 10 else interval))


if __name__ == "__main__":
    main()
