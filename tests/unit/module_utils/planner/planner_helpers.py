"""Helpers for the launch planner tests: real inventories, argv and docker-run comparison."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import shlex
from pathlib import Path

from enginesim.flagset import take_values
from llmbctl.catalog import Catalog
from llmbctl.engines.registry import FlagSet, load_flagset
from llmbctl.planner import memory
from llmbctl.planner.engines import ENGINES

REPO = Path(__file__).resolve().parents[4]
INVENTORIES = REPO / "inventories"


def _load_script():
    loader = importlib.machinery.SourceFileLoader(
        "llmb_launch_plan_script", str(REPO / "scripts" / "launch-plan")
    )
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_SCRIPT = None
_INVENTORY_CACHE: dict[str, tuple[dict, dict]] = {}


def load_inventory(name: str) -> tuple[dict, dict]:
    """(hostvars, groups) of inventories/<name>, read the way scripts/launch-plan reads it."""
    global _SCRIPT
    if _SCRIPT is None:
        _SCRIPT = _load_script()
    if name not in _INVENTORY_CACHE:
        _INVENTORY_CACHE[name] = _SCRIPT.load_inventory(str(INVENTORIES / name))
    hv, groups = _INVENTORY_CACHE[name]
    return copy.deepcopy(hv), copy.deepcopy(groups)


def flagset_of(data: Catalog, engine: str, version: str) -> FlagSet:
    fs = load_flagset(data, engine, version)
    assert fs is not None, f"no flag set {engine}-{version}"
    return fs


def canonical_pairs(fs: FlagSet, tokens: list[str]) -> tuple[list[tuple[str, object]], list[str]]:
    """Parse argv tokens into (canonical flag, value) pairs and positionals, applying renames.

    A switch is (flag, True); its negation (flag, False); a list flag gives a tuple value.
    Raises AssertionError for a token the flag set does not know.
    """
    pairs: list[tuple[str, object]] = []
    positionals: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-"):
            positionals.append(tok)
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        renamed = fs.rename_of(name)
        if renamed is not None:
            assert renamed[1].get("to"), f"{name} was removed from {fs.name}"
            name = renamed[1]["to"]
        resolved = fs.resolve(name)
        assert resolved is not None, f"{tok} is not a flag of {fs.name}"
        canon, negated = resolved
        kind = fs.flags[canon]["type"]
        value: object
        if negated or kind in ("flag", "bool"):
            value, i = not negated, i + 1
        elif eq:
            value, i = _norm(inline), i + 1
        elif kind == "list":
            items, i = take_values(tokens, i + 1)
            value = tuple(items)
        else:
            value, i = _norm(tokens[i + 1]), i + 2
        pairs.append((canon, value))
    return pairs, positionals


def _norm(value: object) -> object:
    if isinstance(value, tuple):
        return value
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text else number


def recipe_tokens(command: str, subst: dict[str, str]) -> list[str]:
    """shlex-split a recipe command after replacing its placeholders (hosts and paths aside)."""
    for key, value in subst.items():
        command = command.replace(key, value)
    return shlex.split(command)


def assert_recipe_flags(fs: FlagSet, recipe: list[str], argv: list[str]) -> tuple[list[str], list[str]]:
    """Every (flag, value) of the recipe tokens is in the argv tokens (canonical form, renames applied).

    Returns the positionals of both (recipe, argv) for the caller's own check of the model path.
    """
    want, want_pos = canonical_pairs(fs, recipe)
    got, got_pos = canonical_pairs(fs, argv)
    missing = [p for p in want if p not in got]
    assert not missing, f"recipe flags missing from the plan: {missing}\nplan argv: {argv}"
    return want_pos, got_pos


def assert_serve_flags(fs: FlagSet, svc_argv: list[str], recipe: list[str], skip_head: int, model_path: str) -> None:
    """Every (flag, value) of the recipe command is in the service argv; the model is the positional."""
    want_pos, got_pos = assert_recipe_flags(fs, recipe[skip_head:], svc_argv[skip_head:])
    if want_pos:
        assert want_pos == [model_path] and model_path in got_pos, (want_pos, got_pos)


def by_host(plan) -> dict[str, dict]:
    return {h["host"]: h for h in plan.to_list()}


def service(host_plan: dict, name: str | None = None, role: str | None = None) -> dict:
    for svc in host_plan["services"]:
        if (name is None or svc["name"] == name) and (role is None or svc["role"] == role):
            return svc
    raise AssertionError(
        f"no service name={name} role={role} on {host_plan['host']}: "
        f"{[(s['name'], s['role']) for s in host_plan['services']]}"
    )


def only_service(plan, name: str) -> dict:
    """The service `name` of a plan of one host."""
    (host,) = plan.to_list()
    return service(host, name)


def memory_fit(planned):
    """The memory fit of a plan, estimated from its engine's args; asserts it fits without problems."""
    ctx, topo = planned.ctx, planned.topology
    ea, _ = ENGINES[ctx.engine].engine_args(ctx, topo)
    fit, problems, _ = memory.estimate_plan(ctx, topo, ea.values)
    assert fit is not None and not problems
    return fit


