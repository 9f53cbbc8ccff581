"""The one directory layout on the nodes (decided here, read by the planner and the deployment).

    /etc/llmb        configuration: EnvironmentFiles, engine config files, ssh-mesh/
    /opt/llmb        software: uv/<version>, venvs/<engine>-<version>, tools (huggingface_hub)
    /var/lib/llmb    state kept between runs
    /var/cache/llmb  compile/<service>: each engine service's compile and kernel caches (llmb_compile_cache_dir)
    /run/llmb        transient secrets (tmpfs): weights/hf-token during the weights stage

Runs on the controller only (no node imports it), stdlib only.
"""

from __future__ import annotations

from typing import Any

ETC_DIR = "/etc/llmb"
OPT_DIR = "/opt/llmb"
STATE_DIR = "/var/lib/llmb"
CACHE_DIR = "/var/cache/llmb"
COMPILE_CACHE_DIR = CACHE_DIR + "/compile"  # llmb_compile_cache_dir's default
RUN_DIR = "/run/llmb"
SSH_MESH_DIR = ETC_DIR + "/ssh-mesh"
# the listener-confining preload (roles/serve/files/llmb-bindto.c, built on each node by the serve role)
BINDTO = OPT_DIR + "/lib/llmb-bindto.so"


def engine_venv(engine: str, version: str, override: Any | None = None) -> str:
    """Engine venv of a host install: llmb_engine_venv when set, else /opt/llmb/venvs/<engine>-<version>."""
    venv = override or f"{OPT_DIR}/venvs/{engine}-{version}"
    return str(venv).rstrip("/")


def node_dirs(ssh_mesh: Any | None = None, config: Any | None = None) -> dict[str, str]:
    """The layout as the deployment document states it (ssh_mesh and config may be moved by the inventory)."""
    return {
        "etc": ETC_DIR,
        "opt": OPT_DIR,
        "state": STATE_DIR,
        "run": RUN_DIR,
        "config": str(config or ETC_DIR),
        "ssh_mesh": str(ssh_mesh or SSH_MESH_DIR),
        "tools": OPT_DIR + "/tools",
        "uv": OPT_DIR + "/uv",
        "bindto": BINDTO,
        "weights_token": RUN_DIR + "/weights",
    }
