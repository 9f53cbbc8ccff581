"""Run INSIDE a throwaway venv that holds one engine release: walk its real CLI, print JSON.

    python extract_cli.py vllm|vllm-ascend|sglang|ray|trtllm|ktransformers
    python extract_cli.py check <engine>      # planned argv (JSON on stdin) through the parser
    python extract_cli.py plugin-probe        # vLLM's platform resolution with the installed plugins

Standard library plus the installed engine only (this file is copied into nothing: it is run by
path with the venv's interpreter). Prints one JSON document on stdout:
  {"style", "allow_abbrev", "prog", "options": [...], "positionals": [...], "parsers": {...},
   "architectures": [...], "registry_sources": {...}}
Every option is one parser action: its option strings, action kind, type name, nargs, choices,
default (normalised to plain JSON so that the output is the same on every run).
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import sys

# ----------------------------------------------------------------------- normalising values


def norm(value, depth=0):
    """A default or choice as plain, deterministic JSON (no object reprs with addresses)."""
    if depth > 6:
        return "<deep>"
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        return value
    if isinstance(value, enum.Enum):
        return norm(value.value, depth + 1)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [norm(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((norm(v, depth + 1) for v in value), key=lambda x: json.dumps(x, sort_keys=True))
    if isinstance(value, dict):
        return {str(k): norm(v, depth + 1) for k, v in value.items()}
    if value is argparse.SUPPRESS:
        return "<suppressed>"
    if callable(value):
        return "<callable {}>".format(getattr(value, "__name__", type(value).__name__))
    return f"<{type(value).__name__}>"


def type_name(tp, depth: int = 0) -> str | None:
    """The converter's name; a closure (vLLM's optional_type(int), parse_type(json.loads)) shows
    what it wraps: '_optional_type(int)'."""
    if tp is None:
        return None
    name = getattr(tp, "__name__", None) or type(tp).__name__
    if name == "<lambda>":
        name = "lambda"
    inner = []
    for cell in getattr(tp, "__closure__", None) or ():
        try:
            val = cell.cell_contents
        except ValueError:
            continue
        if callable(val) and depth < 3:
            inner.append(type_name(val, depth + 1))
    if inner:
        name += "(" + ",".join(sorted(i for i in inner if i)) + ")"
    return name


# ----------------------------------------------------------------------- argparse


def walk_argparse(parser: argparse.ArgumentParser) -> dict:
    options, positionals = [], []
    registered: dict = {}  # action -> every option string the parser matches to it
    for string, act in parser._option_string_actions.items():
        registered.setdefault(id(act), []).append(string)
    for act in parser._actions:
        rec = {
            "option_strings": list(act.option_strings),
            "dest": act.dest,
            "action": type(act).__name__,
            "type": type_name(act.type),
            "nargs": act.nargs if act.nargs is None or isinstance(act.nargs, (int, str)) else str(act.nargs),
            "choices": None if act.choices is None else [norm(c) for c in act.choices],
            "default": norm(act.default),
            "required": bool(act.required),
            "const": norm(act.const) if act.const is not None else None,
            "help_suppressed": act.help == argparse.SUPPRESS,
        }
        # strings the parser still matches but keeps out of the action's list and its help (vLLM 0.33's
        # EnableDisableAction: --no-enable-x beside --enable-x / --disable-x)
        hidden = sorted(set(registered.get(id(act), [])) - set(act.option_strings))
        if hidden:
            rec["hidden_option_strings"] = hidden
        negative = getattr(act, "negative_option_strings", None)  # the strings that set the dest False
        if negative is not None:
            rec["negative_option_strings"] = sorted(negative)
        (options if act.option_strings else positionals).append(rec)
    return {
        "style": "argparse",
        "prog": parser.prog,
        "allow_abbrev": bool(getattr(parser, "allow_abbrev", True)),
        "prefix_chars": parser.prefix_chars,
        "options": options,
        "positionals": positionals,
    }


# ----------------------------------------------------------------------- click


def walk_click(cmd) -> dict:
    import click

    options, positionals = [], []
    for p in cmd.params:
        tp = p.type
        choices = list(tp.choices) if isinstance(tp, click.Choice) else None
        aliases = getattr(tp, "aliases", None)  # e.g. TRT-LLM's ChoiceWithAlias: 'trt' -> 'tensorrt'
        if choices is not None and isinstance(aliases, dict):
            choices += sorted(str(k) for k in aliases if k not in choices)
        rec = {
            "option_strings": list(p.opts) + list(getattr(p, "secondary_opts", []) or []),
            "secondary_opts": list(getattr(p, "secondary_opts", []) or []),
            "dest": p.name,
            "action": "click." + type(p).__name__,
            "type": getattr(tp, "name", type(tp).__name__),
            "is_flag": bool(getattr(p, "is_flag", False)),
            "multiple": bool(getattr(p, "multiple", False)),
            "nargs": p.nargs,
            "choices": None if choices is None else [norm(c) for c in choices],
            "default": norm(p.default) if not callable(p.default) else "<callable>",
            "required": bool(p.required),
            "help_suppressed": bool(getattr(p, "hidden", False)),
        }
        (options if isinstance(p, click.Option) else positionals).append(rec)
    return {
        "style": "click",
        "prog": cmd.name,
        "allow_abbrev": False,
        "prefix_chars": "-",
        "options": options,
        "positionals": positionals,
    }


# ----------------------------------------------------------------------- registries


def _keys(obj) -> list[str]:
    out: set[str] = set()
    for attr in ("tool_parsers", "lazy_parsers", "reasoning_parsers", "_lazy_parsers", "lazy_reasoning_parsers"):
        d = getattr(obj, attr, None)
        if isinstance(d, dict):
            out.update(str(k) for k in d)
    return sorted(out)


def _try(*paths):
    """First importable (module, attribute) pair; (object, 'module:attr') or (None, errors)."""
    import importlib

    errs = []
    for mod, attr in paths:
        try:
            m = importlib.import_module(mod)
            return getattr(m, attr), f"{mod}:{attr}"
        except Exception as exc:  # noqa: BLE001 - every failure is reported
            errs.append(f"{mod}:{attr}: {type(exc).__name__}")
    return None, "; ".join(errs)


def vllm_cpu_platform() -> None:
    import vllm.platforms as P
    from vllm.platforms.cpu import CpuPlatform

    P._current_platform = CpuPlatform()


def vllm_parser():
    vllm_cpu_platform()
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return vllm_make_arg_parser()(FlexibleArgumentParser(prog="vllm serve"))


def vllm_make_arg_parser():
    """vLLM's make_arg_parser wherever the release keeps it: vllm.entrypoints.openai.cli_args (to
    0.31), vllm.entrypoints.launchers.cli_args (0.32), vllm.entrypoints.common.cli_args (0.33)."""
    import importlib

    errors = []
    for mod in ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args",
                "vllm.entrypoints.common.cli_args"):
        try:
            return importlib.import_module(mod).make_arg_parser
        except (ImportError, AttributeError) as exc:
            errors.append(f"{mod}: {type(exc).__name__}: {exc}")
    raise ImportError("no make_arg_parser in " + "; ".join(errors))


def plugin_probe() -> dict:
    """Run in a child interpreter (``extract_cli.py plugin-probe``): vLLM's own platform resolution, which
    loads the installed platform plugins (vllm-ascend's NPUPlatform), then its serve parser with the
    general plugins. {"loaded": true, "platform": ...} or {"loaded": false, "error": ..., "at": file:line}."""
    import traceback

    try:
        from vllm.platforms import current_platform

        platform = f"{type(current_platform).__module__}.{type(current_platform).__name__}"
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:
            from vllm.utils import FlexibleArgumentParser
        vllm_make_arg_parser()(FlexibleArgumentParser(prog="vllm serve"))
        return {"loaded": True, "platform": platform}
    except Exception as exc:  # noqa: BLE001 - the error is the finding
        frames = traceback.extract_tb(exc.__traceback__)
        at = ""
        for fr in frames:  # the innermost frame inside an installed package
            if "site-packages" in fr.filename:
                at = f"{fr.filename.split('site-packages/', 1)[1]}:{fr.lineno}"
        return {"loaded": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0], "at": at}


def vllm_plugin_parser(dist: str = "vllm-ascend"):
    """vllm-ascend: the parser of `vllm serve` with the platform plugin when it loads here; else (no
    CANN on this machine) the paired vLLM release's own parser with the plugin's entry points off
    (VLLM_PLUGINS names the other plugins only: vLLM's own LoRA resolvers), and the plugin's load error.
    (parser, plugin record)."""
    import subprocess
    from importlib import metadata

    env = dict(os.environ)
    env.pop("VLLM_PLUGINS", None)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "plugin-probe"], env=env,
                          capture_output=True, text=True, check=False, timeout=900)
    out = proc.stdout
    mark = out.rfind("@@EXTRACT@@")
    probe_doc = json.loads(out[mark + len("@@EXTRACT@@"):]) if mark >= 0 else {
        "loaded": False, "error": f"plugin probe exited {proc.returncode}", "at": ""}
    groups = ("vllm.platform_plugins", "vllm.general_plugins")
    eps = [(group, ep) for group in groups for ep in metadata.entry_points(group=group)]
    own = {ep.name for ep in metadata.distribution(dist).entry_points if ep.group in groups}
    record = {"entry_points": sorted(f"{g}:{ep.name}={ep.value}" for g, ep in eps if ep.name in own), **probe_doc}
    if not probe_doc.get("loaded"):
        others = sorted({ep.name for _g, ep in eps if ep.name not in own})
        os.environ["VLLM_PLUGINS"] = ",".join(others)  # vLLM loads only the plugins named here
        record["walked"] = "the paired vLLM release's parser, the plugin's entry points off (VLLM_PLUGINS=" + \
            ",".join(others) + ")"
        return vllm_parser(), record
    from vllm.platforms import current_platform  # noqa: F401 - the plugin's platform

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return vllm_make_arg_parser()(FlexibleArgumentParser(prog="vllm serve")), record


def vllm_registries() -> dict:
    out: dict = {"parsers": {}, "architectures": [], "registry_sources": {}}
    tools, src = _try(("vllm.tool_parsers", "ToolParserManager"),
                      ("vllm.entrypoints.openai.tool_parsers", "ToolParserManager"))
    out["parsers"]["tool_call"] = _keys(tools) if tools is not None else []
    out["registry_sources"]["tool_call"] = src
    reas, src = _try(("vllm.reasoning", "ReasoningParserManager"))
    out["parsers"]["reasoning"] = _keys(reas) if reas is not None else []
    out["registry_sources"]["reasoning"] = src
    reg, src = _try(("vllm.model_executor.models.registry", "ModelRegistry"))
    if reg is not None:
        out["architectures"] = sorted(reg.get_supported_archs())
    out["registry_sources"]["architectures"] = src
    return out


def sglang_parser():
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="python -m sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


def sglang_registries() -> dict:
    out: dict = {"parsers": {}, "architectures": [], "registry_sources": {}}
    fcp, src = _try(("sglang.srt.function_call.function_call_parser", "FunctionCallParser"))
    out["parsers"]["tool_call"] = sorted(getattr(fcp, "ToolCallParserEnum", {}) or {}) if fcp else []
    out["registry_sources"]["tool_call"] = src + (".ToolCallParserEnum" if fcp else "")
    rp, src = _try(("sglang.srt.parser.reasoning_parser", "ReasoningParser"),
                   ("sglang.srt.reasoning_parser", "ReasoningParser"))
    out["parsers"]["reasoning"] = sorted(getattr(rp, "DetectorMap", {}) or {}) if rp else []
    out["registry_sources"]["reasoning"] = src + (".DetectorMap" if rp else "")
    out["architectures"], out["registry_sources"]["architectures"] = sglang_architectures()
    return out


def sglang_architectures() -> tuple[list[str], str]:
    """The EntryClass names of sglang/srt/models/*.py, read with ast (importing every model
    needs a GPU build); this is the list ModelRegistry imports at start."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("sglang.srt.models")
    if spec is None or not spec.submodule_search_locations:
        return [], "sglang.srt.models not found"
    names: set[str] = set()
    for base in spec.submodule_search_locations:
        for fn in sorted(os.listdir(base)):
            if not fn.endswith(".py"):
                continue
            with open(os.path.join(base, fn), encoding="utf-8-sig") as fh:
                try:
                    tree = ast.parse(fh.read())
                except SyntaxError:
                    continue
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
                ):
                    vals = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                    names.update(v.id for v in vals if isinstance(v, ast.Name))
    return sorted(names), "sglang/srt/models/*.py EntryClass (ast)"


def ray_command():
    from ray.scripts.scripts import start

    return start


def trtllm_command():
    source = os.environ.get("LLMB_ENGINE_SOURCE")
    if source:
        return source_command(source, "serve")
    from tensorrt_llm.commands.serve import main

    return main.commands["serve"] if hasattr(main, "commands") else main


# ----------------------------------------------------------------------- source mode
# A release that cannot be installed here (TensorRT-LLM: its PyPI package is a stub that fetches the
# wheel from pypi.nvidia.com) is walked from its source file: the file is executed with click real and
# every other third-party import stubbed, then its click command's params are walked as usual. A value
# that comes from a stubbed import (a default read from BuildConfig, choices read from a registry) is
# recorded as such, never guessed.

STUB_ROOTS = ("torch", "yaml", "strenum", "tensorrt_llm", "mpi4py", "transformers", "numpy")


class Stub:
    """Stands for anything imported from a stubbed module; iterates as nothing."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_stub_name", name)

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self._stub_name}.{attr}")

    def __call__(self, *args, **kwargs):
        return Stub(f"{self._stub_name}()")

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class _StubModule(type(sys)):
    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self.__name__}.{attr}")


class _StubFinder:
    """Meta path finder: every module under STUB_ROOTS is an empty stub module."""

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery

        if name.split(".")[0] in STUB_ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        return None


STUBBED: dict = {}


def source_command(path: str, name: str):
    """The click command ``name`` defined in the source file ``path`` (heavy imports stubbed)."""
    import importlib.util

    import click

    sys.meta_path.insert(0, _StubFinder())
    spec = importlib.util.spec_from_file_location("llmb_engine_source", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cmd = getattr(mod, name, None)
    if not isinstance(cmd, click.Command):
        raise SystemExit(f"extract_cli: {path} defines no click command {name!r}")
    for p in cmd.params:
        if isinstance(p.default, Stub):
            STUBBED[p.name] = {"default": p.default._stub_name}
            p.default = None
        tp = p.type
        if isinstance(tp, click.Choice) and (isinstance(tp.choices, Stub) or not list(tp.choices)):
            # choices read from a stubbed registry: unknown, so any value passes (never "no value")
            STUBBED.setdefault(p.name, {})["choices"] = "from a stubbed import"
            p.type = click.STRING
    return cmd


# ----------------------------------------------------------------------- main


def ktransformers_parser():
    """KTransformers' server parser (ktransformers/server/args.py ArgumentParser.parse_args builds it
    from a config object, then parses sys.argv): captured at its parse_args call. The release's own
    package when it imports, else its source tree at the release tag ($LLMB_ENGINE_SOURCE, e.g. a git
    archive of kvcache-ai/ktransformers v0.3.2) with its heavy imports (torch, transformers, the config
    loader) stubbed: the parser's option strings, types and actions are the release's; its defaults,
    read from the site's config.yaml at start, are recorded as null."""
    import types

    class Captured(Exception):
        pass

    class AnyCfg:
        def __getattr__(self, name):
            return None

    real_parse = argparse.ArgumentParser.parse_args

    def capture(self, *a, **k):
        raise Captured(self)

    try:
        from ktransformers.server import args as mod  # the installed release
    except Exception:  # noqa: BLE001 - no GPU build here: walk its source
        src = os.environ.get("LLMB_ENGINE_SOURCE")
        if not src:
            raise
        for name in ("ktransformers", "ktransformers.server", "ktransformers.server.backend",
                     "ktransformers.server.backend.args", "ktransformers.util", "ktransformers.util.utils",
                     "transformers", "ktransformers.models"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["ktransformers.server.backend.args"].ConfigArgs = AnyCfg
        sys.modules["ktransformers.server.backend.args"].default_args = AnyCfg()
        sys.modules["ktransformers.util.utils"].get_free_ports = lambda *a, **k: []
        sys.modules["transformers"].AutoConfig = object

        class AnyModule(types.ModuleType):
            def __getattr__(self, name):
                return object

        import importlib.abc
        import importlib.machinery

        class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, fullname, path=None, target=None):
                if fullname.startswith("ktransformers.models."):
                    return importlib.machinery.ModuleSpec(fullname, self)
                return None

            def create_module(self, spec):
                return AnyModule(spec.name)

            def exec_module(self, module):
                return None

        sys.meta_path.insert(0, StubFinder())
        mod = types.ModuleType("ktransformers.server.args")
        path = os.path.join(src, "ktransformers", "server", "args.py")
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), mod.__dict__)  # noqa: S102 - the release's own file
    argparse.ArgumentParser.parse_args = capture
    try:
        mod.ArgumentParser(AnyCfg()).parse_args()
    except Captured as got:
        return got.args[0]
    finally:
        argparse.ArgumentParser.parse_args = real_parse
    raise RuntimeError("ktransformers.server.args.ArgumentParser.parse_args built no parser")


ROUTER_MODULES = {"sglang-router": "sglang_router.launch_router", "smg": "smg.launch_router"}


def router_parser(engine: str):
    """The parser a PD router's `python -m <module>` builds (its parse_router_args), captured at parse_args."""
    import importlib

    class Captured(Exception):
        pass

    mod = importlib.import_module(ROUTER_MODULES[engine])
    real_parse = argparse.ArgumentParser.parse_args

    def capture(self, *a, **k):
        raise Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        mod.parse_router_args([])
    except Captured as got:
        return got.args[0]
    finally:
        argparse.ArgumentParser.parse_args = real_parse
    raise RuntimeError(f"{ROUTER_MODULES[engine]}.parse_router_args built no parser")


def router_check(engine: str, argv: list[str]) -> None:
    """What `python -m <module>` does with argv before it starts anything: the module's own
    parse_router_args (the parser, then RouterArgs.from_cli_args: the --prefill URL [PORT] pairs)."""
    import importlib

    importlib.import_module(ROUTER_MODULES[engine]).parse_router_args(list(argv))


def probe(parser, argv: list[str]):
    """The dests that parse_args(argv) sets differently from parse_args([]); None when refused."""
    import contextlib
    import io

    required: list[str] = []
    for act in parser._actions:  # e.g. SGLang's --model-path: a placeholder so that parsing gets going
        if act.required and act.option_strings:
            required += [act.option_strings[0], "placeholder"]
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            base = vars(parser.parse_args(required))
            got = vars(parser.parse_args(required + list(argv)))
        except SystemExit:
            return None
        except Exception as exc:  # noqa: BLE001
            return {"<error>": type(exc).__name__}
    return {k: norm(v) for k, v in sorted(got.items()) if base.get(k) != v}


def probes_of(parser) -> dict:
    """Spelling rules observed on the real parser: underscores for dashes, unique prefixes, -O<N>."""
    out: dict = {}
    sample = None
    for act in parser._actions:
        if type(act).__name__ == "_StoreTrueAction" and any(
            s.startswith("--") and "-" in s[2:] for s in act.option_strings
        ):
            sample = next(s for s in act.option_strings if s.startswith("--") and "-" in s[2:])
            break
    if sample:
        under = "--" + sample[2:].replace("-", "_")
        out["underscore_equivalent"] = bool(probe(parser, [under]))
        out["underscore_sample"] = under
        prefix = sample[: max(4, len(sample) - 3)]
        uniq = [s for s in parser._option_string_actions if s.startswith(prefix)] == [sample]
        if uniq:
            out["abbrev_sample"] = prefix
            out["abbrev_accepted"] = bool(probe(parser, [prefix]))
    return out


def rewrites_of(parser, probes: dict) -> list[dict]:
    """Argv rewrites the release's parser makes before argparse matches option strings, observed by
    parsing sample argv with the real parser (nothing here is typed in from the docs)."""
    out = []
    if parser is None:
        return out
    if "-O" not in parser._option_string_actions:
        got = probe(parser, ["-O3"])
        if got:
            out.append({"from": "-O<N>", "example": "-O3", "sets": got})
    if probes.get("underscore_equivalent"):
        out.append({"from": "--<name_with_underscores>", "to": "--<name-with-dashes>",
                    "example": probes.get("underscore_sample")})
    return out


def check(engine: str) -> int:
    """Feed each planned argv (JSON list of {"id", "args"} on stdin) to the release's own parser:
    parse_args only, nothing starts. Prints one JSON result per case after the marker."""
    import contextlib
    import io

    cases = json.load(sys.stdin)
    results = []
    if engine in ROUTER_MODULES:
        for case in cases:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    router_check(engine, case["args"])
                    ok, msg = True, ""
                except SystemExit as exc:
                    ok = exc.code == 0
                    msg = (err.getvalue().strip().splitlines() or [f"exit {exc.code}"])[-1]
                except Exception as exc:  # noqa: BLE001 - a refusal of from_cli_args is a finding too
                    ok, msg = False, f"{type(exc).__name__}: {exc}"
            results.append({"id": case["id"], "ok": ok, "error": msg})
    elif engine in ("vllm", "vllm-ascend", "sglang", "ktransformers"):
        parser = {"vllm": vllm_parser, "sglang": sglang_parser, "ktransformers": ktransformers_parser,
                  "vllm-ascend": lambda: vllm_plugin_parser()[0]}[engine]()
        for case in cases:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    parser.parse_args(list(case["args"]))
                    ok, msg = True, ""
                except SystemExit as exc:
                    ok, msg = exc.code == 0, err.getvalue().strip().splitlines()[-1:] or [f"exit {exc.code}"]
                    msg = msg[0] if isinstance(msg, list) else msg
                except Exception as exc:  # noqa: BLE001 - a parser crash is a finding too
                    ok, msg = False, f"{type(exc).__name__}: {exc}"
            results.append({"id": case["id"], "ok": ok, "error": msg})
    else:
        cmd = ray_command() if engine == "ray" else trtllm_command()
        for case in cases:
            try:
                with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                    cmd.make_context(cmd.name, list(case["args"]))
                results.append({"id": case["id"], "ok": True, "error": ""})
            except Exception as exc:  # noqa: BLE001 - click.UsageError and friends
                results.append({"id": case["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}"})
    sys.stdout.write("\n@@EXTRACT@@" + json.dumps(results, sort_keys=True) + "\n")
    return 0


def main(argv: list[str]) -> int:
    import logging

    logging.disable(logging.CRITICAL)
    if argv[1] == "check":
        return check(argv[2])
    if argv[1] == "plugin-probe":
        sys.stdout.write("\n@@EXTRACT@@" + json.dumps(plugin_probe(), sort_keys=True) + "\n")
        return 0
    engine = argv[1]
    parser = None
    if engine == "vllm":
        parser = vllm_parser()
        doc = walk_argparse(parser)
        doc.update(vllm_registries())
    elif engine == "vllm-ascend":
        parser, plugin = vllm_plugin_parser()
        doc = walk_argparse(parser)
        doc.update(vllm_registries())
        doc["plugin"] = plugin
    elif engine == "sglang":
        parser = sglang_parser()
        doc = walk_argparse(parser)
        doc.update(sglang_registries())
    elif engine == "ktransformers":
        parser = ktransformers_parser()
        doc = walk_argparse(parser)
    elif engine in ROUTER_MODULES:
        parser = router_parser(engine)
        doc = walk_argparse(parser)
    elif engine == "ray":
        doc = walk_click(ray_command())
    elif engine == "trtllm":
        doc = walk_click(trtllm_command())
        if STUBBED:
            doc["stubbed"] = STUBBED
    else:
        print(f"extract_cli: unknown engine {engine!r}", file=sys.stderr)
        return 2
    doc["probes"] = probes_of(parser) if parser is not None else {}
    doc["rewrites"] = rewrites_of(parser, doc["probes"])
    sys.stdout.write("\n@@EXTRACT@@" + json.dumps(doc, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
