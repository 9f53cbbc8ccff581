"""Engine identity from the registry (issue 25, point 2): how a host install gets each engine (the
distribution, the requirement, the version command) is written once, in the engine's CAPS; the
engine_host role reads it through the filter llmb_engine_packages, and the engine catalog's
distributions agree with it."""

from __future__ import annotations

import sys
from pathlib import Path

import llmbctl.planner.engines  # noqa: F401  (registers the engine modules)
import pytest
import yaml
from llmbctl.enginecat import ENGINES as CATALOG
from llmbctl.engines.registry import ENGINES

REPO = Path(__file__).resolve().parents[2]


def _filters():
    sys.path.insert(0, str(REPO / "plugins" / "filter"))
    try:
        import llmb_enginecat
    finally:
        sys.path.pop(0)
    return llmb_enginecat.FilterModule().filters()


def test_the_role_reads_the_registry():
    defaults = yaml.safe_load((REPO / "roles" / "engine_host" / "defaults" / "main.yml").read_text())
    assert defaults["engine_host_engines"] == "{{ 'host' | llmb_engine_packages }}"
    text = "\n".join(p.read_text() for p in REPO.glob("roles/*/defaults/main.yml"))
    assert "sglang[all]" not in text and "distribution: vllm" not in text  # no second copy


def test_every_host_package_is_a_registered_host_engine_the_catalog_knows():
    packages = _filters()["llmb_engine_packages"]("host")
    assert {"vllm", "sglang"} <= set(packages)
    for name, pkg in packages.items():
        assert "host" in ENGINES[name].CAPS.installs, name
        assert CATALOG[name].dist == pkg["distribution"], name  # the engine catalog installs the same package
        assert pkg["requirement"].startswith(pkg["distribution"]), name
        assert any("{venv}" in part for part in pkg["version_command"]), name


def test_an_engine_without_a_host_package_gets_none_and_containers_have_none():
    filters = _filters()
    packages = filters["llmb_engine_packages"]("host")
    for name, module in ENGINES.items():
        assert (name in packages) == (module.CAPS.host_package is not None)
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="only host installs"):
        filters["llmb_engine_packages"]("container")
