"""Engine data below the planner: which engines there are (the registry of engine modules) and what
a pinned release accepts (its flag set: the generated set merged with the hand overlay and the
list of shipped releases).

Neither the planner nor the catalog is imported here: the catalog (llmbctl.catalog, the one
loader of data/) builds flag sets with ``load_flagset``, the planner reads both, and the planner's
engine package (llmbctl.planner.engines) registers its modules into ``ENGINES``.

    ENGINES["vllm"].CAPS                    # engines/capabilities.EngineCaps of a registered engine
    fs = load_flagset(catalog, "vllm", "0.19.1")   # FlagSet | None
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

# what a flag's `type` says about its value on the command line
VALUE_TYPES = {"int", "float", "str", "json", "choice", "list", "optional"}
NO_VALUE_TYPES = {"flag", "bool"}

# ------------------------------------------------------------------------------------- engines
# llmb_engine's values -> the engine module (CAPS, topology, engine_args, services); filled by
# llmbctl.planner.engines, in the order llmb_engine's messages list them
ENGINES: dict[str, ModuleType] = {}


def register(module: ModuleType) -> ModuleType:
    """Add an engine module to the registry under its CAPS.name (the value of llmb_engine)."""
    for attr in ("CAPS", "topology", "engine_args", "services"):
        if not hasattr(module, attr):
            raise TypeError(f"engine module {module.__name__} has no {attr}")
    ENGINES[module.CAPS.name] = module
    return module


def unregister(name: str) -> None:
    ENGINES.pop(name, None)


def engine_names() -> tuple[str, ...]:
    """llmb_engine's values: the one list of engines."""
    return tuple(ENGINES)


def engine_caps(engine: str) -> Any:
    """The engine's capabilities record (engines/capabilities.EngineCaps); KeyError when unknown."""
    return ENGINES[engine].CAPS


def engine_for_vendor(vendor: str) -> str:
    """The first registered engine that runs on vendor (the one to suggest on its platforms)."""
    for name, module in ENGINES.items():
        if vendor in module.CAPS.vendors:
            return name
    return next(iter(ENGINES))


# ------------------------------------------------------------------------------------ flag sets
class EngineData(Protocol):
    """What a flag set is read from (llmbctl.catalog.Catalog): data/engines/ documents."""

    def flagset_doc(self, name: str) -> dict[str, Any] | None: ...

    def flagset_versions(self, engine: str) -> list[str]: ...

    def engine_overlay(self, engine: str) -> dict[str, Any]: ...


