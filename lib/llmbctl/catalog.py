"""The one loader of the toolkit's data: platform, model, engine and preset files under data/.

    cat = Catalog()                                   # data/ of the repository, or $LLMB_DATA_DIR
    p = cat.platform("h800-hgx8")                     # PlatformRecord (vendor, devices, interconnect...)
    m = cat.model("kimi-k2-thinking")                 # ModelRecord (repo, revision, patches...)
    m.patches_for("vllm-ascend", "a3-16npu")          # the config.json patches that apply
    fs = cat.flagset("vllm", "0.19.1")                # engines.registry.FlagSet of a pinned release
    cat.preset("low-latency")                         # PresetRecord

Every reader of data/ (verify, the launch planner, the weights stage, the roles through
plugins/filter/llmb_catalog.py) goes through this module: one vendor vocabulary (VENDORS), one
format check per kind, one choice of config.json patches. A malformed file raises CatalogError
naming the file and the field. Files are parsed once per modification time.

Model, preset and platform files are YAML (PyYAML, controller side); engine flag sets are JSON
below a comment header so that the engine test double reads them with the standard library alone.
Pure Python without Ansible imports; python3 >= 3.9.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmbctl import REPO_ROOT

from .engines.registry import FlagSet, load_flagset

ENV_DATA_DIR = "LLMB_DATA_DIR"
# The accelerator vendors: a platform's `vendor`, an engine's `images` keys, the node probes.
VENDORS = ("nvidia", "amd", "ascend")
KINDS = ("platforms", "models", "engines", "presets")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")

_CACHE: dict[tuple[str, float, int, str], Any] = {}


class CatalogError(ValueError):
    """A data file is missing or malformed; ``path`` and ``field`` say where."""

    def __init__(self, message: str, path: str | None = None, field: str | None = None):
        super().__init__(message)
        self.path = path
        self.field = field


def default_data_dir() -> Path:
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        return Path(env)
    return REPO_ROOT / "data"


def deep_merge(base: dict, override: dict | None) -> dict:
    """A copy of base with override merged in, mappings recursively (verify's profile_overrides)."""
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


# --------------------------------------------------------------------------- file reading


def _cached(path: Path, tag: str, loader: Callable[[Path], Any]) -> Any:
    st = path.stat()
    key = (str(path), st.st_mtime, st.st_size, tag)
    if key not in _CACHE:
        _CACHE[key] = loader(path)
    return _CACHE[key]


def load_yaml(path: Path) -> Any:
    def _load(p: Path) -> Any:
        try:
            import yaml  # controller side only
        except ImportError:
            raise CatalogError(
                f"{p}: reading the toolkit's data needs PyYAML (python3-yaml); on a bare node collect with "
                "`scripts/hwfacts --local --write-bundle DIR` and check the bundle where PyYAML is installed "
                "(`scripts/hwfacts --bundle DIR --platform P`)",
                str(p),
            ) from None
        try:
            with p.open(encoding="utf-8") as fh:
                return yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise CatalogError(f"{p}: not valid YAML: {exc}", str(p)) from None

    return _cached(path, "yaml", _load)


def load_commented_json(path: Path) -> Any:
    """Read a data/engines file: drop lines starting with '#', parse the rest as JSON."""

    def _load(p: Path) -> Any:
        text = "\n".join(
            line for line in p.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("#")
        )
        try:
            return json.loads(text)
        except ValueError as exc:
            raise CatalogError(f"{p}: not valid JSON below the comment lines: {exc}", str(p)) from None

    return _cached(path, "json", _load)


def _names(directory: Path, suffix: str = ".yml") -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(p.name[: -len(suffix)] for p in directory.glob(f"*{suffix}"))


# --------------------------------------------------------------------------- field checks


def _get(doc: Any, dotted: str) -> tuple[bool, Any]:
    cur = doc
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def _typecheck(doc: Any, dotted: str, types: Any, errs: list[str], allow_none: bool = False,
               required: bool = True) -> Any:
    """The value at a dotted path when it has one of the types; else an error in errs and None."""
    types = types if isinstance(types, tuple) else (types,)
    present, cur = _get(doc, dotted)
    if not present:
        if required:
            errs.append(f"{dotted} is missing")
        return None
    if cur is None and allow_none:
        return None
    if not isinstance(cur, types) or (isinstance(cur, bool) and bool not in types):
        names = " or ".join(t.__name__ for t in types) + (" or null" if allow_none else "")
        errs.append(f"{dotted} must be {names}, found {cur!r}")
        return None
    return cur


def platform_errors(p: Any) -> list[str]:
    """Every format error of a platform profile mapping (empty when it is valid)."""
    errs: list[str] = []

    def need(path: str, types: Any, allow_none: bool = False) -> Any:
        return _typecheck(p, path, types, errs, allow_none)

    if not isinstance(p, dict):
        return ["profile must be a mapping"]
    need("name", str)
    vendor = need("vendor", str)
    if vendor and vendor not in VENDORS:
        errs.append(f"vendor must be one of {', '.join(VENDORS)}, found {vendor!r}")
    pat = need("devices.model_pattern", str)
    if pat:
        try:
            re.compile(pat)
        except re.error as exc:
            errs.append(f"devices.model_pattern is not a regular expression: {exc}")
    need("devices.count", int)
    need("devices.memory_mib", int)
    need("driver.min_version", str)
    matrix = need("interconnect.matrix", dict)
    for key, labels in (matrix or {}).items():
        if key not in ("default", "same_card"):
            errs.append(f"interconnect.matrix.{key}: only 'default' and 'same_card' are known")
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            errs.append(f"interconnect.matrix.{key} must be a list of labels")
    need("interconnect.links_per_device", int, allow_none=True)
    need("interconnect.link_speed_gbps", (int, float), allow_none=True)
    need("numa.nodes", int, allow_none=True)
    nodes = need("numa.device_nodes", list, allow_none=True)
    count = (p.get("devices") or {}).get("count")
    if nodes is not None and isinstance(count, int) and len(nodes) != count:
        errs.append(f"numa.device_nodes lists {len(nodes)} devices, devices.count is {count}")
    need("fabric_manager.required", bool)
    need("rdma.nics", int)
    return errs


def _field_of(error: str) -> str | None:
    m = re.match(r"([A-Za-z_][\w.]*)[ :]", error)
    return m.group(1) if m else None


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class PlatformRecord:
    """One data/platforms/<name>.yml: what verify compares a node with and what the planner plans for."""

    name: str
    vendor: str  # one of VENDORS
    description: str
    model_pattern: str  # regex every device's model must match
    device_model: str  # a readable device name (devices.model, else derived from the pattern)
    device_count: int
    device_memory_mib: int
    driver_min_version: str
    interconnect_type: str | None
    links_per_device: int | None
    link_speed_gbps: float | None
    numa_nodes: int | None
    fabric_manager_required: bool
    rdma_nics: int
    path: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def device_memory_gb(self) -> float:
        """GiB of memory per device."""
        return self.device_memory_mib / 1024

    def profile(self) -> dict[str, Any]:
        """The whole profile mapping (a copy), for verify's checks of every section."""
        return copy.deepcopy(self.raw)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "raw"}
        out["device_memory_gb"] = self.device_memory_gb
        return out


