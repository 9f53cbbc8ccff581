"""The fast path of a converged re-run (issue 29), controller side: what a stage's run on one host
depends on (its digest) and what of the node's state it watches (the node compares both with its
record in one module call: llmb.stagegate, plugins/modules/llmb_stage_gate.py).

A stage's inputs for a host:
- its part of the deployment document (STAGE_SECTIONS: the shared sections it reads and this host's
  entry; the serve stage reads the whole plan: every node's services, the group's start order);
- the stage's variables as the inventory and the command line set them (the role's prefix, and every
  ``llmb_*`` variable but the run's own facts: an API key, say), templated;
- the toolkit's own code that runs it: the stage's roles and playbook, and plugins/ (modules, filters,
  module_utils), so that an upgraded toolkit runs every stage once in full.
The run id, the artifacts directory and the document's hash are not inputs (they change every run).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmb.container import SPEC_LABEL

ROOT = Path(__file__).resolve().parents[2]

STAGES = ("engine", "weights", "ssh_mesh", "serve")

# the shared sections of the document each stage reads, and the fields of the host's own entry
STAGE_SECTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "engine": (("engine", "platform", "dirs", "pins"), ("packages",)),
    "weights": (("model", "engine", "platform", "dirs", "pins"), ("config_patches", "address", "rank")),
    "ssh_mesh": (("dirs", "ports", "platform", "engine"), ("address", "rank")),
    "serve": (("engine", "model", "platform", "dirs", "ports", "start_levels", "pins"),
              ("address", "rank", "plan", "packages")),
}
# stages that read every node's entry, not only the host's (a peer's address, plan or host key)
PEERS = {"weights": ("address", "rank"), "ssh_mesh": ("address", "rank"), "serve": ("address", "rank", "plan")}
PREFIXES = {"engine": ("engine_host_", "engine_image_"), "weights": ("weights_",), "ssh_mesh": ("ssh_mesh_",),
            "serve": ("serve_",)}
CODE = {"engine": ("roles/engine_host", "roles/engine_image", "playbooks/engine.yml"),
        "weights": ("roles/weights", "playbooks/weights.yml"),
        "ssh_mesh": ("roles/ssh_mesh", "playbooks/ssh_mesh.yml"),
        "serve": ("roles/serve", "playbooks/serve.yml")}
CODE_COMMON = ("plugins", "playbooks/tasks/stage_gate.yml", "playbooks/tasks/stage_gate_once.yml",
               "playbooks/tasks/stage_gate_each.yml")
# llmb_* names that are the run's own facts, not inputs (playbooks/_run.yml sets them every run)
RUN_FACTS = frozenset({"llmb_run_id", "llmb_artifacts_dir", "llmb_deployment", "llmb_deployment_doc",
                       "llmb_stage_started", "llmb_report_stages", "llmb_stage_needs_plan", "llmb_accel",
                       "llmb_fast_rerun"})


class StageGateError(ValueError):
    pass


def _stage(stage: str) -> str:
    if stage not in STAGES:
        raise StageGateError(f"stage: expected one of {', '.join(STAGES)}, found {stage!r}")
    return stage


def doc_part(doc: Mapping[str, Any], host: str, stage: str) -> dict[str, Any]:
    """The part of the deployment document the stage reads for ``host``."""
    shared, own = STAGE_SECTIONS[_stage(stage)]
    hosts = doc.get("hosts") or {}
    mine = hosts.get(host) or {}
    part = {"shared": {k: doc.get(k) for k in shared}, "host": {k: mine.get(k) for k in own}, "name": host}
    if stage in PEERS:
        part["peers"] = {h: {k: (e or {}).get(k) for k in PEERS[stage]} for h, e in sorted(hosts.items())}
    return part


def knobs(hostvars: Mapping[str, Any], stage: str) -> dict[str, Any]:
    """The stage's variables as the inventory and the command line set them for the host, templated
    (a value that cannot be templated counts as its error's text)."""
    prefixes = PREFIXES[_stage(stage)]
    out: dict[str, Any] = {}
    for name in sorted(str(k) for k in hostvars.keys()):
        if not (name.startswith(prefixes) or (name.startswith("llmb_") and name not in RUN_FACTS)):
            continue
        try:
            out[name] = hostvars[name]
        except Exception as err:  # noqa: BLE001 (an undefined or broken template is an input as it stands)
            out[name] = f"<cannot template: {type(err).__name__}>"
    return out


_CODE_CACHE: dict[tuple, str] = {}


def code_digest(paths: tuple[str, ...], root: Path = ROOT) -> str:
    """sha256 over the files under ``paths`` (relative to ``root``): names and contents, caches skipped."""
    files: list[Path] = []
    for rel in paths:
        p = root / rel
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files += [f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                      and not f.name.endswith((".pyc", ".pyo"))]
    files.sort()
    key = (str(root), tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files))
    if key not in _CODE_CACHE:
        h = hashlib.sha256()
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
        _CODE_CACHE[key] = h.hexdigest()
    return _CODE_CACHE[key]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def inputs(doc: Mapping[str, Any], host: str, stage: str, hostvars: Mapping[str, Any],
           root: Path = ROOT) -> dict[str, Any]:
    """Everything the stage's run on ``host`` depends on (what the digest is taken of)."""
    return {"stage": stage, "document": doc_part(doc, host, stage), "variables": knobs(hostvars, stage),
            "code": code_digest(CODE[stage] + CODE_COMMON, root)}


