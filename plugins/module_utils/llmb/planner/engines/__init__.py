"""Engine planners: each engine module resolves its topology and turns it into per-host services.

An engine module declares ``CAPS`` (a capabilities.EngineCaps record) and three functions:
``topology(ctx, caps, sizes)`` -> (Topology | None, problems), ``engine_args(ctx, topo)`` ->
(EngineArgs, problems) and ``services(ctx, topo, engine_args)`` -> host plans. ``ENGINES`` is the
registry built from those modules; core.plan_inventory looks the inventory's engine up there.
"""

from __future__ import annotations

from types import ModuleType

from . import ktransformers, sglang, trtllm, vllm, vllm_ascend

ENGINES: dict[str, ModuleType] = {}


def register(module: ModuleType) -> ModuleType:
    """Add an engine module to the registry under its CAPS.name (the value of llmb_engine)."""
    for attr in ("CAPS", "topology", "engine_args", "services"):
        if not hasattr(module, attr):
            raise TypeError(f"engine module {module.__name__} has no {attr}")
    ENGINES[module.CAPS.name] = module
    return module


def unregister(name: str) -> None:
    ENGINES.pop(name, None)


def engine_for_vendor(vendor: str) -> str:
    """The first registered engine that runs on vendor (the one to suggest on its platforms)."""
    for name, module in ENGINES.items():
        if vendor in module.CAPS.vendors:
            return name
    return next(iter(ENGINES))


for _module in (vllm, vllm_ascend, sglang, trtllm, ktransformers):
    register(_module)
