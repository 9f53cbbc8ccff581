"""What every stand-in shares: server-like logs, fault hooks, timeouts, devices, model checks, rendezvous."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

FAULTS_ENV = "LLMB_ENGINESIM_FAULTS"
FAULTS_FILE_ENV = "LLMB_ENGINESIM_FAULTS_FILE"
DEFAULT_FAULTS_FILE = "/etc/llmb-enginesim/faults"
KNOWN_FAULTS = {
    "exit_at_start": "the engine exits with an error right after start",
    "never_healthy": "the API server runs but /health answers 503 forever",
    "no_reasoning": "chat answers carry no reasoning_content",
    "no_tool_calls": "chat answers never carry tool calls",
    "ray_exit_at_start": "`ray start` fails at once",
}


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def human_int(value) -> int:
    """vLLM's human-readable integers: 131072, 128k (x1000), 128K (x1024), 1m, 1M."""
    text = str(value).strip()
    mult = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


def load_seconds() -> float:
    return env_float("LLMB_ENGINESIM_LOAD_SECONDS", 1.0)


def request_seconds() -> float:
    """How long each completion takes (default 0): requests that are in flight long enough for a
    drain to matter (llmb stop under a bench)."""
    return env_float("LLMB_ENGINESIM_REQUEST_SECONDS", 0.0)


def connect_timeout() -> float:
    return env_float("LLMB_ENGINESIM_CONNECT_TIMEOUT", 30.0)


def wait_timeout() -> float:
    return env_float("LLMB_ENGINESIM_WAIT_TIMEOUT", 180.0)


