"""Reader for the connection matrices printed by `nvidia-smi topo -m`, `nvidia-smi topo -p2p`,
`npu-smi info -t topo` and `rocm-smi --showtopo`.

Cells never contain blanks, so rows split on any whitespace; that works for tab-separated
originals as well as copies whose tabs were expanded to spaces. Multi-word column names
("CPU Affinity", ...) are joined before splitting. Empty trailing cells disappear, which is what
the tools print for NIC rows (no affinity).
"""

from __future__ import annotations

import re

from ._text import ParseError, clean_lines, first_nonblank

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
DEVICE_RE = re.compile(r"^(GPU\d+|NIC\d+|NPU\d+|Phy-ID\d+|mlx5_\d+|CPU\d+)$")


def _join_names(line: str) -> str:
    for name in AFFINITY_COLUMNS:
        line = line.replace(name, name.replace(" ", "_"))
    return line


def read_matrix(lines: list[str], start: int, kind: str, label_ok, stop=None):
    """Read one matrix whose header is lines[start].

    Returns (columns, affinity_columns, rows, next_index) where rows is a list of
    (name, cells, extras, line_number). label_ok(cell) says whether a cell is a valid label.
    """
    header = _join_names(lines[start]).split()
    if not header:
        raise ParseError(kind, "empty matrix header", start + 1)
    columns: list[str] = []
    affinity: list[str] = []
    for tok in header:
        if DEVICE_RE.match(tok) and not affinity:
            columns.append(tok)
        elif tok.replace("_", " ") in AFFINITY_COLUMNS:
            affinity.append(tok.replace("_", " "))
        else:
            raise ParseError(kind, f"unexpected column name {tok!r} in matrix header", start + 1)
    if not columns:
        raise ParseError(kind, "matrix header names no device columns", start + 1)
    rows = []
    i = start + 1
    while i < len(lines):
        raw = lines[i]
        if not raw.strip() or (stop and stop(raw)):
            break
        toks = raw.split()
        name = toks[0]
        if not DEVICE_RE.match(name):
            if name.rstrip(":") == "Legend":
                break
            raise ParseError(kind, f"row does not start with a device name: {raw.strip()!r}", i + 1)
        cells = toks[1 : 1 + len(columns)]
        extras = toks[1 + len(columns) :]
        if len(cells) < len(columns):
            # A NIC row may be shorter when the terminal clipped the NIC columns away.
            raise ParseError(
                kind,
                f"row {name} has {len(cells)} of {len(columns)} cells (capture truncated or damaged?)",
                i + 1,
            )
        for j, (col, cell) in enumerate(zip(columns, cells, strict=True)):
            if not label_ok(cell):
                if re.fullmatch(r"[0-9,\-]+|N/A", cell):
                    raise ParseError(
                        kind,
                        f"row {name} has {j} of {len(columns)} cells before its affinity values"
                        " (capture truncated or damaged?)",
                        i + 1,
                    )
                raise ParseError(kind, f"row {name}, column {col}: unknown label {cell!r}", i + 1)
        if len(extras) > len(affinity):
            raise ParseError(
                kind, f"row {name} has {len(extras)} values after the matrix, header names {len(affinity)}", i + 1
            )
        rows.append((name, cells, extras, i + 1))
        i += 1
    return columns, affinity, rows, i


def read_first_matrix(text: str, kind: str, expected: str, label_ok):
    """The matrix at the first non-blank line of a tool's output (expected: what an empty output lacks).

    Returns (lines, start, columns, affinity_columns, rows, next_index), as read_matrix does after
    the output's lines and the header's index.
    """
    lines = clean_lines(text)
    start = first_nonblank(lines)
    if start is None:
        raise ParseError(kind, f"empty output (expected {expected})")
    return (lines, start, *read_matrix(lines, start, kind, label_ok))


def require_rows(kind: str, columns: list[str], rows) -> None:
    """Every one of columns has a row of its own (a missing one means the capture was cut)."""
    row_names = [r[0] for r in rows]
    for col in columns:
        if col not in row_names:
            raise ParseError(kind, f"column {col} has no row (capture truncated?)")


def links_from_rows(columns, rows, self_labels=("X",)):
    """{row: {column: label}} without the diagonal; missing reverse entries filled symmetrically.

    Returns (links, filled) where filled counts entries taken from the reverse direction.
    """
    links: dict[str, dict[str, str]] = {}
    for name, cells, _extras, _ln in rows:
        row = links.setdefault(name, {})
        for col, cell in zip(columns, cells, strict=True):
            if col == name or cell in self_labels:
                continue
            row[col] = cell
    filled = 0
    names = [r[0] for r in rows]
    for a in names:
        for b in names:
            if a == b:
                continue
            if b not in links[a] and a in links.get(b, {}):
                links[a][b] = links[b][a]
                filled += 1
    return links, filled
