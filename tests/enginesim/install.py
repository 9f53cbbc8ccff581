#!/usr/bin/env python3
"""Install the engine test double into a virtual environment on a (simulated) node.

    python3 /opt/llmb/enginesim/install.py --venv /opt/llmb/venvs/vllm-0.19.1 \
        [--engine vllm|vllm-ascend] [--data /opt/llmb/enginesim/data]

Creates the venv when it is missing (stdlib `venv`, no pip), writes VENV/bin/{vllm,ray,
trtllm-serve,trtllm-llmapi-launch} and a .pth file so that `VENV/bin/python -m
sglang.launch_server` runs the stand-in. The flag sets are read from --data (a directory with
engines/*.yml, i.e. a copy of the repository's data/), else from <this dir>/data/engines.
Standard library only; idempotent (reports whether it changed anything).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WRAPPERS = {
    "vllm": ("vllm_cli", "main"),
    "ray": ("ray_cli", "main"),
    "trtllm-serve": ("trtllm_cli", "main"),
    "trtllm-llmapi-launch": ("trtllm_cli", "llmapi_launch"),
}


def wrapper(python: str, module: str, func: str, env: dict[str, str]) -> str:
    lines = [
        f"#!{python}",
        f'"""Engine test double: enginesim.{module}.{func} (installed by enginesim/install.py)."""',
        "import os",
        "import sys",
        "",
        f"sys.path.insert(0, {str(HERE.parent)!r})",
    ]
    for key, value in env.items():
        lines.append(f"os.environ.setdefault({key!r}, {value!r})")
    lines += [f"from enginesim.{module} import {func}  # noqa: E402", "", f"sys.exit({func}())", ""]
    return "\n".join(lines)


def _write(path: Path, text: str, mode: int) -> bool:
    if path.exists() and path.read_text() == text and (path.stat().st_mode & 0o777) == mode:
        return False
    path.write_text(text)
    path.chmod(mode)
    return True


def install(venv: Path, engine: str | None, data: str | None) -> bool:
    changed = False
    if not (venv / "bin" / "python3").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        changed = True
    python = str(venv / "bin" / "python3")
    env = {}
    if engine:
        env["LLMB_ENGINESIM_ENGINE"] = engine
    if data:
        env["LLMB_ENGINESIM_DATA"] = str(Path(data).resolve())
    for name, (module, func) in WRAPPERS.items():
        changed |= _write(venv / "bin" / name, wrapper(python, module, func, env), 0o755)
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    site = Path(purelib)
    site.mkdir(parents=True, exist_ok=True)
    changed |= _write(site / "llmb-enginesim.pth", f"{HERE}\n{HERE.parent}\n", 0o644)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", required=True, type=Path)
    ap.add_argument("--engine", choices=("vllm", "vllm-ascend"), help="which engine `vllm` stands for")
    ap.add_argument("--data", help="directory with engines/*.yml (default: next to this file)")
    args = ap.parse_args(argv)
    changed = install(args.venv, args.engine, args.data)
    print(f"enginesim installed in {args.venv}: {'changed' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
