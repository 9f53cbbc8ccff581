"""Duplicate keys in the inventory's YAML files: refused naming the file, the line and the key.

YAML leaves a repeated key to the reader; Ansible warns and keeps the last value, so a value the
operator reads further up the file is not the one used. Stage 0 and scripts/launch-plan refuse it
instead. The files are those Ansible reads for an inventory source: the inventory file(s), and every
file under group_vars/ and host_vars/ beside it. PyYAML (the controller's, as Ansible's) composes
each document without constructing it, so any tag (!vault, !unsafe) is accepted.
"""

from __future__ import annotations

import os
from typing import Any

from .model import Problem

YAML_SUFFIXES = (".yml", ".yaml", ".json")
VARS_SUFFIXES = ("", *YAML_SUFFIXES)


def inventory_files(source: str) -> list[str]:
    """The YAML files Ansible reads for this inventory source (a directory or a file)."""
    base = source if os.path.isdir(source) else os.path.dirname(source) or "."
    files = [source] if os.path.isfile(source) and source.endswith(YAML_SUFFIXES) else []
    if os.path.isdir(source):
        files += sorted(
            os.path.join(source, n) for n in os.listdir(source)
            if n.endswith(YAML_SUFFIXES) and os.path.isfile(os.path.join(source, n))
        )
    for sub in ("group_vars", "host_vars"):
        top = os.path.join(base, sub)
        for root, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for n in sorted(names):
                if not n.startswith(".") and os.path.splitext(n)[1] in VARS_SUFFIXES:
                    files.append(os.path.join(root, n))
    return files


def _walk(node: Any, path: str, found: list[tuple[str, int, int]]) -> None:
    import yaml

    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                name = key.value
                where = f"{path}.{name}" if path else name
                if name in seen:
                    found.append((where, line, seen[name]))
                else:
                    seen[name] = line
                _walk(value, where, found)
            else:
                _walk(value, path, found)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, f"{path}[{i}]", found)


def duplicate_keys(files: list[str]) -> list[Problem]:
    """One problem per repeated key, naming file:line, the key (dotted path) and the first line."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - the controller always has PyYAML (Ansible needs it)
        return []
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    problems = []
    for f in files:
        try:
            with open(f, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            continue  # unreadable files are reported by the inventory reader
        found: list[tuple[str, int, int]] = []
        try:
            for doc in yaml.compose_all(text, Loader=loader_cls):
                _walk(doc, "", found)
        except yaml.YAMLError:
            continue  # a syntax error is the inventory reader's problem (file:line:column)
        for key, line, first in found:
            problems.append(
                Problem(
                    check="yaml-duplicate-key",
                    message=f"{f}:{line}: the key {key} is given twice in one mapping (first at line {first}); "
                    "Ansible would keep the last value without a word",
                    found=f"{key} at lines {first} and {line}",
                    expected="each key once per mapping",
                    fix=f"keep one {key.rsplit('.', 1)[-1]} in {f} (delete line {line} or line {first})",
                )
            )
    return problems
