"""Access to the toolkit's data directory (data/platforms, data/models, data/engines, data/presets).

Everything the planner knows about hardware, models, engine releases and tuning comes from
there, read through the functions below so a format change is adapted in one place.
Model, preset and platform files are YAML (read with PyYAML on the controller); engine flag
sets are JSON below a comment header so that the engine test double can read them with the
standard library alone.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_DATA_DIR = "LLMB_DATA_DIR"

_CACHE: dict[tuple[str, float], Any] = {}


def default_data_dir() -> Path:
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        return Path(env)
    # plugins/module_utils/llmb/planner/data.py -> repository root
    return Path(__file__).resolve().parents[4] / "data"


def _cached(path: Path, loader):
    key = (str(path), path.stat().st_mtime)
    if key not in _CACHE:
        _CACHE[key] = loader(path)
    return _CACHE[key]


def load_yaml(path: Path) -> Any:
    def _load(p: Path):
        import yaml  # controller side only

        with p.open(encoding="utf-8") as fh:
            return yaml.safe_load(fh)

    return _cached(path, _load)


def load_commented_json(path: Path) -> Any:
    """Read a data/engines file: drop lines starting with '#', parse the rest as JSON."""

    def _load(p: Path):
        text = "\n".join(
            line for line in p.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("#")
        )
        return json.loads(text)

    return _cached(path, _load)


def _names(directory: Path, suffix: str = ".yml") -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(p.name[: -len(suffix)] for p in directory.glob(f"*{suffix}"))


class DataDir:
    """One data directory; every lookup returns None when the file does not exist."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root else default_data_dir()

    # models -------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return _names(self.root / "models")

    def model(self, name: str) -> dict[str, Any] | None:
        path = self.root / "models" / f"{name}.yml"
        return load_yaml(path) if path.is_file() else None

    # presets ------------------------------------------------------------------------
    def preset_names(self) -> list[str]:
        return _names(self.root / "presets")

    def preset(self, name: str) -> dict[str, Any] | None:
        path = self.root / "presets" / f"{name}.yml"
        return load_yaml(path) if path.is_file() else None

    # engine flag sets ---------------------------------------------------------------
    def flagset_names(self) -> list[str]:
        return _names(self.root / "engines")

    def flagset_versions(self, engine: str) -> list[str]:
        out = []
        for name in self.flagset_names():
            doc = self.flagset_doc(name)
            if doc and doc.get("engine") == engine:
                out.append(str(doc.get("version")))
        return out

    def flagset_doc(self, name: str) -> dict[str, Any] | None:
        path = self.root / "engines" / f"{name}.yml"
        return load_commented_json(path) if path.is_file() else None

    # platforms ----------------------------------------------------------------------
    def platform_names(self) -> list[str]:
        return sorted(set(_names(self.root / "platforms")) | set(BUILTIN_PLATFORMS))

    def platform(self, name: str) -> Platform | None:
        return platform_facts(self, name)


@dataclass(frozen=True)
class Platform:
    """The facts the planner needs about one platform profile."""

    name: str
    vendor: str  # nvidia | amd | huawei
    device_model: str
    device_count: int
    device_memory_gb: float  # GiB of memory per device
    source: str  # file path, or "builtin" while data/platforms/<name>.yml does not exist


# Used only while the verify stage's data/platforms/<name>.yml is absent; the file wins.
BUILTIN_PLATFORMS: dict[str, tuple[str, str, int, float]] = {
    "h100-hgx8": ("nvidia", "NVIDIA H100 80GB HBM3", 8, 80),
    "h800-hgx8": ("nvidia", "NVIDIA H800", 8, 80),
    "h200-hgx8": ("nvidia", "NVIDIA H200", 8, 141),
    "h20-hgx8": ("nvidia", "NVIDIA H20", 8, 96),
    "a3-16npu": ("huawei", "Ascend910 (Atlas 800 A3)", 16, 64),
    "a2-910b-8": ("huawei", "Ascend 910B3", 8, 64),
    "mi300x-8": ("amd", "AMD Instinct MI300X", 8, 192),
    "mi325x-8": ("amd", "AMD Instinct MI325X", 8, 256),
    "h100-x1": ("nvidia", "NVIDIA H100 80GB HBM3", 1, 80),
    "h200-x2": ("nvidia", "NVIDIA H200", 2, 141),
}

_VENDOR_ALIASES = {"nvidia": "nvidia", "amd": "amd", "huawei": "huawei", "ascend": "huawei"}


def platform_facts(data: DataDir, name: str) -> Platform | None:
    """The one accessor for platform profiles (the verify stage owns their format, docs/verify.md).

    Reads ``vendor`` and ``devices.count`` / ``devices.memory_mib`` / ``devices.model_pattern``
    from data/platforms/<name>.yml (``device.model`` / ``device.memory_gb`` are accepted too);
    falls back to BUILTIN_PLATFORMS while that file is absent. None when the file lacks them.
    """
    path = data.root / "platforms" / f"{name}.yml"
    if path.is_file():
        doc = load_yaml(path) or {}
        device = doc.get("devices") or doc.get("device") or {}
        vendor = str(doc.get("vendor", "")).lower()
        vendor = _VENDOR_ALIASES.get(vendor, vendor)
        try:
            if "memory_mib" in device:
                memory_gib = float(device["memory_mib"]) / 1024
            else:
                memory_gib = float(device["memory_gb"])
            model = device.get("model") or _pattern_name(str(device.get("model_pattern", ""))) or name
            return Platform(name, vendor, str(model), int(device["count"]), memory_gib, str(path))
        except (KeyError, TypeError, ValueError):
            return None
    if name in BUILTIN_PLATFORMS:
        vendor, model, count, mem = BUILTIN_PLATFORMS[name]
        return Platform(name, vendor, model, count, float(mem), "builtin")
    return None


def _pattern_name(pattern: str) -> str:
    """A readable device name from a model regex: '^NVIDIA H800( 80GB HBM3)?$' -> 'NVIDIA H800'."""
    text = re.sub(r"\([^)]*\)[?*]", "", pattern)
    text = re.sub(r"\\[a-zA-Z][?*+]?", "", text)
    return text.strip("^$ ").replace("\\", "")
