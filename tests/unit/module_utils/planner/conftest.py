"""Fixtures for the launch planner tests."""

from __future__ import annotations

import pytest
from llmbctl.catalog import Catalog
from llmbctl.planner import plan_inventory
from planner_helpers import REPO, load_inventory


@pytest.fixture(scope="session")
def data() -> Catalog:
    return Catalog(REPO / "data")


@pytest.fixture
def inventory():
    return load_inventory


@pytest.fixture
def planned():
    """Plan an inventory by name (optionally with variables changed on every host)."""

    def _plan(name: str, **overrides):
        hv, groups = load_inventory(name)
        for host in hv.values():
            host.update(overrides)
        return plan_inventory(hv, groups, str(REPO / "data"))

    return _plan
