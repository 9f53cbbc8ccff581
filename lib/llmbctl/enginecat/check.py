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

from ..catalog import Catalog
from ..planner import PlanError, plan_inventory
from . import (
    ENGINES,
    ExtractError,
    apply_stubbed,
    build_doc,
    make_source_venv,
    make_venv,
    release_requirements_of,
    render,
    run_in_venv,
    spec_of,
    write_atomic,
)


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
                    router = _router_case(cat, inv.name, host["host"], svc, argv)
                    if router is not None:  # the PD router: the release its package pin names
                        cases.append(router)
                        continue
                    for key in (engine, "ray"):
                        if key not in ENGINES:
                            continue
                        ver = version if key == engine else _ray_version(cat)
                        if ver is None:
                            continue
                        args = split_command(argv, list(spec_of(key, ver).command))
                        if args is None:
                            continue
                        cases.append(Case(f"{inv.name}/{host['host']}/{svc['name']}", inv.name, key, ver, args))
                        break
    return cases, summary


ROUTERS = ("sglang-router", "smg")


def _router_case(cat: Any, inventory: str, host: str, svc: dict[str, Any], argv: list[str]) -> Case | None:
    """A PD router's argv as a case for the router release the service installs (its package pin,
    e.g. sglang-router==0.3.2), when that release ships a set; None for any other service."""
    for key in ROUTERS:
        args = split_command(argv, list(ENGINES[key].command))
        if args is None:
            continue
        pins = [str(p).partition("==")[2] for p in svc.get("packages") or []
                if str(p).partition("==")[0] == ENGINES[key].dist]
        version = pins[0] if pins else (cat.newest_version(key) or None)
        if version is None or version not in cat.flagset_versions(key):
            return None
        return Case(f"{inventory}/{host}/{svc['name']}", inventory, key, version, args)
    return None


def _ray_version(cat: Any) -> str | None:
    versions = cat.flagset_versions("ray")
    return versions[-1] if versions else None


def _render_again(engine: str, version: str, venv: Path, shipped: dict, source: Path | None) -> str:
    """The file text a regeneration from ``venv`` writes (same generator block as the shipped file)."""
    eng = spec_of(engine, version)
    raw = run_in_venv(venv, [eng.extractor], source=source)
    if source is not None:
        reqs = shipped.get("requirements", {})  # not read from this venv (source mode: no release installed)
    else:
        reqs = release_requirements_of(venv, eng, version)
    doc = build_doc(raw, eng, version, reqs, shipped.get("generator", {}))
    apply_stubbed(doc, raw.get("stubbed") or {})
    return render(doc)


def _regenerated(engine: str, version: str, venv: Path, data_dir: Path, source: Path | None,
                 update: bool = False) -> str:
    """Regenerate the release's set from the venv just used and compare it with the shipped file;
    with ``update``, write a differing file and regenerate once more to show the new one is stable."""
    path = data_dir / "engines" / f"{engine}-{version}.yml"
    if not path.is_file():
        return "no shipped file"
    try:
        shipped = Catalog(data_dir).flagset_doc(f"{engine}-{version}") or {}
        text = _render_again(engine, version, venv, shipped, source)
        if text == path.read_text(encoding="utf-8"):
            return "byte-identical"
        if not update:
            return "DIFFERS"
        write_atomic(path, text)
        again = _render_again(engine, version, venv, Catalog(data_dir).flagset_doc(f"{engine}-{version}") or {},
                              source)
        return ("updated (the generator changed); regenerated again: byte-identical" if again == text
                else "updated, but a second regeneration DIFFERS")
    except ExtractError as err:
        return f"not regenerated: {err}"


def check_release(engine: str, version: str, cases: list[Case], venv_dir: Path | None, log=print,
                  source: Path | None = None, data_dir: Path | None = None, update: bool = False
                  ) -> list[dict[str, Any]]:
    """parse_args of every case in the release's own venv: [{id, ok, error}]; with ``data_dir``, one more
    entry {"regenerated": ...}: the shipped set regenerated from that venv, compared byte for byte."""
    import json

    eng = spec_of(engine, version)
    payload = json.dumps([{"id": c.id + f"@{version}", "args": c.args} for c in cases])

    def run(venv: Path) -> list[dict[str, Any]]:
        out = run_in_venv(venv, ["check", eng.extractor], stdin=payload, source=source)
        if data_dir is not None:
            log(f"{engine} {version}: regenerating the shipped set from this venv")
            out.append({"regenerated": _regenerated(engine, version, venv, data_dir, source, update)})
        return out

    reuse = venv_dir / f"{engine}-{version}" if venv_dir else None
    if reuse is not None and (reuse / "bin" / "python").exists():
        return run(reuse)
    work = Path(tempfile.mkdtemp(prefix=f"engcheck-{engine}-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        if source is not None:
            venv = make_source_venv(eng, work)
        else:
            venv = make_venv(eng, version, work, log=log)
        return run(venv)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_check(root: Path, inventories: list[Path], venv_dir: Path | None = None, only: set[str] | None = None,
              log=print, sources: dict[str, Path] | None = None, regenerate: bool = True, update: bool = False
              ) -> tuple[list[InventoryResult], list[tuple[str, str, dict[str, Any]]], list[str]]:
    """(per-inventory summary, [(engine, version, result)], releases that could not be loaded).
    ``sources``: engine==version -> source file, for releases walked in source mode (TensorRT-LLM)."""
    sources = sources or {}
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
            src = sources.get(f"{engine}=={version}") or sources.get(f"{ENGINES[engine].dist}=={version}")
            for r in check_release(engine, version, group, venv_dir, log=log, source=src,
                                   data_dir=root / "data" if regenerate else None, update=update):
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
    regen: dict[tuple[str, str], str] = {}
    for engine, version, r in results:
        if "regenerated" in r:
            regen[(engine, version)] = r["regenerated"]
            continue
        per.setdefault((engine, version), []).append(r)
    for (engine, version), rs in sorted(per.items()):
        bad = [f"{r['id']}: {r['error']}" for r in rs if not r["ok"]]
        lines.append(f"| {engine} {version} | {len(rs)} | {sum(1 for r in rs if r['ok'])} | "
                     f"{'; '.join(bad).replace('|', '/') or '-'} |")
    if regen:
        lines += ["", "Each shipped set regenerated from the venv the check used, compared with the shipped file:", "",
                  "| release | regenerated |", "|---|---|"]
        lines += [f"| {e} {v} | {what.replace('|', '/')[:300]} |" for (e, v), what in sorted(regen.items())]
    for u in unloadable:
        lines.append(f"\nNot loadable on this machine: {u}")
    return "\n".join(lines) + "\n"
