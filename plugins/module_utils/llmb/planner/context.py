"""Resolve an inventory's names (platform, model, engine, preset) into the data they point to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .data import DataDir, Platform
from .flags import FlagSet, load_flagset
from .inventory import Deployment
from .model import Problem


@dataclass
class Context:
    dep: Deployment
    data: DataDir
    platform: Platform
    model_name: str
    model: dict[str, Any]
    engine: str
    version: str
    flagset: FlagSet
    preset_name: str | None
    preset: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    @property
    def v(self) -> dict[str, Any]:
        return self.dep.vars

    @property
    def served_name(self) -> str:
        return str(
            self.v.get("llmb_served_model_name") or self.model.get("served_model_name") or self.model_name
        )

    @property
    def engine_family(self) -> str:
        """Key used for per-engine sections of model profiles and presets."""
        return self.engine


def _listing(names: list[str]) -> str:
    return ", ".join(names) if names else "(none)"


def resolve(dep: Deployment, data: DataDir) -> tuple[Context | None, list[Problem]]:
    v = dep.vars
    problems: list[Problem] = []

    platform = None
    pname = v.get("llmb_platform")
    if pname:
        platform = data.platform(pname)
        if platform is None:
            path = data.root / "platforms" / f"{pname}.yml"
            if path.is_file():
                problems.append(
                    Problem(
                        check="platform",
                        message=f"platform profile {path} lacks devices.count / devices.memory_mib",
                        found=str(path),
                        fix="fix the profile (the verify stage owns data/platforms/)",
                    )
                )
            else:
                problems.append(
                    Problem(
                        check="platform",
                        message=f"unknown platform {pname!r}",
                        found=pname,
                        expected=_listing(data.platform_names()),
                        fix="set llmb_platform to one of the profiles in data/platforms/",
                    )
                )

    model = None
    mname = v.get("llmb_model")
    if mname:
        model = data.model(mname)
        if model is None:
            problems.append(
                Problem(
                    check="model",
                    message=f"no model profile data/models/{mname}.yml",
                    found=mname,
                    expected=_listing(data.model_names()),
                    fix="set llmb_model to one of the profiles, or add data/models/<name>.yml",
                )
            )

    flagset = None
    engine = v.get("llmb_engine")
    version = v.get("llmb_engine_version")
    if engine:
        versions = data.flagset_versions(engine)
        if version is None and len(versions) == 1:
            version = versions[0]
        if version is None:
            problems.append(
                Problem(
                    check="engine-version",
                    message=f"llmb_engine_version is not set and {engine} has {len(versions)} pinned versions",
                    expected=_listing(versions),
                    fix="set llmb_engine_version to a pinned version",
                )
            )
        else:
            version = str(version)
            flagset = load_flagset(data, engine, version)
            if flagset is None:
                problems.append(
                    Problem(
                        check="engine-version",
                        message=f"no flag set for {engine} {version}: the planner cannot tell which flags it accepts",
                        found=f"data/engines/{engine}-{version}.yml missing",
                        expected=_listing(versions),
                        fix=f"pin one of the versions above, or extract the flags of {engine} {version} "
                        f"into data/engines/{engine}-{version}.yml",
                    )
                )

    preset = None
    preset_name = v.get("llmb_preset")
    if preset_name in ("none", ""):
        preset_name = None
    if preset_name:
        preset = data.preset(preset_name)
        if preset is None:
            problems.append(
                Problem(
                    check="preset",
                    message=f"unknown tuning preset {preset_name!r}",
                    found=preset_name,
                    expected=_listing(data.preset_names()) + ", none",
                    fix="set llmb_preset to one of the presets or to none",
                )
            )

    if problems or platform is None or model is None or flagset is None:
        return None, problems
    ctx = Context(
        dep=dep,
        data=data,
        platform=platform,
        model_name=mname,
        model=model,
        engine=engine,
        version=version,
        flagset=flagset,
        preset_name=preset_name,
        preset=preset,
    )
    if platform.source == "builtin":
        ctx.notes.append(
            f"platform {platform.name}: data/platforms/{platform.name}.yml not found; "
            "used the planner's builtin device count and memory"
        )
    return ctx, []
