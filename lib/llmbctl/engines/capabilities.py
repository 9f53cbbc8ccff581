"""What an engine can do, as data: each engine module declares one ``EngineCaps`` record as ``CAPS``.

The planner's shared code (the checks in validation.py, the helpers in engines/common.py) reads
these records instead of asking ``if engine in (...)``: adding an engine means one engine module
with its record, its ``topology`` / ``engine_args`` / ``services`` functions, and its flag set in
data/engines/.
"""

from __future__ import annotations

from dataclasses import dataclass

# topology modes an engine may resolve to (engines/<engine>.py:topology decides which)
MODES = ("single", "ray", "native", "dp", "sglang", "mpirun")


@dataclass(frozen=True)
class EngineCaps:
    name: str  # the value of llmb_engine
    vendors: tuple[str, ...]  # platform vendors it runs on in this toolkit
    installs: tuple[str, ...]  # llmb_install kinds the planner can produce for it
    memory_fraction_flag: str | None  # flag that caps device memory use (None: fixed headroom)
    memory_fraction_default: float  # fraction assumed when the flag is not given
    modes: tuple[str, ...]  # topology modes it resolves to, from MODES
    head_address_use: str  # what the head's address becomes with several nodes (loopback check)
    decode_context_parallel: bool = False  # llmb_decode_context_parallel applies
    expert_parallel: str = "size"  # "switch": llmb_expert_parallel | "size": llmb_expert_parallel_size
    # llmb_data_parallel > 1 refused with (message, fix) when the engine has no data-parallel flag
    data_parallel_refused: tuple[str, str] | None = None
    host_ip_env: str | None = None  # env var that carries the node's address (set with iface/multinode)
    # the API offers tool calls only with this flag besides --tool-call-parser
    tool_choice_flag: str | None = None
    # memory fit (planner/memory.py): the flag of the longest sequence (default: the model's
    # max_position_embeddings), the flag of the KV cache element type, and what the memory fraction
    # covers: "budget" (vLLM: device x fraction holds weights, non-KV peak and KV), "static" (SGLang:
    # weights and the KV pool only), "free" (TRT-LLM: KV gets the fraction of what weights and the
    # non-KV peak leave free), "offload" (KTransformers: the experts in host memory, the device holds
    # attention and KV only: no device fit of the whole checkpoint)
    max_len_flag: str | None = None
    kv_dtype_flag: str | None = None
    memory_model: str = "budget"

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown:
            raise ValueError(f"engine {self.name}: unknown topology modes {unknown}; known: {MODES}")
        if self.memory_model not in ("budget", "static", "free", "offload"):
            raise ValueError(f"engine {self.name}: memory_model is 'budget', 'static', 'free' or 'offload'")
        if self.expert_parallel not in ("switch", "size"):
            raise ValueError(f"engine {self.name}: expert_parallel is 'switch' or 'size'")
