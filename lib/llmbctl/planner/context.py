"""Resolve an inventory's names (platform, model, engine, preset) into the data they point to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..catalog import Catalog, CatalogError, ModelRecord, PlatformRecord, PresetRecord
from ..engines.registry import FlagSet
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


def _not_pinned(message: str, found: Any, versions: list[str], fix: str) -> Problem:
    """engine-version: no flag set of the engine for the release asked (or none asked among several)."""
    return Problem(check="engine-version", message=message, found=found, expected=_listing(versions), fix=fix)


def _catalog_record(
    check: str,
    name: Any,
    names: Callable[[], list[str]],
    load: Callable[[str], Any],
    problems: list[Problem],
    *,
    unknown: str,
    fix: str,
    bad_fix: str,
    also_allowed: str = "",
) -> Any:
    """The catalog record ``name`` refers to (None when it is unset): a problem when ``name`` is not one
    of ``names()`` (message ``unknown``) or when its file does not load (``bad_fix``)."""
    if not name:
        return None
    known = names()
    if name not in known:
        problems.append(
            Problem(check=check, message=unknown, found=name, expected=_listing(known) + also_allowed, fix=fix)
        )
        return None
    try:
        return load(name)
    except CatalogError as err:
        problems.append(_bad_file(check, err, bad_fix))
        return None


def resolve(
    dep: Deployment, data: Catalog, default_version: str | None = None
) -> tuple[Context | None, list[Problem]]:
    """default_version: the release when llmb_engine_version is unset (the lock's); else the newest."""
    v = dep.vars
    problems: list[Problem] = []

    pname = v.get("llmb_platform")
    platform = _catalog_record(
        "platform", pname, data.platform_names, data.platform, problems,
        unknown=f"unknown platform {pname!r}",
        fix="set llmb_platform to one of the profiles in data/platforms/",
        bad_fix="fix the profile (docs/verify.md describes its keys)",
    )

    mname = v.get("llmb_model")
    model = _catalog_record(
        "model", mname, data.model_names, data.model, problems,
        unknown=f"no model profile data/models/{mname}.yml",
        fix="set llmb_model to one of the profiles, or add data/models/<name>.yml",
        bad_fix=f"fix data/models/{mname}.yml",
    )

    flagset = None
    engine = v.get("llmb_engine")
    version = v.get("llmb_engine_version")
    if engine:
        try:
            versions = data.flagset_versions(engine)
        except CatalogError as err:
            problems.append(_bad_file("engine-version", err, "fix the flag set file"))
            versions = []
        if version is None and default_version:
            version = default_version  # the release the inventory's lock records (llmb.pins)
        if version is None and versions:
            version = versions[-1]  # the default is the newest shipped release (oldest first)
        if version is None:
            problems.append(_not_pinned(
                f"llmb_engine_version is not set and {engine} has {len(versions)} pinned versions", None, versions,
                "set llmb_engine_version to a pinned version"))
        else:
            version = str(version)
            try:
                flagset = data.flagset(engine, version)
            except CatalogError as err:
                problems.append(_bad_file("engine-version", err, "fix the flag set file"))
            else:
                if flagset is None:
                    problems.append(_not_pinned(
                        f"llmb_engine_version: {version} is not shipped; shipped for {engine}: "
                        f"{', '.join(versions) or '(none)'}",
                        f"llmb_engine_version: {version} (no data/engines/{engine}-{version}.yml)", versions,
                        f"set llmb_engine_version to one of {', '.join(versions)}, or extract the flags "
                        f"of {engine} {version} with scripts/engine-catalog"))

    preset_name = v.get("llmb_preset")
    if preset_name in ("none", ""):
        preset_name = None
    preset = _catalog_record(
        "preset", preset_name, data.preset_names, data.preset, problems,
        unknown=f"unknown tuning preset {preset_name!r}",
        fix="set llmb_preset to one of the presets or to none",
        bad_fix=f"fix data/presets/{preset_name}.yml",
        also_allowed=", none",
    )

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
