"""Where the captures of real machines live, for the simulator tests that compare against them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def fixtures_dir(subdir: str, what: str) -> Path:
    """The first of LLMB_FIXTURES, the repository's tests/fixtures and ../shared/fixtures beside the
    checkout that holds subdir; when none does, the calling test module is skipped (what: its captures)."""
    repo = Path(__file__).resolve().parents[3]
    for candidate in (
        os.environ.get("LLMB_FIXTURES"),
        repo / "tests" / "fixtures",
        repo.parent / "shared" / "fixtures",
    ):
        if candidate and (Path(candidate) / subdir).is_dir():
            return Path(candidate)
    pytest.skip(f"{what} not found (set LLMB_FIXTURES)", allow_module_level=True)
