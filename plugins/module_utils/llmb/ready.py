"""Waiting for a launch-plan service on its node: readiness or health, failing fast when it dies.

The llmb_service_ready module is its Ansible face (arguments in, ``exit_json`` / ``fail_json`` out);
everything it decides is here, node-side: stdlib only, python3 >= 3.9. ``run`` is the module's
``run_command`` (argv list -> (rc, stdout, stderr)).
"""

from __future__ import annotations

import datetime
import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from .serve import (
    connected_to,
    container_verdict,
    engine_error_line,
    is_wrapper,
    not_joined_text,
    parse_systemctl_show,
    unit_verdict,
)

Run = Callable[[list], "tuple[int, str, str]"]


class NotReady(Exception):
    """The service died or did not become ready: why, after how long, the cause, the log tail."""

    def __init__(self, why: str, waited: float, cause: str, logs: str, engine_error: str | None):
        super().__init__(why)
        self.why, self.waited, self.cause, self.logs, self.engine_error = why, waited, cause, logs, engine_error


def tcp_open(host: str, port: int | str) -> bool:
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def http_get(url: str, timeout: float = 5, token: str | None = None) -> tuple[int | None, bytes]:
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


def dead_cause(why: str) -> str:
    if "restart" in why:
        return "restarting"
    if "does not exist" in why or "is gone" in why:
        return "gone"
    return "exited"


class Watch:
    """The unit or container of one service: is it dead, what is its main process, its log tail."""

    def __init__(self, run: Run, name: str, kind: str, exec_in: str | None = None, log_lines: int = 40):
        self.run, self.name, self.kind, self.exec_in, self.log_lines = run, name, kind, exec_in, log_lines
        self.restarts0 = int(self._unit_props().get("NRestarts", "0") or 0) if kind != "container" else 0

    def _unit_props(self) -> dict:
        rc, out, _ = self.run(["systemctl", "show", self.name, "-p",
                               "ActiveState,SubState,NRestarts,ExecMainStatus,Result"])
        return parse_systemctl_show(out) if rc == 0 else {}

    def main_pid(self) -> int:
        """The unit's main process or the container's init process (0 when none)."""
        if self.kind == "container":
            rc, out, _ = self.run(["docker", "inspect", "-f", "{{.State.Pid}}", self.name])
        else:
            rc, out, _ = self.run(["systemctl", "show", self.name, "-p", "MainPID", "--value"])
        try:
            return int(out.strip()) if rc == 0 else 0
        except ValueError:
            return 0

    def started_s_ago(self) -> float | None:
        """Seconds since the service's main process started (its last start, a restart's included): systemd's
        ExecMainStartTimestampMonotonic (CLOCK_MONOTONIC, as time.monotonic), a container's State.StartedAt;
        None where there is no answer (never started, an exec service, a value that does not parse)."""
        if self.kind == "container":
            rc, out, _ = self.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", self.name])
            at = parse_rfc3339(out.strip()) if rc == 0 else None
            return max(0.0, time.time() - at) if at else None
        if self.exec_in:
            return None
        rc, out, _ = self.run(["systemctl", "show", self.name, "-p", "ExecMainStartTimestampMonotonic", "--value"])
        try:
            usec = int(out.strip()) if rc == 0 else 0
        except ValueError:
            return None
        return max(0.0, time.monotonic() - usec / 1e6) if usec > 0 else None

    # how far back the engine's own error is looked for when the tail only holds a wrapper (vLLM
    # 0.26.0: the root cause 100 lines above "See root cause above", Ray's clean-up in between)
    CAUSE_LINES = 2000

    def logs(self, lines: int | None = None) -> str:
        n = str(lines or self.log_lines)
        if self.kind == "container":
            _, out, err = self.run(["docker", "logs", "--tail", n, self.name])
            return (out + err).strip()
        _, out, _ = self.run(["journalctl", "-u", self.name, "-n", n, "--no-pager", "-o", "cat"])
        return out.strip()

    def dead(self) -> str | None:
        if self.kind == "container":
            rc, out, _ = self.run(["docker", "inspect", "-f", "{{json .State}}", self.name])
            if rc != 0:
                return "container does not exist"
            return container_verdict(json.loads(out))
        if self.kind == "exec":
            return unit_verdict(self._unit_props(), self.restarts0) or self._exec_container_gone()
        return unit_verdict(self._unit_props(), self.restarts0)

    def _exec_container_gone(self) -> str | None:
        """An exec unit's container: its process cannot outlive it."""
        if not self.exec_in:
            return None
        rc, out, _ = self.run(["docker", "container", "inspect", "-f", "{{json .State}}", self.exec_in])
        if rc != 0:
            return f"its container {self.exec_in} is gone"
        verdict = container_verdict(json.loads(out))
        return f"its container {self.exec_in}: {verdict}" if verdict else None

    def not_ready(self, why: str, waited: float, cause: str) -> NotReady:
        logs = self.logs()
        error = engine_error_line(logs)
        if (error is None or is_wrapper(error)) and self.log_lines < self.CAUSE_LINES:
            error = engine_error_line(self.logs(self.CAUSE_LINES)) or error
        return NotReady(why, waited, cause, logs, error)


