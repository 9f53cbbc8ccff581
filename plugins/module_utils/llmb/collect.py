"""What a support bundle holds of one node (`llmb collect`): the node side.

:func:`gather` reads, with the module's ``run`` (argv -> (rc, out, err)), the files of one host's
bundle as {relative path: text}:

    units/<unit>            the unit files of the plan's services and the group's units
    journal/<unit>.log      each unit's journal since the last boot, its last ``max_bytes``
    engine/<container>.log  a container's log (container installs), its last ``max_bytes``
    kernel.log              kernel lines of this boot with Xid, NVRM, AER and other device errors
    versions.json           driver, firmware (VBIOS), kernel, OS, engine, the engine venv's and the
                            system's packages
    commands.json           each command run, its exit status (what could not be read, and why)

Secrets are masked on the controller (llmbctl.secrets.redact_text, the one rule) before any file is
written; the module's result is no_log. Stdlib only, python3 >= 3.9.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from .hw._text import ParseError
from .hw.nvidia import parse_query

Run = Callable[[list], "tuple[int, str, str]"]
# kernel lines worth a vendor's look: NVIDIA Xid / NVRM, PCIe AER, AMD GPU resets, machine checks, hangs
DEVICE_ERROR = re.compile(
    r"\bXid\b|NVRM|nvidia|AER|PCIe Bus Error|amdgpu.*(error|fault|reset|timeout)|GPU reset|"
    r"Machine check|\bMCE\b|mlx5.*(error|fail)|hung_task|blocked for more than|I/O error|EDAC", re.IGNORECASE)
DRIVER_QUERY = ["nvidia-smi", "--query-gpu=index,name,driver_version,vbios_version,serial", "--format=csv"]
PY_DISTS = "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'], d.version)"


def tail_bytes(text: str, max_bytes: int) -> str:
    """The last ``max_bytes`` of ``text`` (whole lines), with a line saying what was cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return text
    cut = data[-max_bytes:].decode("utf-8", "replace")
    cut = cut.split("\n", 1)[1] if "\n" in cut else cut
    return f"[llmb collect: the first {len(data) - len(cut.encode())} bytes cut, size cap {max_bytes}]\n{cut}"


def device_errors(kernel_log: str) -> str:
    return "".join(ln + "\n" for ln in kernel_log.splitlines() if DEVICE_ERROR.search(ln))


def driver_versions(out: str) -> list[dict]:
    """Per device: index, name, driver, VBIOS, serial (``nvidia-smi --query-gpu`` CSV)."""
    try:
        rows = parse_query(out)["gpus"]
    except ParseError:
        return []
    return [{"index": r.get("index"), "name": r.get("name"), "driver": r.get("driver_version"),
             "vbios": r.get("vbios_version"), "serial": r.get("serial")} for r in rows]


def packages(out: str) -> dict[str, str]:
    """``name version`` lines (dpkg-query, the venv's distributions) as {name: version}."""
    pkgs = {}
    for ln in out.splitlines():
        parts = ln.split()
        if len(parts) >= 2:
            pkgs[parts[0]] = parts[1]
    return dict(sorted(pkgs.items()))


def gather(run: Run, units: list[str], containers: list[str], max_bytes: int = 2_000_000,
           version_command: list | None = None, venv: str | None = None, vendor: str | None = None,
           read: Callable[[str], str | None] | None = None) -> dict[str, str]:
    """The host's bundle as {relative path: text} (see the module docstring)."""
    files: dict[str, str] = {}
    commands: list[dict] = []

    def sh(argv: list) -> str | None:
        try:
            rc, out, err = run(list(argv))
        except OSError as e:
            commands.append({"argv": argv, "rc": None, "error": str(e)})
            return None
        commands.append({"argv": argv, "rc": rc, **({"error": (err or "").strip()[-300:]} if rc else {})})
        return out if rc == 0 else None

    read = read or _read
    for unit in units:
        name = unit if "." in unit else f"{unit}.service"
        text = read(f"/etc/systemd/system/{name}")
        if text is not None:
            files[f"units/{name}"] = text
        journal = sh(["journalctl", "-u", name, "-b", "--no-pager", "-o", "short-iso"])
        if journal is not None:
            files[f"journal/{name}.log"] = tail_bytes(journal, max_bytes)
    for c in containers:
        rc_out = sh(["docker", "logs", "--timestamps", "--tail", "20000", c])
        if rc_out is not None:
            files[f"engine/{c}.log"] = tail_bytes(rc_out, max_bytes)
    kernel = sh(["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"])
    if kernel is None:
        kernel = sh(["dmesg", "--time-format", "iso"])
    files["kernel.log"] = tail_bytes(device_errors(kernel or ""), max_bytes)
    versions: dict = {"kernel": (sh(["uname", "-r"]) or "").strip() or None,
                      "os": _os_release(read("/etc/os-release") or "")}
    if vendor in (None, "nvidia"):
        q = sh(DRIVER_QUERY)
        versions["devices"] = driver_versions(q) if q else []
    if version_command:
        out = sh(list(version_command))
        versions["engine"] = out.strip().splitlines()[-1] if out and out.strip() else None
    if venv:
        out = sh([f"{venv}/bin/python", "-c", PY_DISTS])
        versions["engine_venv_packages"] = packages(out) if out else {}
    dpkg = sh(["dpkg-query", "-W", "-f", "${binary:Package} ${Version}\n"])
    versions["system_packages"] = packages(dpkg) if dpkg else {}
    files["versions.json"] = json.dumps(versions, indent=1, sort_keys=True) + "\n"
    files["commands.json"] = json.dumps(commands, indent=1) + "\n"
    return files


def _os_release(text: str) -> str | None:
    for ln in text.splitlines():
        if ln.startswith("PRETTY_NAME="):
            return ln.split("=", 1)[1].strip().strip('"')
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None
