"""`trtllm-serve serve [OPTIONS] MODEL` and `trtllm-llmapi-launch CMD...` stand-ins (click-style CLI).

Under mpirun (OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_RANK set) the world size must equal
TP x PP; rank 0 serves the API, the other ranks stay up until stopped.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from . import flagset, runtime
from .api import ApiConfig, serve_until_signal

USAGE = "Usage: trtllm-serve serve [OPTIONS] MODEL\nTry 'trtllm-serve serve --help' for help.\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    fs = flagset.load("trtllm")
    if argv[:1] != ["serve"]:
        usage = "Usage: trtllm-serve [OPTIONS] COMMAND [ARGS]...\n"
        return flagset.usage_error(usage, f"Error: No such command '{argv[0] if argv else ''}'.")
    try:
        args, pos = flagset.parse(fs, argv[1:])
        if not pos:
            raise flagset.UsageError("Missing argument 'MODEL'.")
        if len(pos) > 1:
            raise flagset.UsageError(f"Got unexpected extra argument ({pos[1]})")
        parser = args.get("--reasoning_parser")
        known = (fs.get("parsers") or {}).get("reasoning") or []
        if parser and parser not in known:
            raise flagset.UsageError(
                f"Invalid value for '--reasoning_parser': {parser!r} is not one of "
                f"{', '.join(repr(k) for k in known)}."
            )
    except flagset.UsageError as err:
        print(USAGE, file=sys.stderr)
        print(f"Error: {err}", file=sys.stderr)
        return 2
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    log = runtime.Log("trtllm", prefix="")
    faults = runtime.faults()
    if "exit_at_start" in faults:
        runtime.die(log, "RuntimeError: Executor worker failed (enginesim fault exit_at_start)")
    model = pos[0]
    model_dir, config = runtime.read_model_config(log, model)
    runtime.check_model_config(log, fs, model_dir, config, bool(args.get("--trust_remote_code")))
    extra = args.get("--extra_llm_api_options")
    if extra and not Path(extra).is_file():
        runtime.die(log, f"FileNotFoundError: [Errno 2] No such file or directory: '{extra}'")
    tp = int(args.get("--tp_size", 1))
    pp = int(args.get("--pp_size", 1))
    world = tp * pp
    if size > 1 and size != world:
        runtime.die(log, f"ValueError: MPI world size {size} does not match tp_size {tp} x pp_size {pp}")
    if size == 1 and world > runtime.local_devices():
        runtime.die(
            log,
            f"ValueError: tp_size {tp} x pp_size {pp} = {world} ranks need mpirun over several "
            f"nodes; this node has {runtime.local_devices()} GPUs",
        )
    if rank > 0:
        log.info(f"rank {rank} of {size} ready")
        return runtime.wait_for_signal(log, f"trtllm rank {rank}")
    log.info(f"Loading {model_dir} with tp_size={tp} pp_size={pp} ep_size={args.get('--ep_size')}")
    time.sleep(runtime.load_seconds())
    cfg = ApiConfig(
        engine="trtllm",
        version=fs["version"],
        served_names=[model],
        model_path=model,
        max_model_len=int(args.get("--max_seq_len") or config.get("max_position_embeddings", 4096)),
        reasoning_parser=args.get("--reasoning_parser"),
        faults=faults,
    )
    host = args.get("--host") or "localhost"
    address = (host, int(args.get("--port", 8000)))
    return serve_until_signal(
        cfg, address, log, "trtllm-serve", lambda port: [f"Uvicorn running on http://{host}:{port}"]
    )


def llmapi_launch(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: trtllm-llmapi-launch COMMAND [ARGS...]", file=sys.stderr)
        return 2
    os.execvp(argv[0], argv)
    return 127


if __name__ == "__main__":
    sys.exit(main())
