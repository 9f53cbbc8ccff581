"""Atlas A2/A3 (Ascend NPU) container specifics (vllm-ascend), from seed 001's `docker run`."""

from __future__ import annotations

from typing import Any

# seed 001: Ascend runtime device files besides /dev/davinci<N>
ASCEND_CONTROL_DEVICES = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]

# seed 001: driver tools and libraries the container reads from the host
ASCEND_DRIVER_MOUNTS = [
    "/usr/local/dcmi:/usr/local/dcmi",
    "/usr/local/Ascend/driver/tools/hccn_tool:/usr/local/Ascend/driver/tools/hccn_tool",
    "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
    "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info:/etc/ascend_install.info",
]

# seed 001 section 5.1: environment of the single-node TP16 service
ASCEND_ENV = {
    "HCCL_BUFFSIZE": "1024",
    "TASK_QUEUE_ENABLE": "1",
    "OMP_PROC_BIND": "false",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
}

# seed 001: --net=host --shm-size=1g
ASCEND_CONTAINER: dict[str, Any] = {"network": "host", "shm_size": "1g"}


def devices(device_count: int) -> list[str]:
    return [f"/dev/davinci{i}" for i in range(device_count)] + list(ASCEND_CONTROL_DEVICES)