def _pattern_name(pattern: str) -> str:
    """A readable device name from a model regex: '^NVIDIA H800( 80GB HBM3)?$' -> 'NVIDIA H800'."""
    text = re.sub(r"\([^)]*\)[?*]", "", pattern)
    text = re.sub(r"\\[a-zA-Z][?*+]?", "", text)
    return text.strip("^$ ").replace("\\", "")


def platform_from_doc(name: str, doc: Any, path: str) -> PlatformRecord:
    errs = platform_errors(doc)
    if not errs and doc["name"] != name:
        errs.append(f"name must be {name!r} (the file name), found {doc['name']!r}")
    if errs:
        raise CatalogError(f"platform profile {name!r} ({path}) is invalid: " + "; ".join(errs), path,
                           _field_of(errs[0]))
    dev = doc["devices"]
    ic = doc.get("interconnect") or {}
    return PlatformRecord(
        name=name,
        vendor=doc["vendor"],
        description=str(doc.get("description") or ""),
        model_pattern=dev["model_pattern"],
        device_model=str(dev.get("model") or _pattern_name(dev["model_pattern"]) or name),
        device_count=dev["count"],
        device_memory_mib=dev["memory_mib"],
        driver_min_version=doc["driver"]["min_version"],
        interconnect_type=ic.get("type"),
        links_per_device=ic.get("links_per_device"),
        link_speed_gbps=ic.get("link_speed_gbps"),
        numa_nodes=(doc.get("numa") or {}).get("nodes"),
        fabric_manager_required=doc["fabric_manager"]["required"],
        rdma_nics=doc["rdma"]["nics"],
        path=path,
        raw=doc,
    )


