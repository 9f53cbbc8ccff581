"""AMD Instinct (ROCm) container specifics for vLLM, from seeds 002/003 (`vllm/vllm-openai-rocm`)."""

from __future__ import annotations

from typing import Any

# seeds 002/003: --device=/dev/kfd --device=/dev/dri (the recipe also passes /dev/mem; an
# inventory that wants the recipe verbatim adds it through llmb_container_devices)
ROCM_DEVICES = ["/dev/kfd", "/dev/dri"]

# seeds 002/003: --ipc=host --network=host --group-add video --cap-add=SYS_PTRACE
# --security-opt seccomp=unconfined (--privileged and --cap-add=CAP_SYS_ADMIN are opt-in)
ROCM_CONTAINER: dict[str, Any] = {
    "network": "host",
    "ipc": "host",
    "group_add": ["video"],
    "cap_add": ["SYS_PTRACE"],
    "security_opt": ["seccomp=unconfined"],
}

# seed 003 "Start the vLLM server" on MI300X/MI325X/MI355X
ROCM_ENV = {
    "SAFETENSORS_FAST_GPU": "1",
    "VLLM_USE_V1": "1",
    "VLLM_USE_TRITON_FLASH_ATTN": "0",
}
