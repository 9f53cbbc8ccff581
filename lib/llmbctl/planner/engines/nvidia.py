"""NVIDIA container specifics (vLLM / SGLang images, TensorRT-LLM from seed 004)."""

from __future__ import annotations

from typing import Any

NVIDIA_CONTAINER: dict[str, Any] = {"network": "host", "ipc": "host", "gpus": "all"}

# seed 004 TensorRT-LLM `docker run`: --ipc=host --gpus=all --network host
# --ulimit memlock=-1 --ulimit stack=67108864 (--privileged is opt-in)
TRTLLM_CONTAINER: dict[str, Any] = {
    "network": "host",
    "ipc": "host",
    "gpus": "all",
    "ulimits": ["memlock=-1", "stack=67108864"],
}