@dataclass(frozen=True)
class ConfigPatch:
    """One config.json edit of a model profile, selected by an engine or platform key."""

    path: str
    value: Any
    expect: Any
    key: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value, "expect": self.expect, "key": self.key}


def select_config_patches(table: Any, engine: str | None, platform: str | None,
                          where: str = "config_patches") -> list[ConfigPatch]:
    """THE choice of config.json patches: those under the engine key, then under the platform key.

    Used by ModelRecord.patches_for (planner, verify of plans) and by the weights stage's filter.
    """
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise CatalogError(f"{where} must be a mapping of engine or platform keys, found {table!r}", field=where)
    out: list[ConfigPatch] = []
    for key in (engine, platform):
        if not key:
            continue
        patches = table.get(key) or []
        if not isinstance(patches, list):
            raise CatalogError(f"{where}.{key} must be a list of patches, found {patches!r}", field=f"{where}.{key}")
        for patch in patches:
            if not isinstance(patch, dict) or "path" not in patch or "value" not in patch:
                raise CatalogError(f"{where}.{key}: each patch needs path and value, got {patch!r}",
                                   field=f"{where}.{key}")
            out.append(ConfigPatch(str(patch["path"]), patch["value"], patch.get("expect"), str(key)))
    return out


@dataclass(frozen=True)
class ModelRecord:
    """One data/models/<name>.yml: what the weights stage downloads and patches, what the planner serves."""

    name: str
    repo_id: str
    revision: str | None
    total_size_bytes: int | None
    shard_count: int | None
    served_model_name: str | None
    config_facts: dict[str, Any]
    config_patches: dict[str, list[dict[str, Any]]]
    engine_flags: dict[str, dict[str, Any]]
    files: dict[str, Any]
    path: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    def patches_for(self, engine: str | None, platform: str | None) -> list[ConfigPatch]:
        return select_config_patches(self.config_patches, engine, platform)

    def engine_section(self, engine: str) -> dict[str, Any] | None:
        return self.engine_flags.get(engine)

    def profile(self) -> dict[str, Any]:
        return copy.deepcopy(self.raw)


