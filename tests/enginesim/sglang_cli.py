"""`python -m sglang.launch_server` stand-in: node rank 0 is the master and serves the API."""

from __future__ import annotations

import os
import sys
import time

from . import flagset, kimiformat, runtime
from .api import ApiConfig, serve_until_signal

PROG = "launch_server.py"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    fs = flagset.load("sglang")
    try:
        args = flagset.parse_strict(fs, argv)
        if "--model-path" not in args:
            raise flagset.UsageError("the following arguments are required: --model-path/--model")
    except flagset.UsageError as err:
        print(f"usage: {PROG} [-h] --model-path MODEL_PATH [options]", file=sys.stderr)
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    rank = int(args.get("--node-rank", 0))
    log = runtime.Log("sglang", prefix=f" TP0 node{rank}" if rank else "")
    faults = runtime.faults()
    if "exit_at_start" in faults:
        runtime.die(log, "RuntimeError: Scheduler hit an exception (enginesim fault exit_at_start)")
    model_dir, config = runtime.read_model_config(log, args["--model-path"])
    runtime.check_model_config(log, fs, model_dir, config, bool(args.get("--trust-remote-code")))
    tp = int(args.get("--tp-size", 1))
    pp = int(args.get("--pp-size", 1))
    nnodes = int(args.get("--nnodes", 1))
    per_node = (tp * pp) // nnodes
    devices = runtime.local_devices()
    if (tp * pp) % nnodes or per_node > devices:
        runtime.die(
            log,
            f"ValueError: tp_size {tp} x pp_size {pp} over {nnodes} node(s) needs {per_node} GPUs "
            f"per node; this node has {devices}",
        )
    if nnodes > 1:
        addr = args.get("--dist-init-addr")
        if not addr or ":" not in addr:
            runtime.die(log, "ValueError: --dist-init-addr HOST:PORT is required with --nnodes > 1")
        host, _, port = addr.rpartition(":")
        if rank == 0:
            rdv = runtime.Rendezvous("0.0.0.0", int(port), log)
            log.info(f"Waiting for {nnodes - 1} other node(s) on {addr}")
            if not rdv.wait_for(lambda ms: len(ms) >= nnodes - 1, runtime.wait_timeout()):
                runtime.die(
                    log,
                    f"torch.distributed.DistStoreError: Timed out after {runtime.wait_timeout():g} s "
                    f"waiting for clients. {1 + len(rdv.members)}/{nnodes} clients joined.",
                )
        else:
            timeout = runtime.connect_timeout()
            sock = runtime.join(host, int(port), {"node_rank": rank, "pid": os.getpid()}, timeout)
            if sock is None:
                runtime.die(
                    log,
                    f"torch.distributed.DistNetworkError: The client socket has timed out after "
                    f"{timeout:g} s while trying to connect to ({host}, {port}) (--dist-init-addr of "
                    "node rank 0)",
                )
            log.info(f"Node rank {rank} joined {addr}")
            runtime.watch_master(sock, log, f"node rank 0 at {addr}")
            return runtime.wait_for_signal(log, f"sglang node rank {rank}")
    log.info(f"Load weight begin. {model_dir} tp={tp} pp={pp} nnodes={nnodes}")
    time.sleep(runtime.load_seconds())
    name = args.get("--served-model-name") or args["--model-path"]
    cfg = ApiConfig(
        engine="sglang",
        version=fs["version"],
        served_names=[name],
        model_path=args["--model-path"],
        max_model_len=int(args.get("--context-length") or config.get("max_position_embeddings", 4096)),
        reasoning_parser=args.get("--reasoning-parser"),
        tool_call_parser=args.get("--tool-call-parser"),
        faults=faults,
        model_format=kimiformat.model_format(config),
        vision=isinstance(config.get("vision_config"), dict) and not args.get("--language-model-only"),
    )
    host = args.get("--host") or "127.0.0.1"
    mode = args.get("--disaggregation-mode") or "null"
    if mode != "null":
        from .pd import Bootstrap, PdWorker

        bootstrap = None
        if mode == "prefill":
            bport = int(args.get("--disaggregation-bootstrap-port") or fs["flags"]["--disaggregation-bootstrap-port"]
                        .get("default", 8998))
            bootstrap = Bootstrap(host, bport, log)
        cfg.pd = PdWorker(mode, log, bootstrap, args.get("--disaggregation-ib-device"))
        log.info(f"Disaggregation mode {mode}" + (f", IB device {cfg.pd.ib_device}" if cfg.pd.ib_device else ""))
    return serve_until_signal(
        cfg,
        (host, int(args.get("--port", 30000))),
        log,
        "sglang",
        lambda port: [
            f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
            "The server is fired up and ready to roll!",
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
