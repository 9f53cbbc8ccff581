"""The import graph of the two packages, read from the source (ast; nothing is imported or run).

    graph = module_graph()            # {"llmbctl.catalog": {"llmb.fsutil", ...}, ...}
    imports_of(path, "llmb.hw.host")  # [(line, "llmb.hw._text"), ...]: every import, function-level too

Used by tests/unit/test_imports.py (node code stays stdlib and never reaches the controller package; no
import cycle). An import of `pkg.mod` also imports `pkg` (its __init__), as Python does.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "plugins" / "module_utils"  # the node package: llmb
CTL_DIR = REPO / "lib"  # the controller package: llmbctl
PACKAGES = {"llmb": NODE_DIR, "llmbctl": CTL_DIR}


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    """Every module of both packages: dotted name -> file."""
    out = {}
    for pkg, base in PACKAGES.items():
        for path in sorted((base / pkg).rglob("*.py")):
            out[module_name(path, base)] = path
    return out


def imports_of(path: Path, name: str, modules=frozenset()) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import in the file, at any depth (functions, try blocks).
    `from X import a` gives X.a where that is one of `modules` (a submodule), else X; relative imports
    are resolved against `name`; `ansible.module_utils.llmb...` (how modules reach the node package)
    is kept as written."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = {f"{mod}.{alias.name}" for alias in node.names} & set(modules)
            out += [(node.lineno, sub) for sub in sorted(subs)]
            if len(subs) < len(node.names):  # a name defined by X itself (or X is outside the packages)
                out.append((node.lineno, mod))
    return sorted(out)


def module_graph() -> dict[str, set[str]]:
    """module -> the modules of the two packages it imports (directly, at any depth of its code)."""
    mods = package_modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        own = name.split(".")
        ancestors = {".".join(own[:i]) for i in range(1, len(own))}  # initialised before this module runs
        for _, target in imports_of(path, name, mods):
            if target.startswith("ansible.module_utils."):
                target = target[len("ansible.module_utils."):]
            if target == name or target not in mods and not any(target.startswith(p + ".") for p in PACKAGES):
                continue
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
                prefix = ".".join(parts[:i])
                if prefix in mods and prefix != name and (prefix not in ancestors or prefix == target):
                    deps.add(prefix)
        graph[name] = deps
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module, each as one cycle through it
    (a -> b -> ... -> a), sorted; a module importing itself counts too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan; the graphs are small (<200 modules), recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return [_cycle_through(graph, set(comp)) for comp in sorted(comps)]


def _cycle_through(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """One cycle inside a strongly connected component, from its first module back to it (BFS)."""
    start = min(comp)
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & comp):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return [start, start]
