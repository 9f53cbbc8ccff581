"""Filters over llmbctl.catalog, the one loader of data/ (controller side), for the roles.

    vendor: "{{ (llmb_platform | llmb_catalog_platform).vendor }}"
    profile: "{{ llmb_model | llmb_catalog_model }}"                  # the validated model profile
    profile: "{{ llmb_model | llmb_catalog_model(weights_profiles_dir) }}"   # another models directory
    names: "{{ 'platforms' | llmb_catalog_names }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from llmbctl.catalog import KINDS, Catalog, CatalogError


def llmb_catalog_platform(name, platforms_dir=None):
    """The platform record of data/platforms/<name>.yml as a dict (name, vendor, device_model,
    device_count, device_memory_mib, device_memory_gb, driver_min_version, ...)."""
    try:
        return Catalog(platforms_dir=platforms_dir or None).platform(str(name)).to_dict()
    except CatalogError as err:
        raise AnsibleFilterError(f"llmb_platform: {err}") from None


def llmb_catalog_model(name, models_dir=None):
    """The validated model profile data/models/<name>.yml (or <models_dir>/<name>.yml) as a dict."""
    try:
        return Catalog(models_dir=models_dir or None).model(str(name)).profile()
    except CatalogError as err:
        raise AnsibleFilterError(f"llmb_model: {err}") from None


def llmb_catalog_names(kind):
    """The names of one kind of data: platforms, models, engines or presets."""
    if kind not in KINDS:
        raise AnsibleFilterError(f"llmb_catalog_names: kind must be one of {', '.join(KINDS)}, found {kind!r}")
    return Catalog().names(kind)


class FilterModule:
    def filters(self):
        return {
            "llmb_catalog_platform": llmb_catalog_platform,
            "llmb_catalog_model": llmb_catalog_model,
            "llmb_catalog_names": llmb_catalog_names,
        }
