"""Types of the launch plan: problems found in preflight (llmb.finding.Finding), services and host plans.

The JSON form of a plan (``HostPlan.to_dict``) is the contract with the serve role; it is
documented field by field in docs/launch-plan.md. Stdlib only, Python 3.11 compatible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmb.finding import Finding

# One thing wrong with an inventory, found before any host is contacted: the project's one finding
# type (llmb.finding), called a problem here; ``check`` is its id.
Problem = Finding


class PlanError(Exception):
    """Raised when an inventory cannot be planned; carries every problem found."""

    def __init__(self, problems: list[Problem], source: str = "inventory"):
        self.problems = list(problems)
        self.source = source
        super().__init__(self.report())

    def report(self) -> str:
        n = len(self.problems)
        head = f"launch plan: {n} problem{'s' if n != 1 else ''} in {self.source}; no host was contacted."
        body = "\n".join(p.block(i + 1) for i, p in enumerate(self.problems))
        return f"{head}\n{body}"


@dataclass
class Service:
    """One supervised process on one host (systemd unit, container, or mpirun launcher)."""

    name: str
    kind: str  # systemd | container | mpirun
    role: str
    argv: list[str]
    order: int
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    devices: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    ports: list[dict[str, Any]] = field(default_factory=list)
    container: dict[str, Any] | None = None
    exec_in: str | None = None
    stop_argv: list[str] | None = None
    depends_on: list[str] = field(default_factory=list)
    ready: dict[str, Any] | None = None
    health: dict[str, Any] | None = None
    api: dict[str, Any] | None = None
    config_files: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # health checks that must pass before this service starts (a router after its groups); in the JSON
    # only when set, so plans without one keep their form
    after_healthy: list[dict[str, Any]] = field(default_factory=list)
    # Python packages (pinned requirements) the service runs beside the engine on a host install (the
    # PD router, a KV transfer library): the engine stage installs them with the engine; in the JSON
    # only when set
    packages: list[str] = field(default_factory=list)
    # the service's compile and kernel cache directory (llmb_compile_cache_dir/<service>, its env names the
    # subdirectories): the serve role creates it; in the JSON only when set
    cache_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = self._fields()
        if self.cache_dir:
            out["cache_dir"] = self.cache_dir
        if self.after_healthy:
            out["after_healthy"] = [dict(h) for h in self.after_healthy]
        if self.packages:
            out["packages"] = list(self.packages)
        return out

    def _fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "role": self.role,
            "order": self.order,
            "argv": list(self.argv),
            "env": dict(self.env),
            "image": self.image,
            "devices": list(self.devices),
            "mounts": list(self.mounts),
            "ports": [dict(p) for p in self.ports],
            "container": dict(self.container) if self.container is not None else None,
            "exec_in": self.exec_in,
            "stop_argv": list(self.stop_argv) if self.stop_argv is not None else None,
            "depends_on": list(self.depends_on),
            "ready": dict(self.ready) if self.ready is not None else None,
            "health": dict(self.health) if self.health is not None else None,
            "api": dict(self.api) if self.api is not None else None,
            "config_files": [dict(c) for c in self.config_files],
            "notes": list(self.notes),
        }


@dataclass
class HostPlan:
    host: str
    address: str
    rank: int
    services: list[Service] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    # a control node: a host outside accel_nodes that runs no engine and has no accelerators (the PD
    # router's); in the JSON only when set, so the plans of accelerator nodes keep their form
    control: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = {
            "host": self.host,
            "address": self.address,
            "rank": self.rank,
            "model": dict(self.model),
            "services": [s.to_dict() for s in sorted(self.services, key=lambda s: (s.order, s.name))],
        }
        if self.control:
            out["control"] = True
        return out


class Planned:
    """Result of planning: host plans plus the context, topology and notes behind them."""

    def __init__(self, ctx: Any, topology: Any, hosts: list[HostPlan]):
        self.ctx = ctx
        self.topology = topology
        self.hosts = hosts

    def to_list(self) -> list[dict[str, Any]]:
        return [h.to_dict() for h in self.hosts]

    @property
    def notes(self) -> list[str]:
        return list(dict.fromkeys(self.ctx.notes))
