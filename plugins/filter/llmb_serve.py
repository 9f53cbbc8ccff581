"""Filters for the serve role's templates (controller side): thin shims over llmb.serve.

A value that cannot be written safely into a unit or environment file (a newline in an argument,
an environment name with a space, ...) fails the template task with the message of
llmb.quoting.QuotingError, naming the service and the field.
"""

from __future__ import annotations

from llmb.serve import (
    environment_file,
    group_restart_unit,
    group_target,
    group_verdict,
    group_view,
    replaced_containers,
    systemd_exec,
    systemd_unit,
    unit_state,
)
from llmbctl.plugin import reraise

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # imported by the unit tests without Ansible
    AnsibleFilterError = ValueError  # type: ignore[misc,assignment]


def service_secret_env(svc: dict, value=None) -> dict:
    """{env name: value} of the secrets a plan service names but does not carry (api.api_key: the
    engine's API key variable); {} when it names none. The value is the vaulted inventory variable."""
    auth = (svc.get("api") or {}).get("api_key") if isinstance(svc, dict) else None
    if not auth:
        return {}
    if value is None or str(value) == "":
        raise ValueError(f"service {svc.get('name')}: the plan asks for {auth.get('var')} but it is not set")
    return {str(auth["env"]): str(value)}


def group_members(hostvars, hosts, register: str = "__serve_alive") -> list:
    """The group check's members from every host's registered loop of llmb_service_ready alive=true:
    [{"host", "name", "role", "alive", "why", "engine_error"}] (a host that ran no look adds none)."""
    out = []
    for host in hosts or []:
        for res in ((hostvars.get(host) or {}).get(register) or {}).get("results") or []:
            item = res.get("item") or {}
            if res.get("skipped") or not isinstance(item, dict):
                continue
            out.append({"host": host, "name": item.get("name"), "role": item.get("role"),
                        "alive": bool(res.get("alive")), "why": res.get("why") or res.get("msg"),
                        "engine_error": res.get("engine_error")})
    return out


class FilterModule:
    def filters(self):
        return {
            "llmb_systemd_exec": reraise(systemd_exec, ValueError, AnsibleFilterError),
            "llmb_systemd_unit": reraise(systemd_unit, ValueError, AnsibleFilterError),
            "llmb_environment_file": reraise(environment_file, ValueError, AnsibleFilterError),
            "llmb_replaced_containers": replaced_containers,
            "llmb_unit_state": unit_state,
            "llmb_service_secret_env": reraise(service_secret_env, ValueError, AnsibleFilterError),
            "llmb_group_view": reraise(group_view, ValueError, AnsibleFilterError),
            "llmb_group_target": reraise(group_target, ValueError, AnsibleFilterError),
            "llmb_group_restart_unit": reraise(group_restart_unit, ValueError, AnsibleFilterError),
            "llmb_group_members": group_members,
            "llmb_group_verdict": group_verdict,
        }
