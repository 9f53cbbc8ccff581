"""Entry point of every simulated tool: read the node's state, build its model, render, exit."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

from . import profiles, state
from .faults import FaultError, check


@dataclass
class Result:
    rc: int = 0
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    def write(self, text: str) -> Result:
        self.out.append(text)
        return self

    def fail(self, rc: int, message: str, to_stdout: bool = False) -> Result:
        (self.out if to_stdout else self.err).append(message if message.endswith("\n") else message + "\n")
        self.rc = rc
        return self


# tool -> (vendor or None for every vendor, module, function); modules are imported only for the
# tool that runs.
HANDLERS = {
    "nvidia-smi": ("nvidia", "nvidia_cli", "main"),
    "npu-smi": ("ascend", "ascend", "npu_smi_main"),
    "hccn_tool": ("ascend", "ascend", "hccn_tool_main"),
    "amd-smi": ("amd", "amd", "amd_smi_main"),
    "rocm-smi": ("amd", "amd", "rocm_smi_main"),
    "numactl": (None, "host", "numactl_main"),
    "lscpu": (None, "host", "lscpu_main"),
    "dmesg": (None, "fabric", "dmesg_main"),
    "ibstat": (None, "fabric", "ibstat_main"),
    "ib_write_bw": (None, "fabric", "ib_write_bw_main"),
    "all_reduce_perf": (None, "fabric", "all_reduce_perf_main"),
}


class UsageError(Exception):
    """Arguments the simulator does not understand (the real tool may, or may not)."""


@dataclass
class Node:
    profile: dict
    faults: list[dict]
    host: str


def load_node() -> Node:
    profile = profiles.load(state.read_profile_name())
    faults = state.read_faults()
    for fault in faults:
        try:
            check(fault, profile)
        except FaultError as exc:
            raise state.StateError(f"{state.state_dir() / state.FAULTS_FILE}: {exc}") from None
    return Node(profile, faults, state.hostname())


def run(tool: str, argv: list[str]) -> tuple[int, str, str]:
    """Run `tool` with `argv` in-process; returns (rc, stdout, stderr)."""
    result = Result()
    if tool not in HANDLERS:
        result.fail(2, f"accelsim: unknown tool {tool!r}")
        return result.rc, "", "".join(result.err)
    vendor, module, function = HANDLERS[tool]
    try:
        node = load_node()
        if vendor is not None and node.profile["vendor"] != vendor:
            result.fail(127, f"{tool}: command not found (simulated {node.profile['vendor']} node)")
        else:
            handler = getattr(importlib.import_module(f"{__package__}.{module}"), function)
            handler(node, argv, result)
    except (state.StateError, profiles.ProfileError) as exc:
        result.fail(2, f"accelsim: {exc}")
    except UsageError as exc:
        result.fail(2, f"accelsim {tool}: {exc}")
    return result.rc, "".join(result.out), "".join(result.err)


def entry(tool: str) -> int:
    """Console entry: `tool` with sys.argv; what the installed wrappers call."""
    rc, out, err = run(tool, sys.argv[1:])
    try:
        if out:  # whole lines, at most PIPE_BUF bytes a write, as the real tools' line-buffered output:
            # under mpirun many ranks share one stream, and a larger write may be cut mid-line by another's
            chunk = ""
            for line in out.splitlines(keepends=True):
                if chunk and len(chunk) + len(line) > 4096:
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
                    chunk = ""
                chunk += line
            sys.stdout.write(chunk)
            sys.stdout.flush()
        if err:
            sys.stderr.write(err)
    except BrokenPipeError:  # `nvidia-smi | head -1`: stop quietly, as the real tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return rc