def digest(doc: Mapping[str, Any], host: str, stage: str, hostvars: Mapping[str, Any], root: Path = ROOT) -> str:
    return "sha256:" + hashlib.sha256(_canonical(inputs(doc, host, stage, hostvars, root)).encode()).hexdigest()


def watch(doc: Mapping[str, Any], host: str, stage: str) -> dict[str, list]:
    """What of the node's state the stage made and a later run compares with its record (cheap to read:
    small files hashed, big ones stat'ed, units, listeners and health endpoints asked once)."""
    _stage(stage)
    dirs = doc.get("dirs") or {}
    engine = doc.get("engine") or {}
    model = doc.get("model") or {}
    w: dict[str, list] = {}
    if stage == "engine":
        if engine.get("install") == "container":
            w["commands"] = [["docker", "images", "--digests", "--no-trunc",
                              "--format", "{{.Repository}}:{{.Tag}}@{{.Digest}} {{.ID}}"]]
        elif engine.get("venv"):
            venv = engine["venv"]
            w["hash"] = [f"{venv}/pyvenv.cfg"]
            w["names"] = [f"{venv}/lib/python*/site-packages/*.dist-info", f"{dirs.get('uv', '/opt/llmb/uv')}/*/bin/uv"]
    elif stage == "weights" and model.get("dir"):
        d = model["dir"]
        w["hash"] = [f"{d}/config.json"]
        w["stat"] = [f"{d}/*", f"{d}/.*", f"{d}/*/*"]
        if dirs.get("tools"):
            w["names"] = [f"{dirs['tools']}/*"]
    elif stage == "ssh_mesh":
        w["hash"] = [f"{dirs.get('ssh_mesh', '/etc/llmb/ssh-mesh')}/*", "/root/.ssh/authorized_keys",
                     "/root/.ssh/config", "/etc/systemd/system/llmb-sshd*"]
    elif stage == "serve":
        plan = ((doc.get("hosts") or {}).get(host) or {}).get("plan") or {}
        services = plan.get("services") or []
        etc = dirs.get("etc", "/etc/llmb")
        w["hash"] = ["/etc/systemd/system/llmb-*", f"{etc}/*.env", f"{dirs.get('opt', '/opt/llmb')}/bin/*"]
        w["hash"] += sorted({c["path"] for s in services for c in (s.get("config_files") or []) if c.get("path")})
        if any("LLMB_BIND_PORTS" in (s.get("env") or {}) for s in services) and dirs.get("bindto"):
            w["hash"].append(dirs["bindto"])
        w["units"] = [s["name"] if "." in s["name"] else s["name"] + ".service" for s in services
                      if s.get("kind") in ("systemd", "mpirun", "exec")]
        # running, its image and the serve role's spec label (SPEC_LABEL): a container
        # started by hand under the planned name, or with another argv, is not the planned one
        w["commands"] = [["docker", "inspect", "-f",
                          '{{.State.Running}} {{.Image}} {{index .Config.Labels "' + SPEC_LABEL + '"}}',
                          (s.get("container") or {}).get("name") or s["name"]]
                         for s in services if s.get("kind") == "container"]
        w["tcp"] = [[s["ready"]["host"], int(s["ready"]["port"])] for s in services
                    if (s.get("ready") or {}).get("type") == "tcp" and s["ready"].get("host") and s["ready"].get("port")]
        w["http"] = [s["health"]["url"] for s in services if (s.get("health") or {}).get("url")]
    return {k: v for k, v in w.items() if v}


def digests(doc: Mapping[str, Any], hosts: list[str], stage: str, hostvars: Mapping[str, Any],
            root: Path = ROOT) -> dict[str, str]:
    """The stage's digest for each of ``hosts`` (``hostvars``: every host's variables, Ansible's hostvars)."""
    return {h: digest(doc, h, stage, hostvars[h], root) for h in hosts}


