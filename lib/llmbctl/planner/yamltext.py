"""A small YAML writer for generated config files (block style, stdlib only)."""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text)


def dump(data: Any, indent: int = 0) -> str:
    """Render dicts, lists and scalars as block YAML (keys in the given order)."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, (dict, list)) and value:
                lines.append(f"{pad}{_scalar(key)}:")
                lines.append(dump(value, indent + 2).rstrip("\n"))
            else:
                empty = (
                    "{}" if isinstance(value, dict) else "[]" if isinstance(value, list) else _scalar(value)
                )
                lines.append(f"{pad}{_scalar(key)}: {empty}")
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, (dict, list)) and item:
                inner = dump(item, indent + 2).rstrip("\n").splitlines()
                lines.append(f"{pad}- {inner[0].lstrip()}")
                lines.extend(inner[1:])
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    else:
        lines.append(pad + _scalar(data))
    return "\n".join(lines) + "\n"
