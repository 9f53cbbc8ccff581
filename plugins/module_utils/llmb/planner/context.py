"""Resolve an inventory's names (platform, model, engine, preset) into the data they point to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..catalog import Catalog, CatalogError, ModelRecord, PlatformRecord, PresetRecord
from .flags import FlagSet
from .inventory import Deployment
from .model import Problem


@dataclass
class Context:
    dep: Deployment
    data: Catalog
    platform: PlatformRecord
    model_name: str
    model: dict[str, Any]  # the model profile mapping (model_record.raw), for per-engine sections
    engine: str
    version: str
    flagset: FlagSet
    preset_name: str | None
    preset: dict[str, Any] | None  # the preset mapping (preset_record.raw)
    model_record: ModelRecord
    preset_record: PresetRecord | None = None
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


def _bad_file(check: str, err: CatalogError, fix: str) -> Problem:
    return Problem(check=check, message=str(err), found=err.path, fix=fix)


def resolve(dep: Deployment, data: Catalog) -> tuple[Context | None, list[Problem]]:
    v = dep.vars
    problems: list[Problem] = []

    platform = None
    pname = v.get("llmb_platform")
    if pname:
        if pname not in data.platform_names():
            problems.append(
                Problem(
                    check="platform",
                    message=f"unknown platform {pname!r}",
                    found=pname,
                    expected=_listing(data.platform_names()),
                    fix="set llmb_platform to one of the profiles in data/platforms/",
                )
            )
        else:
            try:
                platform = data.platform(pname)
            except CatalogError as err:
                problems.append(_bad_file("platform", err, "fix the profile (docs/verify.md describes its keys)"))

    model = None
    mname = v.get("llmb_model")
    if mname:
        if mname not in data.model_names():
            problems.append(
                Problem(
                    check="model",
                    message=f"no model profile data/models/{mname}.yml",
                    found=mname,
                    expected=_listing(data.model_names()),
                    fix="set llmb_model to one of the profiles, or add data/models/<name>.yml",
                )
            )
        else:
            try:
                model = data.model(mname)
            except CatalogError as err:
                problems.append(_bad_file("model", err, f"fix data/models/{mname}.yml"))

    flagset = None
    engine = v.get("llmb_engine")
    version = v.get("llmb_engine_version")
    if engine:
        try:
            versions = data.flagset_versions(engine)
        except CatalogError as err:
            problems.append(_bad_file("engine-version", err, "fix the flag set file"))
            versions = []
        if version is None and versions:
            version = versions[-1]  # the default is the newest shipped release (oldest first)
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
            try:
                flagset = data.flagset(engine, version)
            except CatalogError as err:
                problems.append(_bad_file("engine-version", err, "fix the flag set file"))
            else:
                if flagset is None:
                    problems.append(
                        Problem(
                            check="engine-version",
                            message=f"no flag set for {engine} {version}: the planner cannot tell which flags "
                            "it accepts",
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
        if preset_name not in data.preset_names():
            problems.append(
                Problem(
                    check="preset",
                    message=f"unknown tuning preset {preset_name!r}",
                    found=preset_name,
                    expected=_listing(data.preset_names()) + ", none",
                    fix="set llmb_preset to one of the presets or to none",
                )
            )
        else:
            try:
                preset = data.preset(preset_name)
            except CatalogError as err:
                problems.append(_bad_file("preset", err, f"fix data/presets/{preset_name}.yml"))

    if problems or platform is None or model is None or flagset is None:
        return None, problems
    return (
        Context(
            dep=dep,
            data=data,
            platform=platform,
            model_name=mname,
            model=model.raw,
            engine=engine,
            version=version,
            flagset=flagset,
            preset_name=preset_name,
            preset=preset.raw if preset is not None else None,
            model_record=model,
            preset_record=preset,
        ),
        [],
    )