@dataclass
class FlagSet:
    engine: str
    version: str
    name: str
    style: str
    flags: dict[str, dict[str, Any]]
    renamed: dict[str, dict[str, Any]] = field(default_factory=dict)
    underscore_equivalent: bool = False
    positional: dict[str, Any] | None = None
    command: list[str] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)
    image_suffix_by_platform: dict[str, str] = field(default_factory=dict)
    supports_model_types: list[str] = field(default_factory=list)
    parsers: dict[str, list[str]] = field(default_factory=dict)
    planner_owned: list[str] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)
    config_checks: list[dict[str, Any]] = field(default_factory=list)
    # option strings of every shipped release of this engine (version -> strings), oldest first:
    # the planner names the release that added or removed a flag the chosen one lacks
    releases: dict[str, frozenset[str]] = field(default_factory=dict)
    requirements: dict[str, Any] = field(default_factory=dict)
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    allow_abbrev: bool = False
    # environment variable the engine reads its API key from (hand overlay); None: flag only
    api_key_env: str | None = None
    # option string of another shipped release of this engine -> (dest, negated, that release): the
    # same parser destination under another spelling (vLLM 0.33's --disable-x is 0.32's --no-enable-x)
    elsewhere: dict[str, tuple[str, bool, str, str]] = field(default_factory=dict)  # ... kind there
    # the hand overlay's environment variables that became flags (VLLM_ALL2ALL_BACKEND -> --all2all-backend)
    env_renamed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the model architectures the release registers (generated set); [] when its walk cannot tell
    architectures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._alias: dict[str, str] = {}
        self._negation: dict[str, str] = {}  # a negation the release spells out (--disable-x) -> canonical
        for canon, spec in self.flags.items():
            self._alias[canon] = canon
            for alias in [*spec.get("aliases", []), *spec.get("aliases_hidden", [])]:
                self._alias[alias] = canon
            if spec.get("type") == "bool":
                for neg in [*spec.get("negation", []), *spec.get("negation_hidden", [])]:
                    self._negation[neg] = canon

    # lookups --------------------------------------------------------------------------
    def spec(self, canon: str) -> dict[str, Any]:
        return self.flags[canon]

    def _spell(self, token: str) -> str | None:
        if token in self._alias:
            return self._alias[token]
        if self.underscore_equivalent and token.startswith("--"):
            dashed = "--" + token[2:].replace("_", "-")
            if dashed in self._alias:
                return self._alias[dashed]
        return self._abbrev(token, negated=False)

    def _abbrev(self, token: str, negated: bool) -> str | None:
        """argparse's allow_abbrev (recorded in the generated set): a unique prefix of one long option
        (SGLang's --tp for --tp-size). Ambiguous or unknown prefixes give None."""
        if not self.allow_abbrev or not token.startswith("--") or len(token) < 3:
            return None
        hits = {(canon, neg) for canon, spec in self.flags.items()
                for s, neg in [(canon, False), *((a, False) for a in spec.get("aliases", [])),
                               *((n, True) for n in spec.get("negation", []))]
                if s.startswith("--") and s.startswith(token)}
        if len(hits) == 1:
            canon, neg = next(iter(hits))
            if neg == negated:
                return canon
        return None

    def resolve(self, token: str) -> tuple[str, bool] | None:
        """Map one spelling to (canonical flag, negated). None when the release lacks it."""
        canon = self._spell(token)
        if canon is not None:
            return canon, False
        neg = self._negation.get(token)
        if neg is None and self.underscore_equivalent and token.startswith("--"):
            neg = self._negation.get("--" + token[2:].replace("_", "-"))
        if neg is not None:
            return neg, True
        if token.startswith("--no-") or (self.underscore_equivalent and token.startswith("--no_")):
            base = self._spell("--" + token[5:])
            if base is not None and self.flags[base]["type"] == "bool":
                return base, True
        return None

    def rename_of(self, token: str) -> tuple[str, dict[str, Any]] | None:
        """(old spelling, rename record) when the release renamed or dropped this flag."""
        keys = [token]
        if self.underscore_equivalent and token.startswith("--"):
            keys.append("--" + token[2:].replace("_", "-"))
        if self.resolve(token) is not None:
            return None  # this release still has it: no translation
        for key in keys:
            if key in self.renamed:
                return key, self.renamed[key]
        return None

    def changed_in(self, token: str) -> tuple[str, str] | None:
        """('introduced' | 'removed', release) when another shipped release of the engine has
        ``token`` and this one does not: the newer release that added it, or the first release
        after the last one that had it."""
        spellings = {token}
        if self.underscore_equivalent and token.startswith("--"):
            spellings.add("--" + token[2:].replace("_", "-"))
        order = list(self.releases)
        if self.version not in order:
            return None
        mine = order.index(self.version)
        having = [i for i, v in enumerate(order) if spellings & self.releases[v]]
        if not having:
            return None
        newer = [i for i in having if i > mine]
        if newer:
            return "introduced", order[newer[0]]
        last = max(i for i in having if i < mine)
        return "removed", order[last + 1]

    def translate(self, token: str) -> tuple[str, bool, str] | None:
        """(canonical flag, negated, release) for a spelling this release lacks but another shipped
        release of the engine parses into a destination this release has (read from the generated
        sets, no list kept by hand): vLLM 0.33.0's ``--disable-prefix-caching`` is
        ``--no-enable-prefix-caching`` on 0.32.0, its ``--enable-custom-all-reduce`` is
        ``--no-disable-custom-all-reduce``. A negation is translated only onto a flag with a negation
        (bool); a plain spelling only onto a flag of the same kind. None otherwise."""
        if self.resolve(token) is not None:
            return None
        hit = self.elsewhere.get(token)
        if hit is None and self.underscore_equivalent and token.startswith("--"):
            hit = self.elsewhere.get("--" + token[2:].replace("_", "-"))
        if hit is None:
            return None
        dest, negated, release, kind_there = hit
        mine = [c for c, spec in self.flags.items() if spec.get("dest") == dest]
        if len(mine) != 1:
            return None
        canon = mine[0]
        kind = self.flags[canon]["type"]
        if negated and kind != "bool":
            return None
        if not negated and kind != kind_there and not {kind, kind_there} <= NO_VALUE_TYPES:
            return None
        return canon, negated, release

    def takes_value(self, canon: str) -> bool:
        return self.flags[canon]["type"] in VALUE_TYPES

    # rendering ------------------------------------------------------------------------
    def render(self, canon: str, value: Any) -> list[str]:
        kind = self.flags[canon]["type"]
        if value is None:
            return []
        if kind == "flag":
            return [canon] if value else []
        if kind == "bool":  # the release's own negation: --no-x, or --disable-x (vLLM 0.33)
            negation = (self.flags[canon].get("negation") or ["--no-" + canon[2:]])[0]
            return [canon] if value else [negation]
        if kind == "list":
            items = value if isinstance(value, (list, tuple)) else [value]
            return [canon, *(_scalar(v) for v in items)]
        if kind == "json":
            return [canon, value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))]
        return [canon, _scalar(value)]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_flagset(data: EngineData, engine: str, version: str) -> FlagSet | None:
    name = f"{engine}-{version}"
    doc = data.flagset_doc(name)
    if doc is None:
        return None
    return flagset_from_doc(data, name, doc)


