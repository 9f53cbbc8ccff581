#!/usr/bin/env python3
"""Package the engine test double as a wheel named like the real engine (test code).

    python tests/enginesim/build_wheel.py OUT_DIR [--name vllm] [--version 0.19.1]
    python tests/enginesim/build_wheel.py OUT_DIR --name mooncake-transfer-engine --version V --stub mooncake

The simulated cluster's engine stage then installs `vllm==0.19.1` from a wheelhouse through the
same uv code path a real site uses; what lands in the venv is the double (console scripts `vllm`,
`ray`, `trtllm-serve`, `trtllm-llmapi-launch`, and `python -m sglang.launch_server`), reading the
flag sets of data/engines/ packed inside. With --stub MODULE the wheel holds only an empty MODULE
(a library the double does not need, installed because the plan names it: the KV transfer library
of a prefill/decode group). Standard library only; deterministic output.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPTS = {
    "vllm": "enginesim.vllm_cli:main",
    "ray": "enginesim.ray_cli:main",
    "trtllm-serve": "enginesim.trtllm_cli:main",
    "trtllm-llmapi-launch": "enginesim.trtllm_cli:llmapi_launch",
}


def _files() -> list[tuple[str, bytes]]:
    out = []
    for p in sorted(HERE.rglob("*.py")):
        rel = p.relative_to(HERE)
        if "__pycache__" in rel.parts or rel.name in ("build_wheel.py", "install.py"):
            continue
        out.append((f"enginesim/{rel.as_posix()}", p.read_bytes()))
        if rel.parts[0] in ("sglang", "ktransformers"):
            out.append((rel.as_posix(), p.read_bytes()))
    for p in sorted((ROOT / "data" / "engines").glob("*.yml")):
        out.append((f"enginesim/data/engines/{p.name}", p.read_bytes()))
    for p in sorted((ROOT / "data" / "engines" / "hand").glob("*.yml")):
        out.append((f"enginesim/data/engines/hand/{p.name}", p.read_bytes()))
    for p in sorted((ROOT / "data" / "engines" / "bench").glob("*.yml")):  # `vllm bench serve`
        out.append((f"enginesim/data/engines/bench/{p.name}", p.read_bytes()))
    return out


def build(out_dir: Path, name: str, version: str, stub: str | None = None) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = _files() if stub is None else [
        (f"{stub}/__init__.py", f'"""Stand-in {name} {version} for the engine test double (test code)."""\n'.encode())]
    files.append((f"{info}/METADATA", (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        "Summary: llm-bringup engine test double (not the real engine)\n").encode()))
    files.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: llmb-enginesim\nRoot-Is-Purelib: true\n"
                                   b"Tag: py3-none-any\n"))
    if stub is None:
        eps = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in SCRIPTS.items())
        files.append((f"{info}/entry_points.txt", eps.encode()))
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    whl = out_dir / f"{dist}-py3-none-any.whl"
    tmp = whl.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            zi = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)
    tmp.replace(whl)
    return whl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--name", default="vllm")
    ap.add_argument("--version", default="0.19.1")
    ap.add_argument("--stub", metavar="MODULE", help="an empty package MODULE instead of the double")
    a = ap.parse_args(argv)
    print(build(a.out, a.name, a.version, a.stub))
    return 0


if __name__ == "__main__":
    sys.exit(main())
