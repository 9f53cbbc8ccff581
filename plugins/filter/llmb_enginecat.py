"""Filters over llmbctl.enginecat (controller side): the chosen engine release against a node's driver,
the same finding verify's engine.driver reports (enginecat.requirements.driver_finding).

    finding: "{{ smi.stdout | llmb_engine_driver_finding(engine_name, engine_version, vendor) }}"
    # {} when it does not apply (not NVIDIA, a release without a CUDA major); else {ok, expected, found, hint}
    engine_host_engines: "{{ 'host' | llmb_engine_packages }}"
    # {engine: {distribution, requirement, version_command}} of the registry's engines a host install gets
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmbctl.catalog import Catalog, CatalogError
from llmbctl.enginecat.requirements import driver_finding, driver_from_query
from llmbctl.engines.registry import ENGINES


def llmb_engine_driver_finding(query_output, engine, version, vendor="nvidia", data_dir=None):
    """``query_output``: what `nvidia-smi --query-gpu=driver_version --format=csv,noheader` printed."""
    try:
        rel = Catalog(data_dir or None).release_requirements(str(engine or ""), str(version or ""))
    except CatalogError as err:
        raise AnsibleFilterError(f"llmb_engine_driver_finding: {err}") from None
    if rel is None:
        return {}
    found = driver_finding(rel["release"], rel["requirements"], driver_from_query(query_output), vendor)
    return found.check_record() if found else {}


def llmb_engine_packages(install="host"):
    """How each engine of the registry is installed on a host (its CAPS.host_package): the one place
    engine identity is written; the engine_host role's engine_host_engines default."""
    import llmbctl.planner.engines  # noqa: F401  (registers the engine modules)

    if install != "host":
        raise AnsibleFilterError(f"llmb_engine_packages: only host installs have packages, not {install!r}")
    return {
        name: {"distribution": pkg.distribution, "requirement": pkg.requirement,
               "version_command": list(pkg.version_command)}
        for name, module in ENGINES.items()
        if (pkg := module.CAPS.host_package) is not None
    }


class FilterModule:
    def filters(self):
        return {"llmb_engine_driver_finding": llmb_engine_driver_finding, "llmb_engine_packages": llmb_engine_packages}
