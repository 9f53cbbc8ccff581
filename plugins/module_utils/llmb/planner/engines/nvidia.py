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

# llmb_container_nvidia_gpus: cdi -> the NVIDIA Container Toolkit's CDI device for every GPU
# (`nvidia-ctk cdi generate`, Docker 25+ with CDI enabled); devices -> the driver's device nodes
# themselves (no runtime hook: the image brings a user-space driver matching the node's module)
CDI_ALL_GPUS = "nvidia.com/gpu=all"
NVIDIA_CONTROL_DEVICES = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]


def gpu_devices(mode: str, device_count: int) -> list[str]:
    """The --device entries of llmb_container_nvidia_gpus `mode` (cdi | devices) on a node of device_count GPUs."""
    if mode == "cdi":
        return [CDI_ALL_GPUS]
    return [f"/dev/nvidia{i}" for i in range(device_count)] + list(NVIDIA_CONTROL_DEVICES)
