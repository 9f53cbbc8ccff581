"""vllm-ascend plans: vLLM's shapes (engines/vllm.py) on Atlas A2/A3, as containers (seed 001)."""

from __future__ import annotations

from dataclasses import replace

from . import vllm
from .vllm import engine_args, services, topology

CAPS = replace(vllm.CAPS, name="vllm-ascend", vendors=("ascend",), installs=("container",))

__all__ = ["CAPS", "engine_args", "services", "topology"]
