"""Every module's DOCUMENTATION / EXAMPLES / RETURN is YAML that ansible-doc can read, and every
option the module's argument_spec takes is documented (ansible-doc silently shows nothing otherwise)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


def _blocks(path: Path) -> dict[str, str]:
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant):
                out[name] = node.value.value
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_documentation_parses(path):
    blocks = _blocks(path)
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, f"{path.name}: missing doc blocks"
    doc = yaml.safe_load(blocks["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert doc["short_description"] and doc["description"]
    yaml.safe_load(blocks["EXAMPLES"])
    yaml.safe_load(blocks["RETURN"])
    for name, opt in (doc.get("options") or {}).items():
        assert opt.get("description"), f"{path.name}: option {name} has no description"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_argument_spec_is_documented(path):
    """Options named in the module's argument_spec dict literal all appear under DOCUMENTATION options."""
    doc = yaml.safe_load(_blocks(path)["DOCUMENTATION"])
    documented = set(doc.get("options") or {})
    tree = ast.parse(path.read_text())
    specs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec":
            if isinstance(node.value, ast.Dict):  # {"name": {...}}
                specs.append({k.value for k in node.value.keys if isinstance(k, ast.Constant)})
            elif isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "dict":  # dict(name=...)
                specs.append({kw.arg for kw in node.value.keywords if kw.arg})
    if not specs:
        pytest.skip(f"{path.name}: argument_spec is not a literal here")
    for spec in specs:
        assert spec <= documented, f"{path.name}: undocumented options {sorted(spec - documented)}"