def model_from_doc(name: str, doc: Any, path: str) -> ModelRecord:
    errs: list[str] = []
    if not isinstance(doc, dict):
        raise CatalogError(f"model profile {name!r} ({path}) is invalid: profile must be a mapping", path)
    _typecheck(doc, "repo_id", str, errs)
    _typecheck(doc, "revision", str, errs, allow_none=True, required=False)
    _typecheck(doc, "total_size_bytes", int, errs, allow_none=True, required=False)
    _typecheck(doc, "shard_count", int, errs, allow_none=True, required=False)
    _typecheck(doc, "served_model_name", str, errs, allow_none=True, required=False)
    facts = _typecheck(doc, "config_facts", dict, errs, allow_none=True, required=False) or {}
    flags = _typecheck(doc, "engine_flags", dict, errs, allow_none=True, required=False) or {}
    for key, section in flags.items():
        if section is not None and not isinstance(section, dict):
            errs.append(f"engine_flags.{key} must be a mapping of flags, found {section!r}")
    files = _typecheck(doc, "files", dict, errs, allow_none=True, required=False) or {}
    mod = _typecheck(doc, "modality", dict, errs, allow_none=True, required=False) or {}
    if mod:
        _typecheck(doc, "modality.vision", bool, errs)
        _typecheck(doc, "modality.vision_tower_bytes", int, errs, allow_none=True, required=False)
        _typecheck(doc, "modality.encoder_tp_mode_flag", str, errs, allow_none=True, required=False)
        _typecheck(doc, "modality.text_only_flag", str, errs, allow_none=True, required=False)
    reqs = _typecheck(doc, "requires", dict, errs, allow_none=True, required=False) or {}
    for key in reqs:
        if key not in ("engines", "nvidia"):
            errs.append(f"requires.{key}: only 'engines' and 'nvidia' are known")
    for engine in (_typecheck(doc, "requires.engines", dict, errs, required=False) or {}):
        _typecheck(doc, f"requires.engines.{engine}.min_version", str, errs)
    if "nvidia" in reqs:
        _typecheck(doc, "requires.nvidia.cuda_major", int, errs)
        _typecheck(doc, "requires.nvidia.driver_min", str, errs)
    patches = _typecheck(doc, "config_patches", dict, errs, allow_none=True, required=False) or {}
    for key in patches:
        try:
            select_config_patches(patches, str(key), None)
        except CatalogError as exc:
            errs.append(str(exc))
    if errs:
        raise CatalogError(f"model profile {name!r} ({path}) is invalid: " + "; ".join(errs), path,
                           _field_of(errs[0]))
    return ModelRecord(
        name=name,
        repo_id=doc["repo_id"],
        revision=doc.get("revision"),
        total_size_bytes=doc.get("total_size_bytes"),
        shard_count=doc.get("shard_count"),
        served_model_name=doc.get("served_model_name"),
        config_facts=facts,
        config_patches=patches,
        engine_flags=flags,
        files=files,
        path=path,
        raw=doc,
    )


@dataclass(frozen=True)
class PresetRecord:
    """One data/presets/<name>.yml: tuning flags per engine."""

    name: str
    description: str
    source: str
    engines: dict[str, dict[str, Any] | None]
    path: str
    raw: dict[str, Any] = field(repr=False, compare=False)


def preset_from_doc(name: str, doc: Any, path: str) -> PresetRecord:
    errs: list[str] = []
    if not isinstance(doc, dict):
        raise CatalogError(f"preset {name!r} ({path}) is invalid: preset must be a mapping", path)
    engines = _typecheck(doc, "engines", dict, errs) or {}
    for key, section in engines.items():
        if section is not None and not isinstance(section, dict):
            errs.append(f"engines.{key} must be a mapping of flags, found {section!r}")
    _typecheck(doc, "description", str, errs, allow_none=True, required=False)
    _typecheck(doc, "source", str, errs, allow_none=True, required=False)
    if errs:
        raise CatalogError(f"preset {name!r} ({path}) is invalid: " + "; ".join(errs), path, _field_of(errs[0]))
    return PresetRecord(name, str(doc.get("description") or ""), str(doc.get("source") or ""), engines, path, doc)


@dataclass(frozen=True)
class EngineRelease:
    """One data/engines/<engine>-<version>.yml (the document; planner.flags parses it into a FlagSet)."""

    name: str
    engine: str
    version: str
    path: str
    doc: dict[str, Any] = field(repr=False, compare=False)


def engine_errors(doc: Any) -> list[str]:
    """Format check of a generated set (data/engines/<engine>-<version>.yml)."""
    errs: list[str] = []
    if not isinstance(doc, dict):
        return ["flag set must be a mapping"]
    _typecheck(doc, "engine", str, errs)
    _typecheck(doc, "version", (str, int, float), errs)
    flags = _typecheck(doc, "flags", dict, errs, required=not doc.get("extends")) or {}
    for name, spec in flags.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
            errs.append(f"flags.{name} must be a mapping with a 'type'")
    gen = _typecheck(doc, "generator", dict, errs, required=False)
    if gen is not None and not isinstance(gen.get("command"), str):
        errs.append("generator.command must name the command that generated the file")
    errs.extend(overlay_errors(doc, generated=True))
    return errs