def state_dir() -> Path:
    path = Path(os.environ.get("LLMB_ENGINESIM_STATE", "/tmp/llmb-enginesim"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def faults() -> set[str]:
    """Active fault hooks: env LLMB_ENGINESIM_FAULTS (comma list) and the faults file (one per line)."""
    active = {f.strip() for f in os.environ.get(FAULTS_ENV, "").split(",") if f.strip()}
    path = Path(os.environ.get(FAULTS_FILE_ENV, DEFAULT_FAULTS_FILE))
    try:
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                active.add(line)
    except OSError:
        pass
    return active


class Log:
    """Log lines in the style of the engine (vLLM: 'INFO 11-06 12:08:54 [file.py:123] msg')."""

    def __init__(self, style: str = "vllm", prefix: str = ""):
        self.style = style
        self.prefix = prefix
        self.lock = threading.Lock()

    def _line(self, level: str, where: str, msg: str) -> str:
        now = datetime.now()
        if self.style == "sglang":
            return f"[{now:%Y-%m-%d %H:%M:%S}{self.prefix}] {msg}"
        if self.style == "ray":
            return msg
        if self.style == "trtllm":
            return f"[{now:%m/%d/%Y-%H:%M:%S}] [TRT-LLM] [{level[0]}] {msg}"
        return f"{level} {now:%m-%d %H:%M:%S} [{where}] {self.prefix}{msg}"

    def info(self, msg: str, where: str = "api_server.py:1") -> None:
        with self.lock:
            print(self._line("INFO", where, msg), flush=True)

    def warning(self, msg: str, where: str = "api_server.py:1") -> None:
        with self.lock:
            print(self._line("WARNING", where, msg), file=sys.stderr, flush=True)

    def error(self, msg: str, where: str = "api_server.py:1") -> None:
        with self.lock:
            print(self._line("ERROR", where, msg), file=sys.stderr, flush=True)

    def raw(self, msg: str, err: bool = False) -> None:
        with self.lock:
            print(msg, file=sys.stderr if err else sys.stdout, flush=True)


def serve_in_thread(base, address, handler, log: Log, bind_error, where: str):
    """A threading server of class base on address, serving from a daemon thread; a port that cannot
    be bound ends the process the way the engine does (bind_error(exc) is its message)."""

    class Server(base):
        allow_reuse_address = True
        daemon_threads = True
        # the engines' servers (uvicorn) listen with a backlog of 2048; socketserver's default of 5
        # drops connections when a bench opens 16 at once (a lost SYN is retried after 1 s or fails)
        request_queue_size = 2048

    try:
        server = Server(address, handler)
    except OSError as exc:
        die(log, bind_error(exc), where=where)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def die(log: Log, message: str, code: int = 1, where: str = "core.py:1"):
    log.error(message, where)
    raise SystemExit(code)


def local_devices() -> int:
    """Accelerators on this node: env LLMB_ENGINESIM_DEVICES, else CUDA_VISIBLE_DEVICES (what the real
    engines see: a node emulated on a slice of a machine's GPUs), else nvidia-smi / npu-smi, else 8."""
    env = os.environ.get("LLMB_ENGINESIM_DEVICES")
    if env:
        return int(env)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return len([d for d in visible.split(",") if d.strip()])
    for cmd in (["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
            if lines:
                return len(lines)
    # inside an engine container: the device nodes it was given (--device), as the real runtimes see them
    for pattern in (r"davinci\d+", r"nvidia\d+"):
        found = [p for p in Path("/dev").glob("*") if re.fullmatch(pattern, p.name)]
        if found:
            return len(found)
    if Path("/dev/kfd").exists():
        found = list(Path("/dev/dri").glob("renderD*"))
        if found:
            return len(found)
    return 8


# ------------------------------------------------------------------ model directory
def read_model_config(log: Log, model: str) -> tuple[Path, dict]:
    path = Path(model)
    if not path.is_dir():
        die(
            log,
            f"OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
            f"them in the cached files. Checkout your internet connection or see how to run the library in "
            f"offline mode. ({model} is not a local directory)",
            where="config.py:1",
        )
    cfg = path / "config.json"
    if not cfg.is_file():
        die(
            log,
            f"ValueError: No supported config format found in {model} (config.json is missing)",
            where="config.py:1",
        )
    try:
        return path, json.loads(cfg.read_text())
    except ValueError as exc:
        die(log, f"json.decoder.JSONDecodeError: {cfg}: {exc}", where="config.py:1")
    raise AssertionError


def get_path(doc: dict, dotted: str):
    node = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_model_config(log: Log, fs: dict, model_dir: Path, config: dict, trust_remote_code: bool) -> None:
    """Fail the way the engine does on a config.json it cannot load (facts from the flag set)."""
    mtype = config.get("model_type")
    supported = fs.get("supports_model_types") or []
    # the release's own registry decides first: an architecture it registers loads (Kimi-K2.5's
    # KimiK25ForConditionalGeneration, Kimi-K3's KimiK3ForConditionalGeneration), whatever model_type says
    registered = set(fs.get("architectures") or []) & set(config.get("architectures") or [])
    if supported and mtype not in supported and not registered:
        die(
            log,
            f"ValueError: The checkpoint you are trying to load has model type `{mtype}` but "
            f"{fs['engine']} {fs['version']} does not recognize this architecture "
            f"(known: {', '.join(supported)}). ({model_dir}/config.json)",
            where="config.py:1",
        )
    if config.get("auto_map") and not trust_remote_code:
        die(
            log,
            f"ValueError: The repository {model_dir} contains custom code which must be executed to correctly "
            "load the model. Please pass the argument `trust_remote_code=True` to allow custom code to be run.",
            where="config.py:1",
        )
    for check in fs.get("config_checks") or []:
        when = check.get("when")
        if when and get_path(config, when["path"]) != when.get("equals"):
            continue
        value = get_path(config, check["path"])
        if value is not None and value in check.get("reject", []):
            die(
                log,
                f"RuntimeError: {model_dir}/config.json: {check['path']} = {json.dumps(value)}: "
                f"{check['error']}",
                where="quant_config.py:1",
            )


# ------------------------------------------------------------------ rendezvous (line protocol over TCP)
class Rendezvous:
    """A master that accepts members: each sends 'JOIN <json>' and keeps the connection open."""

    def __init__(self, host: str, port: int, log: Log):
        self.members: list[dict] = []
        self.left: list[dict] = []  # members whose connection dropped (a rank that died)
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                joined = None
                for raw in self.rfile:
                    line = raw.decode(errors="replace").strip()
                    if line.startswith("JOIN "):
                        info = json.loads(line[5:] or "{}")
                        with outer.changed:
                            outer.members.append(info)
                            outer.conns.append(self.connection)
                            outer.changed.notify_all()
                        joined = info
                        self.wfile.write(b"OK\n")
                    elif line == "STATUS":
                        with outer.lock:
                            body = json.dumps({"members": outer.members})
                        self.wfile.write(body.encode() + b"\n")
                    elif line == "PING":
                        self.wfile.write(b"PONG\n")
                    self.wfile.flush()
                if joined is not None:
                    with outer.changed:
                        outer.left.append(joined)
                        outer.changed.notify_all()

        self.server = serve_in_thread(
            socketserver.ThreadingTCPServer,
            (host, port),
            Handler,
            log,
            lambda exc: f"OSError: [Errno {exc.errno}] could not bind {host}:{port}: {exc.strerror}",
            "utils.py:1",
        )

    def wait_for(self, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self.members):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 1.0))
        return True


def join(address: str, port: int, info: dict, timeout: float) -> socket.socket | None:
    """Connect to a master with retries until timeout; send JOIN; return the open socket (or None)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((address, port), timeout=min(5.0, max(0.5, timeout)))
            sock.sendall(b"JOIN " + json.dumps(info).encode() + b"\n")
            reply = sock.makefile("rb").readline()
            if reply.strip() == b"OK":
                sock.settimeout(None)
                return sock
            sock.close()
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.3)


def query(address: str, port: int, line: str = "STATUS", timeout: float = 5.0) -> dict | None:
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.sendall(line.encode() + b"\n")
            reply = sock.makefile("rb").readline()
            return json.loads(reply.decode()) if reply else None
    except (OSError, ValueError):
        return None


def watch_master(sock: socket.socket, log: Log, what: str) -> None:
    """Exit non-zero when the master connection drops (a rank cannot outlive its master)."""

    def _watch():
        try:
            while sock.recv(1024):
                pass
        except OSError:
            pass
        log.error(f"RuntimeError: lost the connection to the {what}; shutting down", where="core.py:1")
        os._exit(1)

    threading.Thread(target=_watch, daemon=True).start()


def wait_for_signal(log: Log, name: str) -> int:
    """Block until SIGTERM/SIGINT; return exit status 0 after a shutdown line."""
    stop = threading.Event()

    def _handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while not stop.wait(1.0):
        pass
    log.info(f"{name}: shutting down", where="launcher.py:1")
    return 0