def specs(doc: Mapping[str, Any], host: str, hostvars: Mapping[str, Any], stages: tuple[str, ...] = STAGES,
          root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """Every gated stage's digest and watch for ``host``: site.yml's one check_all call per host, right
    after stage 0 (playbooks/_gates.yml), asks the node for all of them at once."""
    return {s: {"digest": digest(doc, host, s, hostvars, root), "watch": watch(doc, host, s)} for s in stages}


def prefetched(gates: Any, stage: str, acted: Any, digest_now: str) -> dict[str, Any]:
    """The verdict of this run's one check_all call (``gates``: its registered result on the host) that
    the stage may use instead of asking the node again, or {} (ask the node, as a single-stage run does).

    The verdict holds for the inputs it was asked with: a digest other than the stage's own now (a
    variable set by an earlier stage of the run, say) asks the node again.

    A verdict is only as fresh as the node it was read from: once an earlier gated stage ran in full on
    the host in this run (``acted``: those stages, in the order of STAGES), what it did may change what a
    later stage finds (the engine reinstalled: serve's units restarted, its record's observations stale),
    so every later stage asks the node again. A skipped or failed call, a verdict missing or malformed:
    {} too."""
    _stage(stage)
    if not isinstance(acted, (list, tuple)):
        raise StageGateError(f"acted: expected the list of stages that ran in full, found {acted!r:.80}")
    unknown = [a for a in acted if a not in STAGES]
    if unknown:
        raise StageGateError(f"acted: unknown stage(s) {', '.join(map(str, unknown))}")
    if any(STAGES.index(a) < STAGES.index(stage) for a in acted):
        return {}
    if not isinstance(gates, Mapping) or gates.get("skipped") or gates.get("failed"):
        return {}
    verdict = (gates.get("verdicts") or {}).get(stage) if isinstance(gates.get("verdicts"), Mapping) else None
    if not isinstance(verdict, Mapping) or not isinstance(verdict.get("converged"), bool) \
            or not isinstance(verdict.get("differs"), list) or verdict.get("digest") != digest_now:
        return {}
    return {"converged": verdict["converged"], "differs": list(verdict["differs"]),
            "record": verdict.get("record"), "prefetched": True}


def prefetched_all(stage: str, hosts: Any, gates: Any, acted: Any, digests: Any) -> dict[str, Any]:
    """The stage's verdict for every host of the play at once, from this run's check_all results alone
    (one task run once on the controller, no call to a node): ``converged`` only where every host has a
    verdict that holds (``prefetched``: this run's check_all, no earlier gated stage acted on it, the same
    digest) and every one is converged; otherwise ``converged`` false with the reasons (``differs``), and
    the stage's gate asks per host as before. ``gates``, ``acted``, ``digests``: {host: its value}."""
    _stage(stage)
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) for h in hosts):
        raise StageGateError(f"hosts: expected a list of host names, found {hosts!r:.80}")
    for name, value in (("gates", gates), ("acted", acted), ("digests", digests)):
        if not isinstance(value, Mapping):
            raise StageGateError(f"{name}: expected {{host: value}}, found {value!r:.80}")
    differs: list[str] = []
    verdicts: dict[str, dict[str, Any]] = {}
    for host in hosts:
        verdict = prefetched(gates.get(host), stage, acted.get(host) or [], str(digests.get(host)))
        if not verdict:
            differs.append(f"{host}: no verdict of this run's check_all holds (the node is asked)")
        elif not verdict["converged"]:
            differs += [f"{host}: {d}" for d in verdict["differs"]]
        verdicts[host] = verdict
    return {"converged": bool(hosts) and not differs, "differs": differs, "hosts": verdicts, "prefetched": True}


def shell_reader(w: Mapping[str, list]) -> str:
    """A POSIX shell command that reads the same state as the watch (the benchmark's SSH loop,
    tests/perf/bench_rerun.py): the limit the module call is measured against."""
    import shlex

    parts = []
    for p in w.get("hash", []):
        parts.append(f"sha256sum {p} 2>/dev/null")
    for p in w.get("stat", []):
        parts.append(f"stat -c '%n %s %Y %f' {p} 2>/dev/null")
    for p in w.get("names", []):
        parts.append(f"ls -d {p} 2>/dev/null")
    if w.get("units"):
        parts.append("systemctl show -p Id,ActiveState,UnitFileState -- " + " ".join(map(shlex.quote, w["units"])))
    for host, port in w.get("tcp", []):
        parts.append(f"timeout 2 bash -c {shlex.quote(f'echo > /dev/tcp/{host}/{port}')}")
    for url in w.get("http", []):
        parts.append(f"python3 -c {shlex.quote('import sys,urllib.request as u; print(u.urlopen(sys.argv[1], timeout=3).status)')} "
                     + shlex.quote(url))
    for argv in w.get("commands", []):
        parts.append(shlex.join(argv) + " 2>/dev/null")
    return "; ".join(parts) + "; true" if parts else "true"

