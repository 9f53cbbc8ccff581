"""The two packages stay apart and acyclic, read from the source (tests/unit/importgraph.py):

- node side (plugins/module_utils/llmb, shipped by Ansible as ansible.module_utils.llmb, and
  plugins/modules): only the standard library, the node package itself and (modules) Ansible's
  ansible.module_utils; never the controller package llmbctl (lib/llmbctl) nor any other
  distribution, at any depth of the code (function-level imports too);
- no import cycle in either package (the planner's engine data sits below it: llmbctl.engines);
- no sys.path edits in plugins/ or scripts/: both packages are installed into the venv (make venv).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import importgraph as G
import pytest

REPO = G.REPO
NODE_PKG = G.NODE_DIR / "llmb"
MODULES = REPO / "plugins" / "modules"
STDLIB = frozenset(sys.stdlib_module_names)
# node-side files another interpreter runs, with what that interpreter has besides the stdlib
RUN_ELSEWHERE = {
    # the weights stage's tool venv on the node runs this file's source (model_fetch module)
    "plugins/module_utils/llmb/weights/hubclient.py": {"huggingface_hub"},
}


def node_import_problems(path: Path, name: str, node_modules: set[str], is_module: bool) -> list[str]:
    """What a node-side file imports that a node does not have: the controller package, another
    distribution, or a node module that does not exist."""
    out = []
    for line, target in G.imports_of(path, name, node_modules):
        top = target.split(".")[0]
        where = f"{_rel(path)}:{line}: imports {target}"
        if target.startswith("ansible.module_utils."):
            rest = target[len("ansible.module_utils."):]
            if is_module and (not rest.startswith("llmb") or rest.split(".")[0] != "llmb"):
                continue  # Ansible's own module_utils (basic, common.*): shipped with every module
            if rest.split(".")[0] == "llmb" and _known(rest, node_modules):
                continue
            out.append(f"{where} ({'not in the node package' if rest.startswith('llmb') else 'not for module_utils'})")
        elif top == "llmb":
            if not _known(target, node_modules):
                out.append(f"{where} (not in the node package plugins/module_utils/llmb)")
            elif is_module:
                out.append(f"{where} (a module reaches the node package as ansible.module_utils.llmb)")
        elif top == "llmbctl":
            out.append(f"{where} (the controller package: node code may not import it)")
        elif top in STDLIB or top == "__future__" or top in RUN_ELSEWHERE.get(str(_rel(path)), ()):
            continue
        else:
            out.append(f"{where} (not the standard library: nodes have python3 only)")
    return out


def _rel(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def _known(target: str, node_modules: set[str]) -> bool:
    """target (a module; `from X import name` gives X) is in the node package."""
    return target in node_modules


def _node_modules() -> set[str]:
    return {name for name in G.package_modules() if name.split(".")[0] == "llmb"}


def test_node_code_imports_only_stdlib_and_node_code():
    node_modules = _node_modules()
    problems = []
    for path in sorted(NODE_PKG.rglob("*.py")):
        problems += node_import_problems(path, G.module_name(path, G.NODE_DIR), node_modules, False)
    for path in sorted(MODULES.glob("*.py")):
        problems += node_import_problems(path, f"modules.{path.stem}", node_modules, True)
    assert problems == [], "node-side code reaches past the standard library:\n" + "\n".join(problems)
    assert len(list(MODULES.glob("*.py"))) >= 20 and len(node_modules) >= 30  # the walk saw the tree


def test_node_walk_catches_each_kind_of_bad_import(tmp_path):
    """The walk above fails on what it guards against, however deep the import sits."""
    node_modules = _node_modules()
    src = tmp_path / "bad.py"
    src.write_text(
        "import json\n"
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible.module_utils.llmb.hw import host\n"
        "def f():\n"
        "    from llmbctl.planner import plan\n"
        "    try:\n"
        "        import yaml\n"
        "    except ImportError:\n"
        "        pass\n"
        "from ansible.module_utils.llmb.catalog import Catalog\n"
    )
    found = node_import_problems(src, "modules.bad", node_modules, True)
    assert [p.split(": imports ")[1] for p in found] == [
        "llmbctl.planner (the controller package: node code may not import it)",
        "yaml (not the standard library: nodes have python3 only)",
        "ansible.module_utils.llmb.catalog (not in the node package)",
    ]
    rel = tmp_path / "rel.py"
    rel.write_text("from ..fsutil import atomic_write_text\nfrom ..planner import plan\n")
    found = node_import_problems(rel, "llmb.weights.rel", node_modules, False)
    assert found == [f"{rel}:2: imports llmb.planner (not in the node package plugins/module_utils/llmb)"]


def test_no_import_cycle():
    graph = G.module_graph()
    assert {"llmbctl.catalog", "llmbctl.planner.flags", "llmbctl.engines.registry", "llmb.hw"} <= set(graph)
    assert "llmbctl.engines.registry" in graph["llmbctl.catalog"]  # the edge that used to close the circle
    cycles = G.find_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_engine_registry_sits_below_planner_and_catalog():
    graph = G.module_graph()
    below = graph["llmbctl.engines.registry"] | graph["llmbctl.engines.capabilities"] | graph["llmbctl.engines"]
    assert not {m for m in below if m.startswith(("llmbctl.planner", "llmbctl.catalog"))}


@pytest.mark.parametrize("edges, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"a"}}, ["a", "a"]),
])
def test_cycle_finder_finds_a_planted_cycle(edges, cycle):
    assert G.find_cycles(edges) == [cycle]
    assert G.find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_function_level_import_is_an_edge(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from .flags import load\n    from . import engines\n")
    assert G.imports_of(src, "llmbctl.planner.m", {"llmbctl.planner.engines"}) == [
        (2, "llmbctl.planner.flags"), (3, "llmbctl.planner.engines")]


# sys.path edits, and a PYTHONPATH set for a child process (an instruction to the user in a message is fine)
SYS_PATH = re.compile(r"\bsys\.path\b|\bsite\.addsitedir\b|environ\[[\"']PYTHONPATH|[\"']PYTHONPATH[\"']\s*[:=,]")


def _python_files(root: Path) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if path.suffix == ".py" or (not path.suffix and path.read_bytes()[:40].startswith(b"#!/usr/bin/env python")):
            out.append(path)
    return out


def test_no_sys_path_edits_in_plugins_or_scripts():
    files = _python_files(REPO / "plugins") + _python_files(REPO / "scripts")
    assert len(files) > 50
    offenders = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
                 for p in files for n, line in enumerate(p.read_text().splitlines(), 1)
                 if SYS_PATH.search(line) and not line.lstrip().startswith("#")]
    assert offenders == [], "import the installed packages instead (make venv):\n" + "\n".join(offenders)
