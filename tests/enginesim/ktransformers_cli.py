"""`python -m ktransformers.server.main` stand-in (KTransformers 0.3.x server, seed 004): the GGUF
folder with the model's configuration files beside the GGUF files, the OpenAI API on --host/--port."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from . import flagset, runtime
from .api import ApiConfig, serve_until_signal

PROG = "kvcache.ai"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the releases that run this server (0.3.x); 0.5+ runs under `python -m sglang.launch_server`
    fs = flagset.load("ktransformers", command=("python", "-m", "ktransformers.server.main"))
    try:
        args = flagset.parse_strict(fs, argv)
    except flagset.UsageError as err:
        print(f"usage: {PROG} [-h] [--host HOST] [--port PORT] ...", file=sys.stderr)
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    log = runtime.Log("sglang")
    model_path = args.get("--model_path") or args.get("--model_dir")
    gguf = args.get("--gguf_path")
    if not model_path or not gguf:
        runtime.die(log, "ValueError: --model_path and --gguf_path are required (the GGUF folder)")
    model_dir, config = runtime.read_model_config(log, model_path)  # config.json beside the GGUF files
    if not sorted(Path(gguf).glob("*.gguf")):
        runtime.die(log, f"FileNotFoundError: no .gguf file in --gguf_path {gguf}")
    rules = args.get("--optimize_config_path")
    if rules:
        log.info(f"optimize rules: {rules}")
    log.info(f"Loading GGUF weights from {gguf}, config from {model_dir}, cache_lens {args.get('--cache_lens')}")
    time.sleep(runtime.load_seconds())
    name = args.get("--model_name") or Path(model_path).name
    cfg = ApiConfig(engine="ktransformers", version=fs["version"], served_names=[name], model_path=str(model_dir),
                    max_model_len=int(args.get("--cache_lens") or config.get("max_position_embeddings", 4096)),
                    faults=runtime.faults())
    host = args.get("--host") or "0.0.0.0"
    return serve_until_signal(cfg, (host, int(args.get("--port") or 10002)), log, "ktransformers",
                              lambda port: [f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"])


if __name__ == "__main__":
    sys.exit(main())
