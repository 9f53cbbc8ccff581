"""Fixtures of the weights tests; hub_root and hub (the test hub serving the generated model) are in
tests/unit/module_utils/conftest.py."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from hfserver.server import Running
from llmb.weights import manifest as mf
from weights_helpers import ALLOW, REPO


@pytest.fixture(scope="session")
def sim_manifest(hub_root) -> dict:
    with Running(hub_root) as h:
        repo = h.state.repos[REPO]
        entries = [repo.api_entry(rel) for rel in repo.files]
    return mf.build(REPO, repo.sha, entries, ALLOW)


@pytest.fixture
def model_copy(hub_root, tmp_path) -> Path:
    """A complete copy of the model's allowed files, as if downloaded."""
    dest = tmp_path / "model"
    src = hub_root / REPO
    dest.mkdir()
    for f in src.iterdir():
        if mf.selected(f.name, ALLOW):
            shutil.copy2(f, dest / f.name)
    return dest


@pytest.fixture(scope="session")
def venv_python() -> str:
    """The controller venv's interpreter has huggingface_hub 2.4.0: it stands in for the tool venv."""
    return sys.executable
