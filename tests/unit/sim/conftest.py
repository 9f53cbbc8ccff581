"""Fixtures for the accelerator simulator tests: a node root in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim.accelsim import cli, main, state


class SimNode:
    """A simulated node rooted in a temporary directory (ACCELSIM_ROOT)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch):
        self.root = root
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("ACCELSIM_ROOT", str(root))
        monkeypatch.setenv("ACCELSIM_HOSTNAME", "node1")

    def use(self, profile: str, hostname: str = "node1") -> SimNode:
        self.monkeypatch.setenv("ACCELSIM_HOSTNAME", hostname)
        state.write_profile_name(profile)
        state.write_faults([])
        cli.sync_derived()
        return self

    def run(self, tool: str, *argv: str) -> tuple[int, str, str]:
        return main.run(tool, list(argv))

    def out(self, tool: str, *argv: str) -> str:
        rc, out, err = self.run(tool, *argv)
        assert rc == 0, f"{tool} {' '.join(argv)} exited {rc}: {err or out}"
        return out

    def accelsim(self, *argv: str) -> tuple[int, str, str]:
        return cli.run(list(argv))

    def fault(self, *argv: str) -> None:
        rc, out, err = cli.run(["fault", "add", *argv])
        assert rc == 0, err


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimNode:
    return SimNode(tmp_path, monkeypatch)
