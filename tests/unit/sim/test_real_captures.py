"""The h100-x1 and h200-x2 profiles reproduce the real captures line for line.

Every capture file of fixtures/real/{h100,h200x2} whose command the simulator implements is compared
(nvidia-smi, numactl -H, lscpu, lscpu -J), ignoring only the lines that hold a moment's reading: the
Timestamp / table date of nvidia-smi and numactl's `node N free:`. Files of commands it does not
simulate (torch, bandwidth, /sys listings) are listed explicitly so that a new capture cannot be
skipped silently.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from capture_paths import fixtures_dir
from sim.accelsim import main

REAL = fixtures_dir("real", "real captures") / "real"
PROFILES = {"h100": "h100-x1", "h200x2": "h200-x2"}
# Capture files whose commands run real programs on a node (not simulated) or are not tool output.
NOT_SIMULATED = {
    "nodes.txt",
    "osrel.txt",
    "procdrv.txt",
    "torch.txt",
    "bw.txt",
    "p2p.txt",
}
TIMESTAMP = re.compile(
    r"^(Timestamp\s+: |\t<timestamp>|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\s*$)"
)
FREE_MEMORY = re.compile(r"^node \d+ free: \d+ MB$")


def parse_capture(path: Path) -> tuple[list[str], str]:
    """A capture file -> (argv of its command, output without the '# ...' header and blank line)."""
    text = path.read_text()
    header, sep, body = text.partition("\n\n")
    assert sep, f"{path}: no blank line after the header"
    command = None
    for line in header.splitlines():
        assert line.startswith("# "), f"{path}: header line {line!r}"
        if line.startswith("# command: "):
            command = line[len("# command: ") :]
    assert command, f"{path}: no '# command:' line"
    return shlex.split(command), body


def comparable(text: str) -> list[str]:
    out = []
    for line in text.split("\n"):
        if TIMESTAMP.match(line):
            line = "<timestamp>"
        elif FREE_MEMORY.match(line):
            line = "<free memory>"
        out.append(line)
    return out


def capture_cases() -> list[tuple[str, Path]]:
    cases = []
    for machine, profile in PROFILES.items():
        for path in sorted((REAL / machine).glob("*.txt")):
            if path.name not in NOT_SIMULATED:
                cases.append(pytest.param(profile, path, id=f"{machine}/{path.name}"))
    return cases


def test_every_capture_is_either_compared_or_listed_as_not_simulated():
    names = {p.name for machine in PROFILES for p in (REAL / machine).glob("*.txt")}
    compared = {c.values[1].name for c in capture_cases()}
    assert compared == names - NOT_SIMULATED
    assert {"smi.txt", "smi-q.txt", "smi-qx.txt", "query.txt", "topo.txt", "nvlink-s.txt"} <= compared
    assert {"numactl.txt", "lscpu.txt", "lscpu-json.txt"} <= compared


@pytest.mark.parametrize(("profile", "path"), capture_cases())
def test_profile_reproduces_capture(node, profile, path):
    argv, expected = parse_capture(path)
    assert argv[0] in main.HANDLERS, f"{path}: unexpected command {argv}"
    node.use(profile)
    rc, out, err = node.run(argv[0], *argv[1:])
    assert rc == 0, err
    assert comparable(out) == comparable(expected)


def test_timestamps_are_the_only_lines_ignored():
    """The comparison ignores only Timestamp / table date lines: at most 1 per file."""
    for machine in PROFILES:
        for path in (REAL / machine).glob("smi*.txt"):
            _, body = parse_capture(path)
            assert sum(1 for line in comparable(body) if line == "<timestamp>") == 1, path


def test_free_memory_is_the_only_numactl_line_ignored():
    """numactl -H: one `node N free:` line per node is masked, sizes and CPU lists are compared."""
    for machine in PROFILES:
        _, body = parse_capture(REAL / machine / "numactl.txt")
        masked = [line for line in comparable(body) if line.startswith("<")]
        assert masked == ["<free memory>"] * body.count(" cpus:"), machine
