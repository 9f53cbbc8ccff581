"""The real-parser check (`make engine-check`): every sample inventory's planned argv, for every
shipped release of its engine that the planner allows, fed to that release's own parser.

    cases = planned_cases(inventories, data_dir)        # planner side, no hosts contacted
    results = check_release(eng, version, cases, venv)  # parse_args in the release's venv
    render_report(...)                                   # the table kept in docs/engines.md

Releases are installed one at a time into a throwaway venv and deleted after (or taken from
``--venv-dir DIR/<engine>-<version>`` when such a venv exists).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ENGINES, ExtractError, make_venv, run_in_venv


@dataclass
class Case:
    id: str  # inventory/host/service
    inventory: str
    engine: str  # whose parser checks it (vllm, sglang, ray, trtllm, vllm-ascend)
    version: str
    args: list[str]


@dataclass
class InventoryResult:
    inventory: str
    engine: str
    pinned: str | None
    allowed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # release -> the planner's first problem


def _launch_plan_module(root: Path) -> Any:
    path = root / "scripts" / "launch-plan"
    loader = importlib.machinery.SourceFileLoader("llmb_launch_plan", str(path))
    spec = importlib.util.spec_from_loader("llmb_launch_plan", loader)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    loader.exec_module(mod)
    return mod


def split_command(argv: list[str], command: list[str]) -> list[str] | None:
    """The arguments after ``command`` (e.g. ['vllm', 'serve']) inside a planned argv; None when the
    argv does not run that command (docker wrappers and interpreter paths are skipped)."""
    n = len(command)
    for i in range(len(argv) - n + 1):
        head = os.path.basename(str(argv[i]))
        if head == command[0] or (command[0] == "python" and head.startswith("python")):
            if [str(x) for x in argv[i + 1:i + n]] == command[1:]:
                return [str(x) for x in argv[i + n:]]
    return None


def planned_cases(root: Path, inventories: list[Path], data_dir: Path | None = None
                  ) -> tuple[list[Case], list[InventoryResult]]:
    from ..catalog import Catalog
    from ..planner import PlanError, plan_inventory

    lp = _launch_plan_module(root)
    cat = Catalog(data_dir)
    cases: list[Case] = []
    summary: list[InventoryResult] = []
    for inv in inventories:
        hostvars, groups = lp.load_inventory(str(inv))
        first = next(iter(hostvars.values()), {})
        engine = first.get("llmb_engine")
        if not engine:
            continue
        res = InventoryResult(inv.name, engine, first.get("llmb_engine_version"))
        summary.append(res)
        for version in cat.flagset_versions(engine):
            hv = {h: dict(v, llmb_engine_version=version) for h, v in hostvars.items()}
            try:
                planned = plan_inventory(hv, groups, str(data_dir) if data_dir else None,
                                         source=f"inventory {inv}")
            except PlanError as err:
                p = err.problems[0]
                res.refused[version] = f"{p.check}: {p.message}"
                continue
            res.allowed.append(version)
            for host in planned.to_list():
                for svc in host["services"]:
                    argv = [str(a) for a in svc.get("argv") or []]
                    for key in (engine, "ray"):
                        spec = ENGINES.get(key)
                        if spec is None:
                            continue
                        args = split_command(argv, list(spec.command))
                        if args is None:
                            continue
                        ver = version if key == engine else _ray_version(cat)
                        if ver is None:
                            continue
                        cases.append(Case(f"{inv.name}/{host['host']}/{svc['name']}", inv.name, key, ver, args))
                        break
    return cases, summary


def _ray_version(cat: Any) -> str | None:
    versions = cat.flagset_versions("ray")
    return versions[-1] if versions else None


def check_release(engine: str, version: str, cases: list[Case], venv_dir: Path | None, log=print
                  ) -> list[dict[str, Any]]:
    """parse_args of every case in the release's own venv: [{id, ok, error}]."""
    import json

    eng = ENGINES[engine]
    payload = json.dumps([{"id": c.id + f"@{version}", "args": c.args} for c in cases])
    reuse = venv_dir / f"{engine}-{version}" if venv_dir else None
    if reuse is not None and (reuse / "bin" / "python").exists():
        return run_in_venv(reuse, ["check", eng.extractor], stdin=payload)
    work = Path(tempfile.mkdtemp(prefix=f"engcheck-{engine}-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        venv = make_venv(eng, version, work, log=log)
        return run_in_venv(venv, ["check", eng.extractor], stdin=payload)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_check(root: Path, inventories: list[Path], venv_dir: Path | None = None, only: set[str] | None = None,
              log=print) -> tuple[list[InventoryResult], list[tuple[str, str, dict[str, Any]]], list[str]]:
    """(per-inventory summary, [(engine, version, result)], releases that could not be loaded)."""
    cases, summary = planned_cases(root, inventories)
    by_release: dict[tuple[str, str], list[Case]] = {}
    for c in cases:
        by_release.setdefault((c.engine, c.version), []).append(c)
    results: list[tuple[str, str, dict[str, Any]]] = []
    unloadable: list[str] = []
    for (engine, version), group in sorted(by_release.items()):
        if only and f"{engine}=={version}" not in only and engine not in only:
            continue
        log(f"{engine} {version}: {len(group)} planned argv")
        try:
            for r in check_release(engine, version, group, venv_dir, log=log):
                results.append((engine, version, r))
        except ExtractError as err:
            unloadable.append(f"{engine} {version}: {err}")
    return summary, results, unloadable


def render_report(date: str, summary: list[InventoryResult], results: list[tuple[str, str, dict[str, Any]]],
                  unloadable: list[str]) -> str:
    lines = [f"Run of {date} (`make engine-check`):", ""]
    lines += ["| inventory | engine | pinned | releases the planner allows | refused by the planner |",
              "|---|---|---|---|---|"]
    for s in summary:
        refused = "; ".join(f"{v}: {m[:140]}" for v, m in s.refused.items()) or "-"
        lines.append(f"| {s.inventory} | {s.engine} | {s.pinned or '(newest)'} | {' '.join(s.allowed) or '-'} "
                     f"| {refused.replace('|', '/')} |")
    lines += ["", "| release | planned argv | accepted by its parser | rejected |", "|---|---|---|---|"]
    per: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for engine, version, r in results:
        per.setdefault((engine, version), []).append(r)
    for (engine, version), rs in sorted(per.items()):
        bad = [f"{r['id']}: {r['error']}" for r in rs if not r["ok"]]
        lines.append(f"| {engine} {version} | {len(rs)} | {sum(1 for r in rs if r['ok'])} | "
                     f"{'; '.join(bad).replace('|', '/') or '-'} |")
    for u in unloadable:
        lines.append(f"\nNot loadable on this machine: {u}")
    return "\n".join(lines) + "\n"
