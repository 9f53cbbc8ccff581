"""Flag sets read from data/engines (JSON below '#' comment lines) and argv parsing like the real CLIs.

argparse-style engines (vLLM, SGLang) exit 2 with ``<prog>: error: ...``; click-style ones
(trtllm-serve, ray) exit 2 with ``Error: No such option: ...``, as the real programs do.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

ENV_DATA = "LLMB_ENGINESIM_DATA"
VALUE_TYPES = {"int", "float", "str", "json", "choice", "list", "optional"}


class UsageError(Exception):
    """A command line the real CLI would refuse (exit status 2)."""

    def __init__(self, message: str, usage: str = ""):
        super().__init__(message)
        self.usage = usage


def data_dir() -> Path:
    """Directory holding the <engine>-<version>.yml flag sets."""
    env = os.environ.get(ENV_DATA)
    candidates = []
    if env:
        candidates += [Path(env) / "engines", Path(env)]
    here = Path(__file__).resolve().parent
    candidates += [here / "data" / "engines", here.parent.parent / "data" / "engines"]
    for cand in candidates:
        if cand.is_dir() and any(cand.glob("*.yml")):
            return cand
    raise SystemExit(
        f"enginesim: no flag sets found (set {ENV_DATA}); looked in {[str(c) for c in candidates]}"
    )


def read_doc(path: Path) -> dict:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.lstrip().startswith("#")]
    return json.loads("\n".join(lines))


DISTS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm", "ray": "ray", "vllm-ascend": "vllm_ascend"}


def version_key(version: str) -> tuple:
    """Release order, as llmbctl.catalog.version_key: 0.19.1 < 0.20.2rc1 < 0.20.2 < 0.23.0."""
    m = re.match(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?", str(version))
    if not m:
        return ((), 0, 0, str(version))
    rel = tuple(int(x) for x in m.group(1).split("."))
    rel = rel + (0,) * (4 - len(rel))
    return (rel, {"a": 0, "b": 1, "rc": 2}.get(m.group(2) or "", 3), int(m.group(3) or 0), str(version))


def _installed_version(engine: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version(DISTS.get(engine, engine))
    except PackageNotFoundError:
        return None


def read_overlay(directory: Path, engine: str, version: str) -> dict:
    """The hand-kept overlay hand/<engine>.yml with its per-release section applied ({} when none)."""
    path = directory / "hand" / f"{engine}.yml"
    if not path.is_file():
        return {}
    overlay = read_doc(path)
    per_release = (overlay.pop("versions", None) or {}).get(version) or {}
    overlay.update(per_release)
    return overlay


def load(engine: str, version: str | None = None, command: tuple[str, ...] | None = None) -> dict:
    """The merged flag set of an engine: the generated <engine>-<version>.yml plus hand/<engine>.yml.

    ``command``: only the releases launched by that command (KTransformers 0.3.x's server, not 0.7's
    SGLang). The version: argument, env LLMB_ENGINESIM_VERSION_<ENGINE>, the version of the installed
    distribution this double stands in for (when a set of it ships), else the newest shipped one.
    """
    directory = data_dir()
    docs = {}
    for path in directory.glob("*.yml"):
        doc = read_doc(path)
        docs[path.stem] = doc
    env_key = "LLMB_ENGINESIM_VERSION_" + engine.upper().replace("-", "_")
    version = version or os.environ.get(env_key)
    mine = {n: d for n, d in docs.items() if d.get("engine") == engine
            and (command is None or tuple(d.get("command") or ()) == tuple(command))}
    if not mine:
        raise SystemExit(f"enginesim: no flag set for {engine} in {directory}")
    if version:
        name = f"{engine}-{version}"
        if name not in mine:
            raise SystemExit(f"enginesim: no flag set {name} in {directory}")
    else:
        installed = _installed_version(engine)
        if installed and f"{engine}-{installed}" in mine:
            name = f"{engine}-{installed}"
        else:
            name = max(mine, key=lambda n: version_key(str(mine[n].get("version"))))
    doc = dict(mine[name])
    if doc.get("extends"):
        base = dict(docs[doc["extends"]])
        flags = dict(base.get("flags", {}))
        base.update({k: v for k, v in doc.items() if k not in ("flags_add", "flags_remove", "extends")})
        flags.update(doc.get("flags_add", {}))
        for gone in doc.get("flags_remove", []):
            flags.pop(gone, None)
        base["flags"] = flags
        doc = base
    for key, value in read_overlay(directory, engine, str(doc.get("version"))).items():
        if key not in ("engine", "source", "spelling"):
            doc[key] = value
        if key == "spelling":  # as planner.flags.respell: the planner's spelling is the key
            flags = dict(doc["flags"])
            for canon, want in value.items():
                spec = flags.get(canon)
                if spec is None or want not in (spec.get("aliases") or []):
                    continue
                new = dict(spec, aliases=sorted({*(a for a in spec["aliases"] if a != want), canon}))
                del flags[canon]
                flags[want] = new
            doc["flags"] = flags
    return doc


def _aliases(fs: dict) -> dict[str, str]:
    out = {}
    for canon, spec in fs["flags"].items():
        out[canon] = canon
        for alias in spec.get("aliases", []):
            out[alias] = canon
    return out


def parse_strict(fs: dict, argv: list[str]) -> dict:
    """``parse`` as argparse does it: a token that is no flag is refused ('unrecognized arguments: ...')."""
    args, pos = parse(fs, argv)
    if pos:
        raise UsageError(f"unrecognized arguments: {' '.join(pos)}")
    return args


def parse(fs: dict, argv: list[str], max_positionals: int | None = None) -> tuple[dict, list[str]]:
    """Parse argv into ({'--canonical': value}, positionals). Raises UsageError like the real CLI.

    With ``max_positionals``, positionals beyond it are unrecognized too, reported with the unknown
    options in argv order as argparse does: `vllm serve M --max-num-seqz 64` (a flag the release does
    not have) says "unrecognized arguments: --max-num-seqz 64" (vLLM 0.23.0 on the lent H100)."""
    alias = _aliases(fs)
    click = fs.get("style") == "click"
    underscores = bool(fs.get("underscore_equivalent"))
    values: dict = {}
    positionals: list[str] = []
    unknown: list[str] = []
    i = 0

    strings = {}  # every long option string -> (canonical, negated): argparse's unique prefixes
    for canon, spec in fs["flags"].items():
        for s in [canon, *spec.get("aliases", [])]:
            if s.startswith("--"):
                strings[s] = (canon, False)
        for s in spec.get("negation", []):
            strings[s] = (canon, True)

    negations = {}  # spelled-out negations (--no-x, vLLM 0.33's --disable-x) and hidden ones (--no-enable-x)
    for canon, spec in fs["flags"].items():
        for s in [*spec.get("negation", []), *spec.get("negation_hidden", [])]:
            negations[s] = canon
        for s in spec.get("aliases_hidden", []):
            alias[s] = canon

    def spell(tok: str):
        if tok in alias:
            return alias[tok], False
        if tok in negations:
            return negations[tok], True
        if underscores and tok.startswith("--") and "--" + tok[2:].replace("_", "-") in negations:
            return negations["--" + tok[2:].replace("_", "-")], True
        if underscores and tok.startswith("--"):
            dashed = "--" + tok[2:].replace("_", "-")
            if dashed in alias:
                return alias[dashed], False
        if tok.startswith("--no-") and not any(fs["flags"][c].get("negation_hidden") for c in fs["flags"]):
            base = spell("--" + tok[5:])  # (a release that lists its hidden negations names each one)
            if base and not base[1] and fs["flags"][base[0]]["type"] == "bool":
                return base[0], True
        if fs.get("allow_abbrev") and tok.startswith("--") and len(tok) > 2:
            hits = {hit for s, hit in strings.items() if s.startswith(tok)}
            if len(hits) > 1:
                raise UsageError(f"ambiguous option: {tok} could match "
                                 + ", ".join(sorted(s for s in strings if s.startswith(tok))))
            if hits:
                return next(iter(hits))
        return None

    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            positionals += argv[i + 1 :]
            break
        if not tok.startswith("-") or tok == "-":
            if max_positionals is not None and len(positionals) >= max_positionals:
                unknown.append(tok)
            else:
                positionals.append(tok)
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        found = spell(name)
        if found is None:
            if click:
                raise UsageError(f"No such option: {name}")
            unknown.append(tok)
            i += 1
            continue
        canon, negated = found
        spec = fs["flags"][canon]
        kind = spec["type"]
        if kind in ("flag", "bool") or negated:
            if eq:
                raise UsageError(f"argument {name}: ignored explicit argument {inline!r}")
            values[canon] = not negated
            i += 1
            continue
        if eq:
            raw: object = inline
            i += 1
        elif kind == "list":
            raw, i = take_values(argv, i + 1)
            if not raw:
                raise UsageError(f"argument {name}: expected at least one argument")
        elif kind == "optional":
            if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                raw, i = argv[i + 1], i + 2
            else:
                raw, i = True, i + 1
        else:
            if i + 1 >= len(argv) or (argv[i + 1].startswith("-") and not _numeric(argv[i + 1])):
                if click:
                    raise UsageError(f"Option '{name}' requires an argument.")
                raise UsageError(f"argument {name}: expected one argument")
            raw, i = argv[i + 1], i + 2
        values[canon] = _convert(name, kind, spec, raw, click)
    if unknown:
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
    return values, positionals


def usage_error(usage: str, error: str) -> int:
    """Print a command's usage and error to stderr; the exit status of a usage error (2)."""
    print(usage, file=sys.stderr)
    print(error, file=sys.stderr)
    return 2


def take_values(argv: list[str], start: int) -> tuple[list[str], int]:
    """The values of a list flag (nargs +): argv from start up to the next option, and the index after them."""
    end = start
    while end < len(argv) and not argv[end].startswith("-"):
        end += 1
    return argv[start:end], end


def _numeric(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _convert(name: str, kind: str, spec: dict, raw, click: bool):
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        if click:
            raise UsageError(f"Invalid value for '{name}': {raw!r} is not a valid {kind}.") from None
        raise UsageError(f"argument {name}: invalid {kind} value: {raw!r}") from None
    if kind == "choice" and raw not in spec.get("choices", []):
        choices = ", ".join(repr(c) for c in spec.get("choices", []))
        if click:
            raise UsageError(f"Invalid value for '{name}': {raw!r} is not one of {choices}.")
        raise UsageError(f"argument {name}: invalid choice: {raw!r} (choose from {choices})")
    if kind == "json" and isinstance(raw, str) and raw.strip().startswith(("{", "[")):
        try:
            return json.loads(raw)
        except ValueError:
            raise UsageError(f"argument {name}: invalid loads value: {raw!r}") from None
    return raw
