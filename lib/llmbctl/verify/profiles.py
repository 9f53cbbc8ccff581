"""The platform profiles verify compares with (data/platforms/*.yml, read by llmbctl.catalog)."""

from __future__ import annotations

from ..catalog import Catalog, platform_errors
from .fabric import fabric_config
from .health import health_config

# The platform profiles are read, validated and deep-merged with profile_overrides by llmbctl.catalog
# (controller side, PyYAML); verify only compares facts with the mapping it returns.
validate_profile = platform_errors


def profile_names(directory: str | None = None) -> list[str]:
    return Catalog(platforms_dir=directory).platform_names()


def load_profile(name: str, directory: str | None = None, overrides: dict | None = None) -> dict:
    """The profile mapping of data/platforms/<name>.yml (or <directory>/<name>.yml), overrides merged.

    Raises ValueError (llmbctl.catalog.CatalogError) naming the file and the field when it is invalid.
    """
    profile = Catalog(platforms_dir=directory).platform(name, overrides).profile()
    health_config(profile)  # the health / fabric thresholds are verify's own sections: checked here
    fabric_config(profile)
    return profile