def parse_docker_run(command: str, subst: dict[str, str]) -> list[tuple]:
    """The options of a recipe's `docker run` as (kind, value...) items to look for in a plan."""
    tokens = recipe_tokens(command, subst)
    assert tokens[:2] == ["docker", "run"], tokens[:2]
    items: list[tuple] = []
    i = 2
    with_value = {
        "--ipc",
        "--network",
        "--net",
        "--cap-add",
        "--device",
        "--group-add",
        "--security-opt",
        "-v",
        "-e",
        "-p",
        "--name",
        "--shm-size",
        "--entrypoint",
        "--gpus",
        "--ulimit",
        "-w",
    }
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-"):
            items.append(("image", tok))
            break
        name, eq, inline = tok.partition("=")
        if name in with_value:
            value = inline if eq else tokens[i + 1]
            i += 1 if eq else 2
        else:
            value = None
            i += 1
        if name in ("-d", "-it", "-i", "-t", "--rm"):
            items.append(("interactive", name))
        elif name in ("--network", "--net"):
            items.append(("container", "network", value))
        elif name == "--ipc":
            items.append(("container", "ipc", value))
        elif name == "--privileged":
            items.append(("container", "privileged", True))
        elif name == "--cap-add":
            items.append(("container_list", "cap_add", value))
        elif name == "--group-add":
            items.append(("container_list", "group_add", value))
        elif name == "--security-opt":
            items.append(("container_list", "security_opt", value))
        elif name == "--ulimit":
            items.append(("container_list", "ulimits", value))
        elif name == "--shm-size":
            items.append(("container", "shm_size", value))
        elif name == "--gpus":
            items.append(("container", "gpus", value))
        elif name == "-w":
            items.append(("container", "workdir", value))
        elif name == "--entrypoint":
            items.append(("container", "entrypoint", value))
        elif name == "--name":
            items.append(("container", "name", value))
        elif name == "--device":
            items.append(("device", value))
        elif name == "-v":
            items.append(("mount", value))
        elif name == "-e":
            key, _, val = value.partition("=")
            items.append(("env", key, val))
        elif name == "-p":
            items.append(("port", int(value.split(":")[-1])))
        else:
            raise AssertionError(f"docker option {name} not understood by the test")
    return items


def assert_container_matches(svc: dict, items: list[tuple], image_repo: str | None = None) -> None:
    """Every docker run option of a recipe is present in the planned container service."""
    opts = svc["container"]
    for item in items:
        kind = item[0]
        if kind == "interactive":
            continue  # -d/-it/--rm: supervised containers run detached with a restart policy
        if kind == "container":
            assert opts.get(item[1]) == item[2], (
                f"container {item[1]}: want {item[2]!r}, plan {opts.get(item[1])!r}"
            )
        elif kind == "container_list":
            assert item[2] in (opts.get(item[1]) or []), (
                f"container {item[1]} lacks {item[2]!r}: {opts.get(item[1])}"
            )
        elif kind == "device":
            assert item[1] in svc["devices"], f"device {item[1]} missing: {svc['devices']}"
        elif kind == "mount":
            assert item[1] in svc["mounts"], f"mount {item[1]} missing: {svc['mounts']}"
        elif kind == "env":
            assert svc["env"].get(item[1]) == item[2], (
                f"env {item[1]}: want {item[2]!r}, plan {svc['env'].get(item[1])!r}"
            )
        elif kind == "port":
            assert item[1] in [p["port"] for p in svc["ports"]], f"port {item[1]} missing: {svc['ports']}"
        elif kind == "image":
            if image_repo is not None:
                assert svc["image"].split(":")[0] == image_repo, svc["image"]
        else:
            raise AssertionError(item)