def option_strings(doc: dict[str, Any]) -> frozenset[str]:
    """Every option string of a generated set: canonical names, aliases, negations (--no-x, vLLM 0.33's
    --disable-x), and the strings the parser accepts but hides from its help (--no-enable-x)."""
    out: set[str] = set()
    for canon, spec in (doc.get("flags") or {}).items():
        out.add(canon)
        for key in ("aliases", "negation", "aliases_hidden", "negation_hidden"):
            out.update(spec.get(key) or [])
    return frozenset(out)


def _generated(data: EngineData, name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The generated document, with ``extends`` (a set built on another one) resolved."""
    if not doc.get("extends"):
        return doc
    base = data.flagset_doc(doc["extends"])
    if base is None:
        raise ValueError(f"flag set {name} extends {doc['extends']}, which does not exist")
    merged = dict(base)
    for key, value in doc.items():
        if key not in ("flags_add", "flags_remove", "extends"):
            merged[key] = value
    flags = dict(base.get("flags", {}))
    flags.update(doc.get("flags_add", {}))
    for gone in doc.get("flags_remove", []):
        flags.pop(gone, None)
    merged["flags"] = flags
    return merged


def overlay_for(data: EngineData, engine: str, version: str) -> dict[str, Any]:
    """The hand-kept overlay of an engine with its per-release section (``versions``) applied."""
    overlay = dict(data.engine_overlay(engine))
    per_release = (overlay.pop("versions", None) or {}).get(version) or {}
    overlay.update(per_release)
    return overlay


def respell(flags: dict[str, dict[str, Any]], spelling: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The flags keyed by the spelling the planner writes (overlay ``spelling``: parser's canonical
    option -> one of its aliases); the canonical option becomes an alias. Unknown entries are
    ignored (a release without that option)."""
    out = dict(flags)
    for canon, want in (spelling or {}).items():
        spec = out.get(canon)
        if spec is None or want not in (spec.get("aliases") or []):
            continue
        new = dict(spec)
        new["aliases"] = sorted({*(a for a in spec["aliases"] if a != want), canon})
        del out[canon]
        out[want] = new
    return out


def flagset_from_doc(data: EngineData, name: str, doc: dict[str, Any]) -> FlagSet:
    """THE merge of a generated set (parser facts) and the engine's hand-kept overlay."""
    gen = _generated(data, name, doc)
    engine, version = str(gen["engine"]), str(gen["version"])
    hand = overlay_for(data, engine, version)
    releases: dict[str, frozenset[str]] = {}
    elsewhere: dict[str, tuple[str, bool, str, str]] = {}
    for ver in reversed(data.flagset_versions(engine)):  # newest first: its meaning of a spelling wins
        other = data.flagset_doc(f"{engine}-{ver}")
        if other is None:
            continue
        other = _generated(data, f"{engine}-{ver}", other)
        releases[ver] = option_strings(other)
        if ver == version:
            continue
        for canon, spec in (other.get("flags") or {}).items():
            for s in [canon, *spec.get("aliases", []), *spec.get("aliases_hidden", [])]:
                elsewhere.setdefault(s, (str(spec.get("dest")), False, ver, spec.get("type")))
            for s in [*spec.get("negation", []), *spec.get("negation_hidden", [])]:
                elsewhere.setdefault(s, (str(spec.get("dest")), True, ver, spec.get("type")))
    releases = dict(reversed(list(releases.items())))  # oldest first, as changed_in reads them
    return FlagSet(
        engine=engine,
        version=version,
        name=name,
        style=str(gen.get("style", "argparse")),
        flags=respell(dict(gen.get("flags", {})), hand.get("spelling") or {}),
        renamed=dict(hand.get("renamed", {})),
        underscore_equivalent=bool(gen.get("underscore_equivalent", False)),
        positional=gen.get("positional"),
        command=list(gen.get("command", [])),
        images=dict(hand.get("images", {})),
        image_suffix_by_platform=dict(hand.get("image_suffix_by_platform", {})),
        supports_model_types=list(hand.get("supports_model_types", [])),
        parsers=dict(gen.get("parsers") or {k: v for k, v in (hand.get("parsers") or {}).items() if k != "source"}),
        planner_owned=list(hand.get("planner_owned", [])),
        defaults=dict(hand.get("defaults", {})),
        config_checks=list(hand.get("config_checks", [])),
        releases=releases,
        requirements=dict(gen.get("requirements") or {}),
        rewrites=list(gen.get("rewrites") or []),
        allow_abbrev=bool(gen.get("allow_abbrev", False)),
        api_key_env=hand.get("api_key_env") or None,
        elsewhere=elsewhere,
        env_renamed=dict(hand.get("env_renamed") or {}),
        architectures=list(gen.get("architectures") or []),
    )
