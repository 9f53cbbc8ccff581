"""Engine planners: each engine module resolves its topology and turns it into per-host services.

An engine module declares ``CAPS`` (a capabilities.EngineCaps record) and three functions:
``topology(ctx, caps, sizes)`` -> (Topology | None, problems), ``engine_args(ctx, topo)`` ->
(EngineArgs, problems) and ``services(ctx, topo, engine_args)`` -> host plans. ``ENGINES`` (llmbctl.engines.registry,
below the planner) is the registry these modules are added to; core.plan_inventory looks the inventory's engine up there.
"""

from __future__ import annotations

from ...engines.registry import ENGINES, engine_for_vendor, register, unregister
from . import ktransformers, sglang, trtllm, vllm, vllm_ascend

__all__ = ["ENGINES", "engine_for_vendor", "register", "unregister"]

for _module in (vllm, vllm_ascend, sglang, trtllm, ktransformers):
    register(_module)