# keys of the hand-kept overlay data/engines/hand/<engine>.yml (everything a parser cannot tell)
# spelling: option the parser names first -> the option string the planner writes (e.g. SGLang's
# --tensor-parallel-size is written --tp-size, as the recipes do); both are the same parser action.
OVERLAY_KEYS = ("images", "image_suffix_by_platform", "supports_model_types", "planner_owned", "renamed",
                "defaults", "config_checks", "versions", "source", "spelling", "requirements", "api_key_env",
                "pd_router", "optimize_rules", "parsers", "transfer_packages", "env_renamed",
                "packages", "load_format_packages", "cache_env")


def overlay_errors(doc: Any, generated: bool = False) -> list[str]:
    errs: list[str] = []
    if not isinstance(doc, dict):
        return ["overlay must be a mapping"]
    if not generated:
        _typecheck(doc, "engine", str, errs)
        for key in doc:
            if key not in OVERLAY_KEYS and key != "engine":
                errs.append(f"{key}: not an overlay key (one of {', '.join(OVERLAY_KEYS)}); "
                            "parser facts belong to the generated set")
    _typecheck(doc, "api_key_env", str, errs, required=False)  # the engine's API key variable
    images = _typecheck(doc, "images", dict, errs, required=False) or {}
    for vendor in images:
        if vendor not in VENDORS:
            errs.append(f"images.{vendor}: vendor must be one of {', '.join(VENDORS)}")
    renamed = _typecheck(doc, "renamed", dict, errs, required=False) or {}
    for old, rec in renamed.items():
        if not isinstance(rec, dict) or "to" not in rec or not rec.get("source"):
            errs.append(f"renamed.{old} must be a mapping with 'to' (a flag or null) and 'source'")
    env_renamed = _typecheck(doc, "env_renamed", dict, errs, required=False) or {}
    for var, rec in env_renamed.items():  # an environment variable a release reads as a flag instead
        if not isinstance(rec, dict) or not str(rec.get("to") or "").startswith("--") or not rec.get("since") \
                or not rec.get("source"):
            errs.append(f"env_renamed.{var} must be a mapping with 'to' (the flag), 'since' (the first release "
                        "without the variable) and 'source'")
    cache_env = _typecheck(doc, "cache_env", dict, errs, required=False) or {}
    for var, sub in cache_env.items():  # the release's cache variable -> subdirectory of the service's
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(var)) or not re.fullmatch(r"[A-Za-z0-9_.-]+", str(sub)) \
                or str(sub) in (".", ".."):
            errs.append(f"cache_env.{var}: must map an environment variable name to one subdirectory name, found {sub!r}")
    # parsers: only for a release whose registries its walk could not read (TensorRT-LLM in source
    # mode), with their source; a generated set's own 'parsers' always win (planner.flags)
    hand_parsers = {} if generated else (_typecheck(doc, "parsers", dict, errs, required=False) or {})
    if hand_parsers and not hand_parsers.get("source"):
        errs.append("parsers: hand-kept parser names need a 'source' (where they were read)")
    # (a generated set's own 'requirements' are read from the release; the overlay's are per vendor)
    reqs = {} if generated else (_typecheck(doc, "requirements", dict, errs, required=False) or {})
    for vendor, rec in reqs.items():  # what a seed recipe says a vendor's build needs (ROCm, glibc)
        if vendor not in VENDORS or not isinstance(rec, dict) or not rec.get("source"):
            errs.append(f"requirements.{vendor}: must be one of {', '.join(VENDORS)} mapping to facts "
                        "with their 'source' (the seed recipe's file name)")
    versions = _typecheck(doc, "versions", dict, errs, required=False) or {}
    for ver, sub in versions.items():
        if not isinstance(sub, dict):
            errs.append(f"versions.{ver} must be a mapping of overlay keys")
    return errs


