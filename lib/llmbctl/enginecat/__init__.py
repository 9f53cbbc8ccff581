"""The engine catalog generator: data/engines/<engine>-<version>.yml from the real release.

    extract("vllm==0.19.1", out_dir)   # throwaway venv (uv), install from the index, walk the CLI
    build_doc(raw, engine, version, requirements, generator) -> the flag set document
    render(doc) -> the file text (deterministic: sorted keys, no timestamps)

The generated file is JSON below a comment header (the engine test double reads it with the
standard library). Hand-kept knowledge (renames, planner-owned flags, images, config checks,
defaults the planner relies on) lives in data/engines/hand/<engine>.yml and is merged by the loader
(planner.flags.flagset_from_doc); regeneration never touches it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..catalog import version_key
from .requirements import read_plugin_requirements, read_requirements

GENERATOR = "scripts/engine-catalog extract"
FORMAT_NOTE = [
    "FORMAT: JSON after the comment lines (every line starting with '#') are removed; the engine test",
    "double reads it with json.loads, the planner with llmbctl.catalog. Do not edit by hand: regenerate.",
    "flag types: flag = no value (store_true/store_const, click flag); bool = --x and --no-x;",
    "int/float/str/json = one value; list = one or more values (nargs + or *); optional = zero or",
    "one value (nargs ?); choice = one value out of 'choices'. 'nargs', 'default', 'action' and",
    "'value_type' are the parser's own.",
]


# what a platform plugin's walk does where the plugin cannot load (its wheel or its sdist mode alike)
PLUGIN_FALLBACK = ("Where the plugin cannot load (no CANN here: its platform and general plugins import torch_npu), "
                   "the parser walked is the paired vLLM release's with the plugin's entry points off (VLLM_PLUGINS), "
                   "the load error recorded under 'plugin'; what the plugin changes at platform load is then not in "
                   "this file")


@dataclass(frozen=True)
class EngineSpec:
    engine: str  # data/engines name prefix
    dist: str  # PyPI distribution
    extractor: str  # key understood by extract_cli.py
    cli: str
    command: tuple[str, ...]
    python: str = "3.12"
    extra: tuple[str, ...] = ()
    # a platform plugin whose CLI is that of the base release it pairs with (same version without the
    # rcN suffix): the venv holds both, the plugin installed without its dependencies (see make_venv)
    pairs_with: str | None = None
    note: str = ""
    # False: the package index holds no installable release (a stub, another package): source mode only
    on_index: bool = True
    # what `uv pip install` is given instead of <dist>==<version> ({version} filled in): an extra
    install: str | None = None


ENGINES: dict[str, EngineSpec] = {
    "vllm": EngineSpec("vllm", "vllm", "vllm", "vllm serve", ("vllm", "serve")),
    "sglang": EngineSpec("sglang", "sglang", "sglang", "python -m sglang.launch_server",
                         ("python", "-m", "sglang.launch_server")),
    "ray": EngineSpec("ray", "ray", "ray", "ray start", ("ray", "start"), extra=("click",)),
    "trtllm": EngineSpec("trtllm", "tensorrt-llm", "trtllm", "trtllm-serve serve", ("trtllm-serve", "serve"),
                         on_index=False),
    "ktransformers": EngineSpec(
        "ktransformers", "ktransformers", "ktransformers", "python -m ktransformers.server.main",
        ("python", "-m", "ktransformers.server.main"), python="3.11", on_index=False,
        note="KTransformers' server wheels are GitHub release assets built per CUDA/torch/CPU, not on the "
             "package index (ktransformers 0.5+ there is kt-kernel, another package); option strings, types "
             "and actions are the release's, defaults (read from the site's config.yaml at start) are null"),
    "vllm-ascend": EngineSpec(
        "vllm-ascend", "vllm-ascend", "vllm-ascend", "vllm serve", ("vllm", "serve"), pairs_with="vllm",
        python="3.11",
        note="vllm-ascend is an Ascend platform plugin with x86 wheels on the package index, installed here "
             "beside the vLLM release it pairs with, without its dependencies (its torch-npu pin needs CANN). "
             + PLUGIN_FALLBACK),
    # the prefill/decode routers the SGLang plans start (hand/sglang.yml pd_router): their own parsers
    "sglang-router": EngineSpec(
        "sglang-router", "sglang-router", "sglang-router", "python -m sglang_router.launch_router",
        ("python", "-m", "sglang_router.launch_router"),
        note="SGLang's PD router package; the parser walked is the one its launch_router.parse_router_args builds "
             "(RouterArgs.add_cli_args), which the check also runs on each planned router argv"),
    "smg": EngineSpec(
        "smg", "smg", "smg", "python -m smg.launch_router", ("python", "-m", "smg.launch_router"),
        note="the successor of sglang-router (Shepherd Model Gateway); walked as sglang-router"),
}
DIST_TO_ENGINE = {s.dist: s.engine for s in ENGINES.values()}

# Releases of an engine that another program launches: (first release, its spec), oldest first.
# KTransformers from 0.5 is the kt-kernel CPU-expert library under SGLang's server (the package index's
# ktransformers 0.7.2 holds no ktransformers/server, only a module and `Requires-Dist: kt-kernel==0.7.2`,
# `sglang-kt==0.7.2; extra == "sglang"`): its CLI is `python -m sglang.launch_server` of sglang-kt (an
# SGLang fork that adds the --kt-* options), walked as SGLang's (ServerArgs.add_cli_args).
RELEASE_FORMS: dict[str, tuple[tuple[str, EngineSpec], ...]] = {
    "ktransformers": (
        ("0.5", EngineSpec(
            "ktransformers", "ktransformers", "sglang", "python -m sglang.launch_server",
            ("python", "-m", "sglang.launch_server"), python="3.12", install="ktransformers[sglang]=={version}",
            note="KTransformers 0.5+ runs inside SGLang: ktransformers[sglang] from the package index installs "
                 "kt-kernel and sglang-kt of the same version; the parser walked is sglang-kt's "
                 "`python -m sglang.launch_server` (ServerArgs.add_cli_args) with its --kt-* options")),
    ),
}


def release_spec(eng: EngineSpec, version: str) -> EngineSpec:
    """The spec of one release: the newest RELEASE_FORMS entry at or before ``version``, else ``eng``."""
    chosen = eng
    for since, spec in RELEASE_FORMS.get(eng.engine, ()):
        if version_key(version) >= version_key(since):
            chosen = spec
    return chosen


def spec_of(engine: str, version: str) -> EngineSpec:
    """ENGINES[engine] as the release ``version`` is installed, walked and launched."""
    return release_spec(ENGINES[engine], version)

_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+-]*)$")


class ExtractError(Exception):
    """The release could not be installed or its CLI not walked (message names the step)."""


def parse_spec(spec: str) -> tuple[EngineSpec, str]:
    m = _SPEC.match(spec or "")
    if not m:
        raise ExtractError(f"release {spec!r}: expected <engine>==<version>, e.g. vllm==0.19.1")
    name, version = m.group(1).lower(), m.group(2)
    eng = ENGINES.get(name) or ENGINES.get(DIST_TO_ENGINE.get(name, ""))
    if eng is None:
        raise ExtractError(f"release {spec!r}: unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}")
    return release_spec(eng, version), version


# ----------------------------------------------------------------------------- doc building


def _canonical(opt: dict) -> str:
    strings = [s for s in opt["option_strings"] if s not in opt.get("secondary_opts", [])
               and s not in opt.get("negative_option_strings", [])]
    dashed = "--" + str(opt.get("dest", "")).replace("_", "-")
    if dashed in strings:
        return dashed
    longs = [s for s in strings if s.startswith("--") and not (
        opt["action"] == "BooleanOptionalAction" and s.startswith("--no-"))]
    return (longs or strings or opt["option_strings"])[0]


# argparse actions that take --x and a negation: BooleanOptionalAction (--no-x) and vLLM 0.33's
# EnableDisableAction (--enable-x / --disable-x, --no-enable-x hidden): the action records which
# strings negate (negative_option_strings)
BOOL_ACTIONS = ("BooleanOptionalAction", "EnableDisableAction")


def _kind(opt: dict) -> str:
    action = opt["action"]
    nargs = opt.get("nargs")
    if action.startswith("click."):
        if opt.get("is_flag"):
            return "bool" if opt.get("secondary_opts") else "flag"
        if opt.get("choices") is not None:
            return "choice"
        if isinstance(nargs, int) and nargs > 1:
            return "list"
        return {"integer": "int", "float": "float"}.get(str(opt.get("type")), "str")
    if action in BOOL_ACTIONS:
        return "bool"
    if action in ("_HelpAction", "_VersionAction") and nargs != "?":
        return "flag"
    if nargs == 0 or action in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction",
                                "_CountAction", "_AppendConstAction"):
        return "flag"
    if nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1):
        return "list"
    if nargs == "?":
        return "optional"
    choices = opt.get("choices")
    if choices is not None and all(isinstance(c, str) for c in choices):
        return "choice"
    tname = str(opt.get("type") or "")
    if re.search(r"loads|json|parse_dataclass|union_dict_and_str|dict", tname, re.I):
        return "json"
    if re.fullmatch(r"(_optional_type\()?int\)?", tname):
        return "int"
    if re.fullmatch(r"(_optional_type\()?float\)?", tname):
        return "float"
    return "str"


def strings_sha256(strings: Any) -> str:
    """sha256 of the option strings, sorted, one per line (the generated set's header records it; the
    unit tests recompute it from the file's flags, so a hand edit of the flags shows)."""
    import hashlib

    return hashlib.sha256("".join(s + "\n" for s in sorted(strings)).encode("utf-8")).hexdigest()


def flags_from_options(options: list[dict]) -> tuple[dict[str, dict[str, Any]], int]:
    """(canonical option -> spec, number of option strings) from the walked parser actions."""
    flags: dict[str, dict[str, Any]] = {}
    strings: set[str] = set()
    for opt in options:
        if opt["action"] in ("_HelpAction", "_VersionAction"):
            continue  # --help / --version: recorded under help_options, never planned
        canon = _canonical(opt)
        kind = _kind(opt)
        strings.update(opt["option_strings"])
        hidden = list(opt.get("hidden_option_strings") or [])
        strings.update(hidden)
        negs: list[str] = []
        if kind == "bool":
            if opt["action"].startswith("click."):
                negs = list(opt.get("secondary_opts") or [])
            elif "negative_option_strings" in opt:
                negs = [s for s in opt["option_strings"] if s in opt["negative_option_strings"]]
            else:
                negs = [s for s in opt["option_strings"] if s.startswith("--no-") and s != canon]
        aliases = sorted(s for s in opt["option_strings"] if s != canon and s not in negs)
        spec: dict[str, Any] = {"type": kind, "action": opt["action"], "dest": opt.get("dest")}
        if aliases:
            spec["aliases"] = aliases
        if negs:
            spec["negation"] = sorted(negs)
        if hidden:  # accepted, out of the help: negations where the action says so, else aliases
            neg_hidden = sorted(s for s in hidden if s in (opt.get("negative_option_strings") or []))
            if neg_hidden:
                spec["negation_hidden"] = neg_hidden
            if sorted(set(hidden) - set(neg_hidden)):
                spec["aliases_hidden"] = sorted(set(hidden) - set(neg_hidden))
        for key in ("nargs", "choices", "default", "const"):
            if opt.get(key) is not None:
                spec[key] = opt[key]
        if isinstance(spec.get("choices"), list):
            # sorted: a release may build a choices list from a set (SGLang 0.5.23's --sampling-backend
            # came out in two orders on two walks); the order means nothing to the planner
            spec["choices"] = sorted(spec["choices"], key=lambda c: json.dumps(c, sort_keys=True))
        if opt.get("type") is not None:
            spec["value_type"] = opt["type"]
        if opt.get("required"):
            spec["required"] = True
        if opt.get("multiple"):
            spec["multiple"] = True
        if opt.get("help_suppressed"):
            spec["hidden"] = True
        if canon in flags:
            raise ExtractError(f"two parser actions claim {canon}")
        flags[canon] = spec
    return dict(sorted(flags.items())), len(strings)


def build_doc(raw: dict, eng: EngineSpec, version: str, requirements: dict[str, Any] | None,
              generator: dict[str, Any]) -> dict[str, Any]:
    flags, count = flags_from_options(raw["options"])
    strings = {s for o in raw["options"] if o["action"] not in ("_HelpAction", "_VersionAction")
               for s in [*o["option_strings"], *(o.get("hidden_option_strings") or [])]}
    pos = raw.get("positionals") or []
    positional = None
    if pos:
        p = pos[0]
        positional = {"name": p["dest"], "required": p.get("nargs") not in ("?", "*") and (
            p.get("required", True) if raw.get("style") == "click" else True)}
    probes = raw.get("probes") or {}
    doc: dict[str, Any] = {
        "engine": eng.engine,
        "version": version,
        "cli": eng.cli,
        "command": list(eng.command),
        "style": raw.get("style", "argparse"),
        "allow_abbrev": bool(raw.get("allow_abbrev", False)),
        "rewrites": raw.get("rewrites") or [],
        "underscore_equivalent": bool(probes.get("underscore_equivalent", False)),
        "positional": positional,
        "option_strings": count,
        "option_strings_sha256": strings_sha256(strings),
        "help_options": sorted(s for o in raw["options"] if o["action"] in ("_HelpAction", "_VersionAction")
                               for s in o["option_strings"]),
        "flags": flags,
        "parsers": {k: sorted(v) for k, v in sorted((raw.get("parsers") or {}).items())},
        "architectures": sorted(raw.get("architectures") or []),
        "registry_sources": dict(sorted((raw.get("registry_sources") or {}).items())),
        "requirements": requirements or {},
        "generator": generator,
    }
    if raw.get("plugin"):
        doc["plugin"] = raw["plugin"]
    return doc


def render(doc: dict[str, Any]) -> str:
    """The file text: comment header, then JSON with one flag per line (sorted keys)."""
    gen = doc.get("generator") or {}
    head = [
        f"{doc['engine']} {doc['version']}: `{doc.get('cli', '')}` as its own parser defines it. GENERATED.",
        f"generator: {gen.get('command', GENERATOR)}",
        *textwrap.wrap(f"Where from: {gen.get('release', '?')} ({gen.get('method', '?')})", 98,
                       break_on_hyphens=False),
        *textwrap.wrap(f"Note: {gen['notes']}" if gen.get("notes") else "", 98, break_on_hyphens=False),
        f"option strings: {doc.get('option_strings')}, sha256 of the sorted list (one per line): "
        f"{doc.get('option_strings_sha256', '-')}",
        f"hand-kept knowledge: data/engines/hand/{doc['engine']}.yml",
        *FORMAT_NOTE,
    ]
    out = ["# " + line for line in head]
    out.append("{")
    keys = sorted(doc)
    for i, key in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        value = doc[key]
        if key == "flags":
            out.append('  "flags": {')
            items = list(value.items())
            for j, (flag, spec) in enumerate(items):
                c = "," if j < len(items) - 1 else ""
                out.append(f"    {json.dumps(flag)}: {json.dumps(spec, sort_keys=True, ensure_ascii=True)}{c}")
            out.append("  }" + comma)
        else:
            out.append(f"  {json.dumps(key)}: {json.dumps(value, sort_keys=True, ensure_ascii=True)}{comma}")
    out.append("}")
    return "\n".join(out) + "\n"


def write_atomic(path: Path, text: str) -> bool:
    """Write when the content differs; True when the file changed."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=path.name + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return True


# ----------------------------------------------------------------------------- extraction


def _uv() -> str:
    for cand in (os.environ.get("LLMB_UV"), shutil.which("uv"), str(Path(sys.executable).parent / "uv"),
                 "/work/main/.venv/bin/uv"):
        if cand and Path(cand).is_file():
            return cand
    raise ExtractError("uv not found: set LLMB_UV or install uv into the controller venv")


def _python(version: str) -> str:
    """An interpreter of ``version`` already on this machine (uv downloads one otherwise, which needs
    github.com): $LLMB_ENGINE_PYTHON, python<version> on PATH, a pyenv install; else the bare version."""
    cands = [os.environ.get("LLMB_ENGINE_PYTHON"), shutil.which(f"python{version}")]
    root = Path(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))) / "versions"
    if root.is_dir():
        cands += [str(d / "bin" / f"python{version}") for d in sorted(root.iterdir(), reverse=True)
                  if d.name == version or d.name.startswith(version + ".")]
    for cand in cands:
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK) and "/shims/" not in cand:
            return cand
    return version


def _run(argv: list[str], env: dict[str, str], step: str, timeout: int = 3600) -> str:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-15:]
        raise ExtractError(f"{step} failed (exit {proc.returncode}): " + " | ".join(tail))
    return proc.stdout


ENV_EXTRA = {"PYTHONDONTWRITEBYTECODE": "1", "VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false",
             "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "VLLM_TARGET_DEVICE": "cpu"}


def make_venv(eng: EngineSpec, version: str, work: Path, log=print) -> Path:
    """A venv under ``work`` holding <dist>==<version> from the package index (uv, cache in work). A
    platform plugin (``pairs_with``): the base release first, then the plugin without its dependencies."""
    if not eng.on_index:
        raise ExtractError(f"{eng.dist}=={version} cannot be installed from the package index here: walk it "
                           f"from source (--source {eng.dist}=={version}=<file or dir>; docs/engines.md)")
    env = dict(os.environ, UV_CACHE_DIR=str(work / "uv-cache"), **ENV_EXTRA)
    uv = _uv()
    venv = work / "venv"
    base, base_version = paired(eng, version)
    sdist = None
    if base is not eng:
        entry = sdist_only(eng.dist, version)
        if entry is not None:
            log(f"{eng.dist}=={version}: the package index holds {entry['filename']} only (no wheel): sdist mode")
            sdist = fetch_sdist(eng, version, entry, work)
            if sdist.base_version != base_version:
                log(f"{sdist.filename} pairs with {base.dist}=={sdist.base_version} ({'; '.join(sdist.pins)})")
            base_version = sdist.base_version
    log(f"venv {venv} (python {eng.python})")
    _run([uv, "venv", "-q", "--python", _python(eng.python), str(venv)], env, "uv venv")
    py = str(venv / "bin" / "python")
    log(f"installing {base.install.format(version=base_version) if base.install else base.dist + '==' + base_version}"
        " (uv pip install)")
    want = base.install.format(version=base_version) if base.install else f"{base.dist}=={base_version}"
    _run([uv, "pip", "install", "-q", "--python", py, want, *base.extra], env, f"uv pip install {want}")
    if base is not eng and sdist is not None:
        log(f"copying {eng.dist}=={version}'s Python package and metadata from {sdist.filename} (sdist mode)")
        install_sdist_files(sdist, venv)
    elif base is not eng:
        log(f"installing {eng.dist}=={version} without its dependencies (uv pip install --no-deps)")
        _run([uv, "pip", "install", "-q", "--python", py, "--no-deps", f"{eng.dist}=={version}"], env,
             f"uv pip install --no-deps {eng.dist}=={version}")
    shutil.rmtree(work / "uv-cache", ignore_errors=True)
    shutil.rmtree(work / "sdist", ignore_errors=True)
    return venv


# ----------------------------------------------------------------------------- sdist mode (a platform plugin)
#
# A platform plugin release that the package index holds as an sdist only (vllm-ascend 0.23.0.post1): its build
# compiles Ascend kernels against CANN and torch-npu, which this machine has not. The sdist is downloaded from the
# URL the index lists and checked against the index's sha256; the vLLM release it pairs with is read from the
# sdist's own files (PAIR_PINS, every one found must agree); its Python package and its metadata (the PKG-INFO and
# the egg-info entry points setuptools wrote into the sdist) are copied into the venv as a dist-info, so vLLM finds
# its entry points and the plugin probe tries to load it exactly as it would an installed wheel.

INDEX_URL = "https://pypi.org/simple"
# where a vllm-ascend sdist names the vLLM release it runs on: (file, pattern whose group 1 is the version)
PAIR_PINS: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm-ascend": (("docs/source/conf.py", r'^\s*"pip_vllm_version":\s*"v?([0-9][0-9A-Za-z.+-]*)"'),
                    ("Dockerfile", r"^ARG VLLM_TAG=v?([0-9][0-9A-Za-z.+-]*)\s*$")),
}


@dataclass(frozen=True)
class Sdist:
    filename: str
    sha256: str
    url: str
    root: Path  # the unpacked tree (<name>-<version>/)
    pins: tuple[str, ...]  # "<file>:<line>: <text>" of each pin read
    base_version: str


def index_files(dist: str, version: str) -> list[dict[str, Any]]:
    """The files the package index lists for <dist>==<version> (its simple JSON API, PEP 691):
    [{filename, url, hashes}]. $LLMB_INDEX_URL overrides the index."""
    import urllib.request

    base = os.environ.get("LLMB_INDEX_URL") or INDEX_URL
    name = re.sub(r"[-_.]+", "-", dist).lower()
    req = urllib.request.Request(f"{base.rstrip('/')}/{name}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - the configured index, https
            doc = json.load(resp)
    except (OSError, ValueError) as err:
        raise ExtractError(f"reading the package index's file list of {dist} failed: {err}") from err
    norm = re.sub(r"[-_.]+", "_", dist).lower()
    out = []
    for f in doc.get("files") or []:
        fn = str(f.get("filename", ""))
        if fn.endswith(".tar.gz"):  # <name>-<version>.tar.gz
            n, _, v = fn[: -len(".tar.gz")].rpartition("-")
        else:  # <name>-<version>-<tags>.whl
            n, v = (fn.split("-") + ["", ""])[:2]
        if re.sub(r"[-_.]+", "_", n).lower() == norm and v == version:
            out.append(f)
    return out


def sdist_only(dist: str, version: str) -> dict[str, Any] | None:
    """The sdist entry of a release the index holds without any wheel; None when it has a wheel."""
    files = index_files(dist, version)
    if not files:
        raise ExtractError(f"the package index lists no file of {dist}=={version}")
    if any(str(f["filename"]).endswith(".whl") for f in files):
        return None
    sdists = [f for f in files if str(f["filename"]).endswith(".tar.gz")]
    if not sdists:
        raise ExtractError(f"the package index lists neither a wheel nor an sdist of {dist}=={version}")
    return sdists[0]


def fetch_sdist(eng: EngineSpec, version: str, entry: dict[str, Any], work: Path) -> Sdist:
    """Download the sdist the index lists, check its sha256, unpack it, read the paired base release."""
    import hashlib
    import tarfile
    import urllib.request

    want = str((entry.get("hashes") or {}).get("sha256", ""))
    if not re.fullmatch(r"[0-9a-f]{64}", want):
        raise ExtractError(f"the package index gives no sha256 for {entry.get('filename')}")
    dest = work / "sdist"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / Path(str(entry["filename"])).name
    try:
        with urllib.request.urlopen(str(entry["url"]), timeout=600) as resp, open(path, "wb") as fh:  # noqa: S310
            shutil.copyfileobj(resp, fh)
    except OSError as err:
        raise ExtractError(f"downloading {entry['filename']} failed: {err}") from err
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != want:
        raise ExtractError(f"{entry['filename']}: sha256 {got}, the package index says {want}")
    with tarfile.open(path) as tf:
        tf.extractall(dest, filter="data")
    roots = [d for d in dest.iterdir() if d.is_dir()]
    if len(roots) != 1:
        raise ExtractError(f"{entry['filename']}: expected one top directory, found {len(roots)}")
    pins, versions = [], set()
    for rel, pattern in PAIR_PINS.get(eng.engine, ()):
        f = roots[0] / rel
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines() if f.is_file() else []
        for i, line in enumerate(lines, 1):
            m = re.match(pattern, line)
            if m:
                pins.append(f"{rel}:{i}: {line.strip()}")
                versions.add(m.group(1))
                break
    if len(versions) != 1:
        raise ExtractError(f"{entry['filename']}: the {eng.pairs_with} release it pairs with is not read from "
                           f"its files ({', '.join(r for r, _ in PAIR_PINS.get(eng.engine, ()))}): found "
                           f"{sorted(versions) or 'none'}")
    return Sdist(path.name, got, str(entry["url"]), roots[0], tuple(pins), versions.pop())


def install_sdist_files(sdist: Sdist, venv: Path) -> None:
    """Copy the sdist's Python packages and its metadata into the venv as <name>-<version>.dist-info
    (METADATA = PKG-INFO, entry_points.txt and top_level.txt of its egg-info, RECORD of what was copied,
    INSTALLER naming this mode, SDIST recording the file and its sha256)."""
    import base64
    import hashlib

    eggs = sorted(sdist.root.glob("*.egg-info"))
    if not eggs or not (sdist.root / "PKG-INFO").is_file():
        raise ExtractError(f"{sdist.filename}: no PKG-INFO / egg-info in the sdist")
    egg = eggs[0]
    meta = (sdist.root / "PKG-INFO").read_text(encoding="utf-8")
    name = re.search(r"^Name:\s*(\S+)", meta, re.M)
    ver = re.search(r"^Version:\s*(\S+)", meta, re.M)
    if not name or not ver:
        raise ExtractError(f"{sdist.filename}: PKG-INFO names no Name / Version")
    tops = [t.strip() for t in (egg / "top_level.txt").read_text(encoding="utf-8").splitlines() if t.strip()]
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if not sites or not tops:
        raise ExtractError(f"{sdist.filename}: no site-packages in {venv} or no top-level package in the sdist")
    site = sites[0]
    info = site / f"{re.sub(r'[-_.]+', '_', name.group(1))}-{ver.group(1)}.dist-info"
    info.mkdir()
    files: list[Path] = []
    for top in tops:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top) or not (sdist.root / top).is_dir():
            raise ExtractError(f"{sdist.filename}: top-level package {top!r} is not a directory of the sdist")
        shutil.copytree(sdist.root / top, site / top)
        files += sorted(p for p in (site / top).rglob("*") if p.is_file())
    (info / "METADATA").write_text(meta, encoding="utf-8")
    for fn in ("entry_points.txt", "top_level.txt"):
        if (egg / fn).is_file():
            shutil.copyfile(egg / fn, info / fn)
    (info / "INSTALLER").write_text("llmb engine-catalog (sdist mode: files copied, nothing built)\n",
                                    encoding="utf-8")
    (info / "SDIST").write_text(json.dumps({"filename": sdist.filename, "sha256": sdist.sha256,
                                            "url": sdist.url, "pins": list(sdist.pins),
                                            "base_version": sdist.base_version}, sort_keys=True) + "\n",
                                encoding="utf-8")
    rows = []
    for p in [*files, *sorted(info.iterdir())]:
        digest = base64.urlsafe_b64encode(hashlib.sha256(p.read_bytes()).digest()).rstrip(b"=").decode()
        rows.append(f"{p.relative_to(site).as_posix()},sha256={digest},{p.stat().st_size}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n", encoding="utf-8")


def sdist_record(venv: Path, dist: str, version: str) -> dict[str, Any] | None:
    """The SDIST record a sdist-mode venv holds for <dist>==<version> (None: installed from a wheel)."""
    norm = re.sub(r"[-_.]+", "_", dist).lower()
    for site in sorted(Path(venv).glob("lib/python*/site-packages")):
        for info in sorted(site.glob(f"*-{version}.dist-info")):
            name = info.name[: -len(".dist-info")].rpartition("-")[0]
            if re.sub(r"[-_.]+", "_", name).lower() == norm and (info / "SDIST").is_file():
                return json.loads((info / "SDIST").read_text(encoding="utf-8"))
    return None


def run_in_venv(venv: Path, args: list[str], stdin: str | None = None, timeout: int = 900,
                source: Path | None = None) -> Any:
    """Run extract_cli.py with the venv's interpreter; the JSON it prints after its marker. With
    ``source``, the CLI is loaded from that source file (heavy imports stubbed, see extract_cli)."""
    env = dict(os.environ, **ENV_EXTRA)
    env.pop("LLMB_ENGINE_SOURCE", None)
    if source is not None:
        env["LLMB_ENGINE_SOURCE"] = str(source)
    script = str(Path(__file__).with_name("extract_cli.py"))
    argv = [str(venv / "bin" / "python"), script, *args]
    proc = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)
    out = proc.stdout
    marker = out.rfind("@@EXTRACT@@")
    if proc.returncode != 0 or marker < 0:
        tail = (proc.stderr or out or "").strip().splitlines()[-15:]
        raise ExtractError(f"extract_cli.py {' '.join(args)} failed (exit {proc.returncode}): " + " | ".join(tail))
    return json.loads(out[marker + len("@@EXTRACT@@"):])


def release_requirements_of(venv: Path, eng: EngineSpec, version: str) -> dict[str, Any]:
    """What the release needs from the node, read from the venv that holds it: a platform plugin's own
    METADATA (its runtime is not a Python package), else the release's (requirements.py)."""
    if eng.pairs_with:
        out = read_plugin_requirements(venv, eng.dist, version)
        rec = sdist_record(venv, eng.dist, version)
        if rec and out.get("requirements_from"):  # sdist mode: METADATA is the sdist's PKG-INFO
            info, _, what = out["requirements_from"].partition(": ")
            out["requirements_from"] = f"{rec['filename']} PKG-INFO (copied as {info}/METADATA): {what}"
        return out
    return read_requirements(venv, eng.dist, version)


def extract_raw(eng: EngineSpec, version: str, venv: Path | None = None, log=print) -> tuple[dict, dict]:
    """Walk the CLI of <dist>==<version>: in ``venv`` when given (it must hold that release), else in a
    throwaway venv under $TMPDIR that is deleted afterwards. (raw walk, requirements)."""
    work = None
    if venv is None:
        work = Path(tempfile.mkdtemp(prefix=f"engcat-{eng.engine}-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        if venv is None:
            venv = make_venv(eng, version, work, log=log)  # type: ignore[arg-type]
        log("walking the CLI parser")
        raw = run_in_venv(venv, [eng.extractor])
        if eng.pairs_with and sdist_record(venv, eng.dist, version):
            raw["sdist"] = sdist_record(venv, eng.dist, version)  # sdist mode: where the plugin came from
        return raw, release_requirements_of(venv, eng, version)
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def paired(eng: EngineSpec, version: str) -> tuple[EngineSpec, str]:
    """The release actually installed: the base engine's for a platform plugin (0.20.2rc1 -> 0.20.2)."""
    if not eng.pairs_with:
        return eng, version
    return ENGINES[eng.pairs_with], re.sub(r"(rc|a|b)\d+$|\.post\d+$", "", version)


# Provenance that the walk cannot tell, written into the generated file's generator block.
RELEASE_NOTES: dict[tuple[str, str], str] = {
    ("trtllm", "1.1.0"): (
        "tensorrt-llm 1.1.0 on PyPI is a 9.8 kB wheel_stub sdist that fetches the wheel from pypi.nvidia.com "
        "(unreachable here), so the CLI is walked from source. The v1.1.0 tree is NVIDIA/TensorRT-LLM "
        "48b7b5d8b7ed (the tensorrt_llm submodule of triton-inference-server/tensorrtllm_backend's 'v1.1.0 "
        "release' commit b9cc224883da); no copy of that tree was reachable (the code index holds "
        "tensorrt_llm/commands/serve.py at other commits only, the repository snapshot is over the size "
        "limit). Walked instead: the file at 4c05a74891e4 on main, the nearest reachable; it postdates the "
        "release/1.1 branch point (it has --media_io_kwargs, added by PR #8528 on 2025-10-24), so it may "
        "hold options 1.1.0 lacks. The file walked is its first 13873 characters (imports through the "
        "docstring of serve(), i.e. every click decorator of `serve`), copied from the code index. "
        "Requirements (CUDA, torch, glibc) are not derivable without the wheel."),
    ("vllm-ascend", "0.20.2rc1"): (
        "wheels cp310/cp311 manylinux_2_24_x86_64 on the index; its dependencies triton-ascend==3.2.1 (not on "
        "the index) and torch-npu==2.10.0 are not installed: torch-npu 2.10.0 fails on import without CANN "
        "('ImportError: libhccl.so: cannot open shared object file', seen here in a venv holding it, where "
        "`import torch` then fails too, on its backend autoload). Not applied, so not in this file: the "
        "plugin's global patches (vllm_ascend/patch/platform). Its NPUPlatform.pre_register_and_update "
        "appends 'ascend' to the choices of --quantization only where that option has choices; vLLM 0.20.2's "
        "has none (any string passes), so `--quantization ascend` passes this set as it would the plugin's "
        "parser."),
    ("vllm-ascend", "0.23.0.post1"): (
        "its dependencies torch-npu==2.10.0.post4, triton-ascend==3.2.2, memfabric_hybrid==1.2.0 and "
        "memcache_hybrid==1.2.0 (Requires-Dist of its PKG-INFO) are not installed, its C++/Ascend C kernels "
        "(csrc, CMakeLists.txt) not built. Not applied, so not in this file: the plugin's global patches "
        "(vllm_ascend/patch/platform, applied by adapt_patch in NPUPlatform.pre_register_and_update). That "
        "method (vllm_ascend/platform.py:184 of the sdist) appends 'ascend' to the choices of --quantization "
        "only where that option has choices; vLLM 0.23.0's has none (any string passes), so `--quantization "
        "ascend` passes this set as it would the plugin's parser; the plugin adds no option of its own (no "
        "add_argument in vllm_ascend)."),
    ("ktransformers", "0.3.2"): (
        "the tag v0.3.2 of kvcache-ai/ktransformers is commit 495ae374780bff7aeb4c5742b8a6a13ec1eca221 "
        "(2025-07-01, 'Merge pull request #1407 from kvcache-ai/v0.3.2'); the tree is `git archive v0.3.2 "
        "ktransformers/server` of a snapshot of that repository. Requirements are not derivable without the "
        "release wheel."),
}

SOURCE_DEPS = ("click==8.1.8",)  # what a source-mode walk installs (click: TRT-LLM's CLI framework)


def extract_source(eng: EngineSpec, source: Path, log=print) -> dict:
    """Walk the CLI defined in one source file of the release, or in its source tree (a directory: the
    release tag's files, KTransformers) (source mode): a throwaway venv holding only SOURCE_DEPS, the
    source executed there with every other import stubbed (extract_cli.py)."""
    if not source.exists():
        raise ExtractError(f"source {source} does not exist")
    work = Path(tempfile.mkdtemp(prefix=f"engcat-{eng.engine}-src-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        venv = make_source_venv(eng, work)
        log(f"walking the CLI defined in {source} (heavy imports stubbed)")
        return run_in_venv(venv, [eng.extractor], source=source)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def make_source_venv(eng: EngineSpec, work: Path) -> Path:
    """A venv under ``work`` holding only SOURCE_DEPS (source mode)."""
    env = dict(os.environ, UV_CACHE_DIR=str(work / "uv-cache"), **ENV_EXTRA)
    venv = work / "venv"
    _run([_uv(), "venv", "-q", "--python", _python(eng.python), str(venv)], env, "uv venv")
    _run([_uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *SOURCE_DEPS], env,
         "uv pip install " + " ".join(SOURCE_DEPS))
    shutil.rmtree(work / "uv-cache", ignore_errors=True)
    return venv


# The file of a source tree that a source-mode walk reads (the rest of the tree is stubbed or unused).
SOURCE_TREE_FILE = {"ktransformers": "ktransformers/server/args.py"}


def source_note(source: Path, ref: str, engine: str = "") -> str:
    import hashlib

    if source.is_dir():
        rel = SOURCE_TREE_FILE.get(engine)
        if rel is None:
            raise ExtractError(f"a source tree is walked for {', '.join(sorted(SOURCE_TREE_FILE))} only, not {engine}")
        path = source / rel
        if not path.is_file():
            raise ExtractError(f"source tree {source} has no {rel}")
        data = path.read_bytes()
        return (f"source tree {ref}, walked file {rel} {len(data)} bytes, sha256 "
                f"{hashlib.sha256(data).hexdigest()[:16]}; its heavy imports (torch, transformers, the config "
                "loader) stubbed")
    data = source.read_bytes()
    return (f"{ref}, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}; "
            f"walked with {' '.join(SOURCE_DEPS)}, every other import stubbed")


def apply_stubbed(doc: dict[str, Any], stubbed: dict[str, dict]) -> None:
    """Mark the values a source-mode walk could not read (they came from a stubbed import)."""
    by_dest = {spec.get("dest"): spec for spec in doc["flags"].values()}
    for dest, what in sorted(stubbed.items()):
        spec = by_dest.get(dest)
        if spec is None:
            continue
        if "default" in what:
            spec["default_from"] = what["default"]
        if "choices" in what:
            spec["choices_unknown"] = True


def extract(spec: str, out_dir: Path, log=print, venv: Path | None = None, source: Path | None = None,
            source_ref: str | None = None, requirements: dict[str, Any] | None = None) -> Path:
    eng, version = parse_spec(spec)
    base, base_version = paired(eng, version)
    if source is None and os.environ.get("LLMB_ENGINE_SOURCE"):  # the older spelling of --source DIR
        source = Path(os.environ["LLMB_ENGINE_SOURCE"])
    if source is not None:
        if not source_ref:
            raise ExtractError("--source needs --source-ref: <repo>@<commit>:<path> the source was read from")
        note = source_note(source, source_ref, eng.engine)
        raw = extract_source(eng, source, log=log) if venv is None else run_in_venv(venv, [eng.extractor],
                                                                                      source=source)
        reqs: dict[str, Any] = {}
        method = "source mode: " + note + (f" ({eng.note})" if eng.note else "")
        release = source_ref
    else:
        raw, reqs = extract_raw(eng, version, venv=venv, log=log)
        method = "installed from the package index; parser walked in the release's own venv"
        release = f"{base.dist}=={base_version}"
        if base.install:  # another program's parser (KTransformers 0.5+: SGLang's)
            release = base.install.format(version=base_version)
            method += f": {base.note}"
    if base is not eng and raw.get("sdist"):
        rec = raw["sdist"]
        base_version = rec["base_version"]
        release = f"{eng.dist}=={version} with {base.dist}=={base_version}"
        method = (f"sdist mode: the package index holds {eng.dist} {version} as an sdist only, {rec['filename']} "
                  f"sha256 {rec['sha256']}; building it compiles Ascend kernels against CANN and torch-npu, so "
                  f"nothing is built: its Python package and metadata (PKG-INFO as METADATA, the entry points "
                  f"of its egg-info) are copied into one venv beside {base.dist}=={base_version} installed from "
                  f"the package index, the release it pairs with read from the sdist's own files ("
                  + "; ".join(rec["pins"]) + f"). {PLUGIN_FALLBACK}")
    elif base is not eng:
        release = f"{eng.dist}=={version} with {base.dist}=={base_version}"
        method = f"both installed from the package index into one venv: {eng.note}"
    if requirements:
        reqs = dict(reqs, **requirements)
    command = f"{GENERATOR} {eng.dist}=={version}"
    if source is not None:
        command += f" --source <{'dir' if source.is_dir() else 'file'}> --source-ref {source_ref}"
    generator = {"command": command, "release": release, "method": method}
    if (eng.engine, version) in RELEASE_NOTES:
        generator["notes"] = RELEASE_NOTES[(eng.engine, version)]
    doc = build_doc(raw, eng, version, reqs, generator)
    apply_stubbed(doc, raw.get("stubbed") or {})
    path = out_dir / f"{eng.engine}-{version}.yml"
    changed = write_atomic(path, render(doc))
    log(f"{path}: {doc['option_strings']} option strings, {len(doc['flags'])} options"
        + ("" if changed else " (unchanged)"))
    return path


def diff_sets(old: dict, new: dict) -> dict[str, list[str]]:
    """Option strings removed and added between two generated sets (the hidden ones included: a
    string the parser still accepts is not removed), and those the newer set hides from its help."""
    from ..engines.registry import option_strings

    a, b = option_strings(old), option_strings(new)
    hidden = {s for spec in new.get("flags", {}).values()
              for s in [*spec.get("aliases_hidden", []), *spec.get("negation_hidden", [])]}
    out = {"removed": sorted(a - b), "added": sorted(b - a)}
    if hidden:
        out["hidden"] = sorted(hidden)
    return out


def shipped(cat: Any) -> dict[str, list[str]]:
    """engine -> shipped versions, oldest first (llmbctl.catalog.version_key order)."""
    out: dict[str, list[str]] = {}
    for rel in cat.engine_releases():
        out.setdefault(rel.engine, []).append(rel.version)
    return {k: sorted(v, key=version_key) for k, v in out.items()}