def alive(watch: Watch) -> dict[str, Any]:
    """One look at a running service, no waiting: {"alive", "why", "cause", "engine_error"}; what
    llmb.serve.group_verdict judges for every member of a group (a lost rank leaves rank 0 healthy)."""
    why = watch.dead()
    if not why:
        return {"alive": True, "why": None, "cause": None, "engine_error": None}
    err = watch.not_ready(why, 0.0, dead_cause(why))
    return {"alive": False, "why": why, "cause": err.cause, "engine_error": err.engine_error}


def parse_rfc3339(text: str) -> float | None:
    """Seconds since the epoch of Docker's State.StartedAt ('2026-11-27T15:40:00.123456789Z', or an offset);
    None for Docker's zero time (never started) or anything else."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if not m or m.group(1).startswith("0001-"):
        return None
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        at = datetime.datetime.fromisoformat(m.group(1) + tz).timestamp()
    except ValueError:
        return None
    return at + (float("0." + m.group(2)) if m.group(2) else 0.0)


def wait(watch: Watch, ready: dict | None, health: dict | None, timeout_s: int | None = None,
         interval_s: int = 5, role: str | None = None, api_key: str | None = None,
         proc: str = "/proc", sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Poll until ready (or healthy, listing the served model): {"waited_s", "models"?}; NotReady else."""
    spec = health or ready
    if not spec:
        return {"waited_s": 0.0}
    timeout = timeout_s or spec.get("timeout_s") or 600
    interval = min(interval_s, spec.get("interval_s") or interval_s)
    t0 = time.monotonic()
    stable_since = None
    last = "no answer yet"
    held: list = []
    while True:
        waited = time.monotonic() - t0
        why = watch.dead()
        if why:
            raise watch.not_ready(why, waited, dead_cause(why))
        if health:
            status, _ = http_get(spec["url"])
            last = f"GET {spec['url']} -> {status or 'connection refused'}"
            if status == 200:
                base = spec["url"].rsplit("/", 1)[0]
                mstatus, body = http_get(base + spec.get("models_path", "/v1/models"), token=api_key)
                try:
                    models = [d.get("id") for d in json.loads(body or b"{}").get("data", [])]
                except ValueError:
                    models = []
                want = spec.get("expect_model")
                if not want or want in models:
                    since = watch.started_s_ago()  # time to healthy from the start, not from this wait
                    return {"waited_s": round(waited, 1), "models": models,
                            **({"since_start_s": round(since, 1)} if since is not None else {})}
                raise watch.not_ready(
                    f"healthy, but GET {spec.get('models_path', '/v1/models')} lists {models} (HTTP {mstatus}), "
                    f"not the served name {want!r}: clients asking for {want!r} get 404", waited, "wrong-model")
        elif spec.get("type") == "tcp":
            if tcp_open(spec["host"], spec["port"]):
                return {"waited_s": round(waited, 1)}
            last = f"TCP {spec['host']}:{spec['port']} closed"
        elif spec.get("type") == "connected":
            ok, held = connected_to(proc, [watch.main_pid()], spec["host"], int(spec["port"]))
            if ok:
                return {"waited_s": round(waited, 1)}
            last = not_joined_text(role, spec["host"], int(spec["port"]), None, held)
        else:  # started: up and staying up for a few seconds
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= 3:
                return {"waited_s": round(waited, 1)}
        if waited >= timeout:
            if spec.get("type") == "connected" and not health:
                reachable = tcp_open(spec["host"], spec["port"])
                last = not_joined_text(role, spec["host"], int(spec["port"]), reachable, held)
                raise watch.not_ready(f"not ready within {timeout}s: {last}", waited, "not-joined")
            raise watch.not_ready(f"not ready within {timeout}s (last probe: {last})", waited,
                                  "unhealthy" if health else "not-ready")
        sleep(min(interval, 1.0 if waited < 10 else interval))
