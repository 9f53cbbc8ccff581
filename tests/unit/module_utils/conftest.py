"""Fixtures of the module_utils tests: the generated test model (once per session) and a test hub serving
it, for the weights tests and the pins tests alike."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hfserver.genmodel import generate
from hfserver.server import Running

SAMPLES = Path(__file__).resolve().parents[3] / "inventories"
HUB_REPO = "llmb-test/kimi-k2-sim"  # the repository the hub serves (weights_helpers.REPO, test_pins.REPO_ID)


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    generate(root / HUB_REPO)
    return root


@pytest.fixture
def hub(hub_root):
    with Running(hub_root) as h:
        yield h


@pytest.fixture
def h100_inventory(tmp_path) -> Path:
    """A copy of the h100 sample to edit (tmp_path/h100)."""
    inv = tmp_path / "h100"
    shutil.copytree(SAMPLES / "h100", inv)
    return inv
