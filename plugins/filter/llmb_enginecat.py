"""Filters over llmbctl.enginecat (controller side): the chosen engine release against a node's driver,
the same finding verify's engine.driver reports (enginecat.requirements.driver_finding).

    finding: "{{ smi.stdout | llmb_engine_driver_finding(engine_name, engine_version, vendor) }}"
    # {} when it does not apply (not NVIDIA, a release without a CUDA major); else {ok, expected, found, hint}
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmbctl.catalog import Catalog, CatalogError
from llmbctl.enginecat.requirements import driver_finding, driver_from_query


def llmb_engine_driver_finding(query_output, engine, version, vendor="nvidia", data_dir=None):
    """``query_output``: what `nvidia-smi --query-gpu=driver_version --format=csv,noheader` printed."""
    try:
        rel = Catalog(data_dir or None).release_requirements(str(engine or ""), str(version or ""))
    except CatalogError as err:
        raise AnsibleFilterError(f"llmb_engine_driver_finding: {err}") from None
    if rel is None:
        return {}
    return driver_finding(rel["release"], rel["requirements"], driver_from_query(query_output), vendor) or {}


class FilterModule:
    def filters(self):
        return {"llmb_engine_driver_finding": llmb_engine_driver_finding}