def version_key(version: str) -> tuple:
    """Release order: 0.9 < 0.19.1 < 0.20.2rc1 < 0.20.2 < 0.23.0 (PEP 440 release + pre-release)."""
    m = re.match(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?", str(version))
    if not m:
        return ((), 0, 0, str(version))
    rel = tuple(int(x) for x in m.group(1).split("."))
    rel = rel + (0,) * (4 - len(rel))
    pre = {"a": 0, "b": 1, "rc": 2}.get(m.group(2) or "", 3)
    return (rel, pre, int(m.group(3) or 0), str(version))


# --------------------------------------------------------------------------- the catalog


class Catalog:
    """One data directory. ``platforms_dir`` / ``models_dir`` replace one kind's directory (verify's
    platforms_dir option, the weights role's weights_profiles_dir)."""

    def __init__(self, root: Path | str | None = None, platforms_dir: Path | str | None = None,
                 models_dir: Path | str | None = None):
        self.root = Path(root) if root else default_data_dir()
        self._dirs = {kind: self.root / kind for kind in KINDS}
        if platforms_dir:
            self._dirs["platforms"] = Path(platforms_dir)
        if models_dir:
            self._dirs["models"] = Path(models_dir)

    def directory(self, kind: str) -> Path:
        return self._dirs[kind]

    def names(self, kind: str) -> list[str]:
        return _names(self._dirs[kind])

    def path(self, kind: str, name: str) -> Path | None:
        """The file of a name, or None when there is none (names outside [a-z0-9._-] never match)."""
        if not isinstance(name, str) or not _NAME.match(name):
            return None
        path = self._dirs[kind] / f"{name}.yml"
        return path if path.is_file() else None

    def _record(self, kind: str, what: str, name: Any, from_doc: Callable[[str, Any, str], Any]) -> Any:
        """data/<kind>/<name>.yml read once (cached by path and mtime) into its record."""
        path = self.path(kind, name)
        if path is None:
            raise self._unknown(what, kind, name)
        return _cached(path, kind, lambda p: from_doc(name, load_yaml(p), str(p)))

    def _unknown(self, what: str, kind: str, name: Any) -> CatalogError:
        d = self._dirs[kind]
        known = ", ".join(self.names(kind)) or "(none)"
        return CatalogError(f"unknown {what} {name!r}; known: {known} (in {d})", str(d), kind)

    # platforms ----------------------------------------------------------------------
    def platform_names(self) -> list[str]:
        return self.names("platforms")

    def platform(self, name: str, overrides: dict | None = None) -> PlatformRecord:
        """The validated profile; ``overrides`` (verify's profile_overrides) are deep-merged first."""
        if not overrides:
            return self._record("platforms", "platform profile", name, platform_from_doc)
        path = self.path("platforms", name)
        if path is None:
            raise self._unknown("platform profile", "platforms", name)
        return platform_from_doc(name, deep_merge(load_yaml(path), overrides), str(path))

    def platforms(self) -> list[PlatformRecord]:
        return [self.platform(n) for n in self.platform_names()]

    # models -------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return self.names("models")

    def model(self, name: str) -> ModelRecord:
        return self._record("models", "model profile", name, model_from_doc)

    def models(self) -> list[ModelRecord]:
        return [self.model(n) for n in self.model_names()]

    # presets ------------------------------------------------------------------------
    def preset_names(self) -> list[str]:
        return self.names("presets")

    def preset(self, name: str) -> PresetRecord:
        return self._record("presets", "preset", name, preset_from_doc)

    # engine releases ----------------------------------------------------------------
    def flagset_names(self) -> list[str]:
        return self.names("engines")

    def engine_release(self, name: str) -> EngineRelease:
        path = self.path("engines", name)
        if path is None:
            raise self._unknown("engine flag set", "engines", name)

        def _load(p: Path) -> EngineRelease:
            doc = load_commented_json(p)
            errs = engine_errors(doc)
            if errs:
                raise CatalogError(f"engine flag set {name!r} ({p}) is invalid: " + "; ".join(errs), str(p),
                                   _field_of(errs[0]))
            return EngineRelease(name, doc["engine"], str(doc["version"]), str(p), doc)

        return _cached(path, "engine", _load)

    def engine_releases(self) -> list[EngineRelease]:
        return [self.engine_release(n) for n in self.flagset_names()]

    def flagset_doc(self, name: str) -> dict[str, Any] | None:
        """The flag set document of data/engines/<name>.yml; None when there is no such file."""
        if self.path("engines", name) is None:
            return None
        return self.engine_release(name).doc

    def flagset_versions(self, engine: str) -> list[str]:
        """The shipped releases of an engine, oldest first."""
        return sorted((r.version for r in self.engine_releases() if r.engine == engine), key=version_key)

    def newest_version(self, engine: str) -> str | None:
        versions = self.flagset_versions(engine)
        return versions[-1] if versions else None

    def release_requirements(self, engine: Any, version: Any = None) -> dict[str, Any] | None:
        """{"release": "vllm 0.23.0", "requirements": {...}} of the chosen release (default: the
        newest shipped); None when the engine or release is not shipped (the planner reports that)."""
        if not isinstance(engine, str):
            return None
        version = str(version) if version not in (None, "") else self.newest_version(engine)
        doc = self.flagset_doc(f"{engine}-{version}") if version else None
        if doc is None:
            return None
        out = {"release": f"{engine} {version}", "requirements": dict(doc.get("requirements") or {})}
        by_vendor = (self.engine_overlay(engine).get("requirements") or {}) if _NAME.match(engine) else {}
        if by_vendor:
            out["by_vendor"] = {k: dict(v) for k, v in sorted(by_vendor.items())}
        return out

    def engine_overlay(self, engine: str) -> dict[str, Any]:
        """The hand-kept knowledge of an engine (data/engines/hand/<engine>.yml); {} when none."""
        if not isinstance(engine, str) or not _NAME.match(engine):
            return {}
        path = self._dirs["engines"] / "hand" / f"{engine}.yml"
        if not path.is_file():
            return {}

        def _load(p: Path) -> dict[str, Any]:
            doc = load_commented_json(p)
            errs = overlay_errors(doc) or self._overlay_default_conflicts(engine, doc)
            if errs:
                raise CatalogError(f"engine overlay {engine!r} ({p}) is invalid: " + "; ".join(errs), str(p),
                                   _field_of(errs[0]))
            return doc

        return _cached(path, "overlay", _load)

    def _overlay_default_conflicts(self, engine: str, overlay: dict[str, Any]) -> list[str]:
        """A hand-kept default for an option whose parser default a generated set records: the
        parser's value wins, so the overlay may keep only defaults no parser tells (None, a sentinel)."""
        errs: list[str] = []
        subs = [overlay] + [v for v in (overlay.get("versions") or {}).values() if isinstance(v, dict)]
        for sub in subs:
            for flag in sorted(sub.get("defaults") or {}):
                told = []
                for version in self.flagset_versions(engine):
                    spec = ((self.flagset_doc(f"{engine}-{version}") or {}).get("flags") or {}).get(flag) or {}
                    dflt = spec.get("default")
                    if dflt is None or isinstance(dflt, bool) or (isinstance(dflt, str) and dflt.startswith("<")):
                        continue
                    told.append(f"{version}: {dflt!r}")
                if told:
                    errs.append(f"defaults.{flag}: the generated sets record the parser's default ({engine} "
                                f"{', '.join(told)}); defaults come from the generated sets, remove it from the overlay")
        return errs

    # model x engine release x platform ----------------------------------------------
    def releases_where(self, engine: str, pred: Callable[[dict[str, Any]], bool]) -> list[str]:
        """The shipped releases of ``engine`` (oldest first) whose generated set satisfies ``pred``."""
        out = []
        for version in self.flagset_versions(engine):
            doc = self.flagset_doc(f"{engine}-{version}") or {}
            if pred(doc):
                out.append(version)
        return out

    def model_release_problems(self, model: ModelRecord, engine: str, version: str,
                               vendor: str | None = None) -> list[dict[str, Any]]:
        """THE decision 'this model cannot run on this engine release on this vendor' (stage 0 reports
        each as a problem): the profile's ``requires`` (the oldest release a recipe names, the CUDA
        generation of the NVIDIA images), the model's architecture against the architectures the
        release registers, the profile's parsers against the parsers it registers. Each entry:
        {check, message, found, expected, fix}; the fix names llmb_engine_version and the shipped
        releases that would do."""
        out: list[dict[str, Any]] = []
        raw = model.raw if isinstance(model.raw, dict) else {}
        doc = self.flagset_doc(f"{engine}-{version}") or {}
        shipped = self.flagset_versions(engine)

        def fix(ok: list[str], what: str) -> str:
            if ok:
                return f"set llmb_engine_version to a release that {what}: {', '.join(ok)} (shipped for {engine})"
            return (f"no shipped {engine} release {what} (shipped: {', '.join(shipped) or 'none'}): choose another "
                    "llmb_engine, or generate the set of a newer release with scripts/engine-catalog")

        reqs = raw.get("requires") if isinstance(raw.get("requires"), dict) else {}
        need = ((reqs.get("engines") or {}).get(engine) or {}) if isinstance(reqs.get("engines"), dict) else {}
        minimum = need.get("min_version") if isinstance(need, dict) else None
        if minimum and version_key(str(version)) < version_key(str(minimum)):
            ok = [v for v in shipped if version_key(v) >= version_key(str(minimum))]
            out.append({
                "check": "model-engine",
                "message": f"{model.name} needs {engine} {minimum} or newer ({need.get('source') or 'model profile'})",
                "found": f"llmb_engine_version: {version}",
                "expected": f"{engine} >= {minimum}",
                "fix": fix(ok, f"is {minimum} or newer"),
            })
        archs = doc.get("architectures") or []
        want = (model.config_facts.get("architectures") or [None])[0]
        if want and archs and want not in archs:
            ok = self.releases_where(engine, lambda d: want in (d.get("architectures") or []))
            out.append({
                "check": "model-engine",
                "message": f"{engine} {version} does not register {want}, the architecture of {model.name}'s "
                           "config.json: it would fail to load the model",
                "found": f"llmb_engine_version: {version} (registers {len(archs)} architectures, not {want})",
                "expected": f"a {engine} release that registers {want}",
                "fix": fix(ok, f"registers {want}"),
            })
        flags = model.engine_flags.get(engine) or {}
        parsers = doc.get("parsers") or {}
        for key, kind in (("tool-call-parser", "tool_call"), ("reasoning-parser", "reasoning"),
                          ("reasoning_parser", "reasoning")):
            name = flags.get(key)
            known = parsers.get(kind)
            if name is None or known is None or name in known:
                continue
            ok = self.releases_where(engine, lambda d, k=kind, n=name: n in ((d.get("parsers") or {}).get(k) or []))
            out.append({
                "check": "engine-parser",
                "message": f"{engine} {version} does not register the {kind.replace('_', ' ')} parser {name} that "
                           f"{model.name} needs (data/models/{model.name}.yml engine_flags.{engine})",
                "found": f"llmb_engine_version: {version} ({kind} parsers: {', '.join(known) or 'none'})",
                "expected": f"a {engine} release with the {name} parser",
                "fix": fix(ok, f"registers the {name} parser"),
            })
        nv = reqs.get("nvidia") if isinstance(reqs.get("nvidia"), dict) else {}
        cuda_need = nv.get("cuda_major")
        cuda_has = (doc.get("requirements") or {}).get("cuda_major")
        if vendor == "nvidia" and isinstance(cuda_need, int) and isinstance(cuda_has, int) and cuda_has < cuda_need:
            ok = self.releases_where(engine, lambda d: isinstance((d.get("requirements") or {}).get("cuda_major"), int)
                                     and d["requirements"]["cuda_major"] >= cuda_need)
            out.append({
                "check": "model-engine",
                "message": f"{model.name} runs only on CUDA {cuda_need} builds (NVIDIA driver >= "
                           f"{nv.get('driver_min') or '?'}; {nv.get('source') or 'model profile'}), and {engine} "
                           f"{version} is a CUDA {cuda_has} build",
                "found": f"llmb_engine_version: {version} (links libcudart.so.{cuda_has})",
                "expected": f"a CUDA {cuda_need} build of {engine}",
                "fix": fix(ok, f"is built for CUDA {cuda_need}"),
            })
        return out

    def flagset(self, engine: str, version: str) -> FlagSet | None:
        """The pinned release's flag set (llmbctl.engines.registry: generated set + hand overlay)."""
        return load_flagset(self, engine, version)
