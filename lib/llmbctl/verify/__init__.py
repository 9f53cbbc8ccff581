"""Compare a node's accelerator facts (llmbctl.hw.facts) with a platform profile (data/platforms/*.yml).

    checks = verify(facts, profile)            # [{'id', 'ok', 'expected', 'found', 'hint'}, ...]
    result = summarize(host, profile, checks)  # {'host', 'platform', 'ok', 'checks', 'failed'}

Pure Python, no Ansible imports. Profiles come from llmbctl.catalog (PyYAML, controller side). A check
is the project's one finding (llmb.finding) in its JSON record. The modules, by area:

    profiles     the profiles verify compares with (load_profile, profile_names, validate_profile)
    base         version comparison, the check records, the tools per vendor
    node         verify(): one node's facts against its profile (devices, driver, interconnect, NUMA,
                 Fabric Manager / CUDA, HCCN, RDMA), waivers
    health       health.* (NVIDIA: Xid, ECC, throttling, PCIe, NVLink errors, peermem, ACS), deepep.*
    bandwidth    bandwidth.* from a bandwidth probe
    consistency  consistency.*: driver and firmware equal across the nodes of a platform
    fabric       the cross-node fabric (tag fabric): rails, NCCL transport and all-reduce, HCCN pings
    results      a node's result and the failed checks' lines
"""

from __future__ import annotations

from .bandwidth import bandwidth_checks
from .base import REQUIRED_KINDS, TOOLS, version_at_least, version_key
from .consistency import consistency_checks, node_firmware
from .fabric import (
    RAILS_FILE,
    fabric_checks,
    fabric_config,
    hccn_addresses,
    hccn_ping_checks,
    hccn_ping_pairs,
    rail_record,
    rails_yaml,
)
from .health import HEALTH_DEFAULTS, deepep_checks, health_checks, health_config, uses_deepep
from .node import apply_waivers, rail_ports, verify
from .profiles import load_profile, profile_names, validate_profile
from .results import report_lines, summarize

__all__ = [
    "HEALTH_DEFAULTS", "RAILS_FILE", "REQUIRED_KINDS", "TOOLS", "apply_waivers", "bandwidth_checks",
    "consistency_checks", "deepep_checks", "fabric_checks", "fabric_config", "hccn_addresses", "hccn_ping_checks",
    "hccn_ping_pairs", "health_checks", "health_config", "load_profile", "node_firmware", "profile_names",
    "rail_ports", "rail_record", "rails_yaml", "report_lines", "summarize", "uses_deepep", "validate_profile",
    "verify", "version_at_least", "version_key",
]
