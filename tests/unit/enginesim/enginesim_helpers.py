"""Helpers to run the engine test double as real processes on localhost ports."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from llmb.smoke import _call as smoke_call

REPO = Path(__file__).resolve().parents[3]
ENGINESIM = REPO / "tests" / "enginesim"
BIN = ENGINESIM / "bin"
# the nodes run Python 3.11 with the standard library only: prove it with 3.11 when available
PYTHON = shutil.which("python3.11") or "python3"

KIMI_CONFIG = {
    "model_type": "kimi_k2",
    "architectures": ["DeepseekV3ForCausalLM"],
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
    "max_position_embeddings": 262144,
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"]}},
    },
}


def make_model(path: Path, **changes) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    cfg = json.loads(json.dumps(KIMI_CONFIG))
    for dotted, value in changes.items():
        node = cfg
        parts = dotted.split("__")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_env(state: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMB_ENGINESIM", "OMPI_", "RAY_"))}
    env.update(
        {
            "LLMB_ENGINESIM_STATE": str(state),
            "LLMB_ENGINESIM_DATA": str(REPO / "data"),
            "LLMB_ENGINESIM_FAULTS_FILE": str(state / "faults"),
            "LLMB_ENGINESIM_LOAD_SECONDS": "0.1",
            "LLMB_ENGINESIM_CONNECT_TIMEOUT": "2",
            "LLMB_ENGINESIM_WAIT_TIMEOUT": "15",
            "LLMB_ENGINESIM_DEVICES": "8",
            # the node's own compile cache (vLLM's default is ~/.cache/vllm: not the tester's)
            "VLLM_CACHE_ROOT": str(state / "vllm-cache"),
        }
    )
    env.update({k: str(v) for k, v in extra.items()})
    state.mkdir(parents=True, exist_ok=True)
    return env


class Proc:
    """A stand-in process; always stopped by the test (context manager)."""

    def __init__(self, argv: list[str], env: dict, log: Path):
        self.log = log
        self.fh = log.open("w")
        self.p = subprocess.Popen(argv, env=env, stdout=self.fh, stderr=subprocess.STDOUT)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        if not self.fh.closed:
            self.fh.close()
        return self.p.returncode

    def wait(self, timeout: float = 20) -> int:
        return self.p.wait(timeout)

    def output(self) -> str:
        if not self.fh.closed:
            self.fh.flush()
        return self.log.read_text()


def run(argv: list[str], env: dict, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def cli(name: str) -> list[str]:
    return [PYTHON, str(BIN / name)]


def http(url: str, body: dict | None = None, timeout: float = 5) -> tuple[int, object]:
    """POST `body` (GET without one) through the smoke tests' own client (llmb.smoke); a refused or
    timed-out connection raises OSError (wait_healthy retries on it)."""
    status, resp = smoke_call("POST" if body is not None else "GET", url, body, timeout)
    if status is None:
        raise OSError(resp["error"])
    return status, resp


def wait_healthy(port: int, proc: Proc, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.p.poll() is not None:
            raise AssertionError(f"process exited {proc.p.returncode}:\n{proc.output()}")
        try:
            if http(f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not healthy within {timeout}s:\n{proc.output()}")


def wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"port {port} not listening")
