"""`vllm serve` / `vllm bench serve` / `vllm --version` stand-in (also vllm-ascend:
LLMB_ENGINESIM_ENGINE=vllm-ascend)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from . import flagset, kimiformat, runtime
from .api import ApiConfig, ApiServer

USAGE = "usage: vllm serve [model_tag] [options]"


def _ray_cluster(log: runtime.Log) -> tuple[str, int] | None:
    addr = os.environ.get("RAY_ADDRESS")
    if not addr:
        path = runtime.state_dir() / "ray_current_cluster"
        if path.exists():
            addr = path.read_text().strip()
    if not addr or ":" not in addr:
        return None
    host, _, port = addr.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    engine = os.environ.get("LLMB_ENGINESIM_ENGINE", "vllm")
    fs = flagset.load(engine)
    log = runtime.Log("vllm")
    if argv[:1] in (["--version"], ["-v"]):
        print(fs["version"])
        return 0
    if argv[:2] == ["bench", "serve"]:
        from . import vllm_bench

        return vllm_bench.main(argv[2:])
    if argv[:1] != ["serve"]:
        usage = "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."
        return flagset.usage_error(usage, f"vllm: error: argument subparser: invalid choice: {argv[:1]!r}")
    try:
        args, pos = flagset.parse(fs, argv[1:], max_positionals=1)
        if len(pos) > 1:
            raise flagset.UsageError(f"unrecognized arguments: {' '.join(pos[1:])}")
        reasoning = args.get("--reasoning-parser")
        known = (fs.get("parsers") or {}).get("reasoning") or []
        if reasoning and known and reasoning not in known:
            choices = ", ".join(repr(c) for c in known)
            raise flagset.UsageError(
                f"argument --reasoning-parser: invalid choice: {reasoning!r} (choose from {choices})"
            )
    except flagset.UsageError as err:
        print(USAGE, file=sys.stderr)
        print(f"vllm: error: {err}", file=sys.stderr)
        return 2
    return serve(fs, engine, args, pos, log)


def serve(fs: dict, engine: str, args: dict, pos: list[str], log: runtime.Log) -> int:
    faults = runtime.faults()
    model = pos[0] if pos else args.get("--model", "Qwen/Qwen3-0.6B")
    log.info(f"vLLM API server version {fs['version']} ({engine}, enginesim)", "api_server.py:1885")
    log.info(f"non-default args: {args}", "utils.py:233")
    if "exit_at_start" in faults:
        runtime.die(
            log,
            "RuntimeError: CUDA error: an illegal memory access was encountered "
            "(enginesim fault exit_at_start)",
            where="core.py:710",
        )
    tool_parser = args.get("--tool-call-parser")
    if args.get("--enable-auto-tool-choice") and not tool_parser:
        runtime.die(
            log,
            "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser",
            where="api_server.py:1800",
        )
    known_tools = (fs.get("parsers") or {}).get("tool_call") or []
    if tool_parser and known_tools and tool_parser not in known_tools:
        runtime.die(
            log,
            f"KeyError: invalid tool call parser: {tool_parser} (chose from {{ {', '.join(known_tools)} }})",
            where="api_server.py:1810",
        )
    model_dir, config = runtime.read_model_config(log, model)
    runtime.check_model_config(log, fs, model_dir, config, bool(args.get("--trust-remote-code")))

    tp = int(args.get("--tensor-parallel-size", 1))
    pp = int(args.get("--pipeline-parallel-size", 1))
    dcp = int(args.get("--decode-context-parallel-size", 1))
    dp = int(args.get("--data-parallel-size", 1))
    dp_local = int(args.get("--data-parallel-size-local") or dp)
    if tp % dcp != 0:
        runtime.die(
            log,
            f"AssertionError: tensor parallel size {tp} must be divisible by decode context "
            f"parallel size {dcp}",
            where="parallel.py:1",
        )
    devices = runtime.local_devices()
    world = tp * pp
    backend = args.get("--distributed-executor-backend")

    nnodes = int(args.get("--nnodes", 1))
    if nnodes > 1 and backend not in (None, "mp", "uni", "external_launcher"):
        runtime.die(  # vLLM 0.26.0 config/parallel.py, word for word
            log,
            "ValueError: nnodes > 1 can only be set when distributed executor backend is mp, uni or "
            "external_launcher.",
            where="parallel.py:936",
        )
    if nnodes > 1:  # vLLM's own multi-node launch: node rank 0 serves, the others run --headless
        if int(args.get("--node-rank", 0)) > 0 or args.get("--headless"):
            return _native_follower(args, nnodes, world, devices, log)
        master_rdv = _native_master(args, nnodes, tp, pp, world, devices, log)
    elif args.get("--headless"):
        return _headless(args, dp, dp_local, world, devices, log)

    if nnodes > 1:
        pass  # joined above (master_rdv)
    elif dp > dp_local:
        _dp_master(args, dp, dp_local, world, devices, log)
    else:
        if dp * world > devices and backend != "ray":
            runtime.die(
                log,
                f"ValueError: World size ({dp * world}) is larger than the number of available GPUs "
                f"({devices}) in this node. If this is intentional, you are using multi-node "
                "inference; start a Ray cluster and pass --distributed-executor-backend ray.",
                where="parallel.py:1",
            )
        if backend == "ray":
            _wait_for_ray(world, log)
    log.info(
        f"Loading weights from {model_dir} (TP {tp} x PP {pp} x DP {dp}, DCP {dcp})", "gpu_model_runner.py:1"
    )
    t_load = time.monotonic()
    time.sleep(runtime.load_seconds())
    # the real engine's lines (vLLM 0.26.0 default_loader.py, gpu_model_runner.py; the weight-load rate is read
    # from them: llmb.serve.weight_load_timings): the checkpoint's safetensors bytes split over TP x PP
    shard_bytes = sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else 0
    took = time.monotonic() - t_load
    log.info(f"Loading weights took {took:.2f} seconds", "default_loader.py:430")
    log.info(f"Model loading took {shard_bytes / max(tp * pp, 1) / 2**30:.2f} GiB memory and {took:.6f} seconds",
             "gpu_model_runner.py:5347")
    if nnodes > 1:
        local = world // nnodes
        compile_graphs(args, [(r, 0) for r in range(local)], log)
    elif backend == "ray":  # the head's own GPUs; the workers on other nodes keep theirs there (not simulated)
        compile_graphs(args, [(r, 0) for r in range(min(world, devices))], log)
    else:
        compile_graphs(args, [(r, d) for d in range(dp_local) for r in range(world)], log)
    served = args.get("--served-model-name") or [model]
    cfg = ApiConfig(
        engine=engine,
        version=fs["version"],
        served_names=list(served),
        model_path=str(model),
        max_model_len=runtime.human_int(
            args.get("--max-model-len", config.get("max_position_embeddings", 4096))
        ),
        reasoning_parser=args.get("--reasoning-parser"),
        tool_call_parser=tool_parser,
        auto_tool_choice=bool(args.get("--enable-auto-tool-choice")),
        faults=faults,
        api_keys=_api_keys(fs, args),
        model_format=kimiformat.model_format(config),
        vision=isinstance(config.get("vision_config"), dict) and not args.get("--language-model-only"),
        group_lost=(lambda: (f"node rank {master_rdv.left[0].get('node_rank')} is gone" if master_rdv.left else None))
        if nnodes > 1 else None,
    )
    host = args.get("--host") or "0.0.0.0"
    port = int(args.get("--port", 8000))
    server = ApiServer(cfg, host, port, log)
    log.info(f"Starting vLLM API server 0 on http://{host}:{server.port}", "launcher.py:34")
    log.raw(f"INFO:     Started server process [{os.getpid()}]")
    log.raw("INFO:     Waiting for application startup.")
    server.ready.set()
    log.raw("INFO:     Application startup complete.")
    return runtime.wait_for_signal(log, "vllm serve")


# what decides the compiled graph (the model and its split); not where a node sits in the group
_COMPILE_KEY_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--max-model-len",
                      "--dtype", "--quantization", "--kv-cache-dtype", "--enable-expert-parallel")


def compile_graphs(args: dict, ranks: list[tuple[int, int]], log: runtime.Log) -> list[Path]:
    """torch.compile's cache as vLLM 0.26.0 keeps it (seen on 2x H200, docs/examples/serve-real-multinode/
    cache-group/): VLLM_CACHE_ROOT/torch_compile_cache/<key>/rank_<rank>_<dp rank>/backbone/ for each of this
    node's ranks, one key for every rank of the group. A rank whose directory holds its graph loads it
    ("Directly load the compiled graph(s)"), any other compiles and saves it: a copy of another rank's cache
    gives no hit. --enforce-eager: no torch.compile (vLLM's warning). Returns the rank directories."""
    if args.get("--enforce-eager"):
        log.warning("Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting "
                    "-cc.mode=none -cc.cudagraph_mode=none", "vllm.py:1163")
        return []
    root = Path(os.environ.get("VLLM_CACHE_ROOT") or Path.home() / ".cache" / "vllm")
    factors = {f: args.get(f) for f in ("--served-model-name", *_COMPILE_KEY_FLAGS)}
    key = hashlib.sha256(json.dumps(factors, sort_keys=True, default=str).encode()).hexdigest()[:10]
    t0 = time.monotonic()
    dirs = []
    for rank, dp_rank in ranks:
        d = root / "torch_compile_cache" / key / f"rank_{rank}_{dp_rank}" / "backbone"
        log.info(f"Using cache directory: {d} for vLLM's torch.compile", "backends.py:1094")
        graph = d / "graph.bin"
        if graph.is_file():
            log.info("Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.010 s",
                     "backends.py:292")
        else:
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".graph.{os.getpid()}.tmp"
            tmp.write_bytes(hashlib.sha256(f"{key}/{rank}/{dp_rank}".encode()).digest() * 64)
            os.replace(tmp, graph)
            (d / "cache_key_factors.json").write_text(json.dumps(factors, sort_keys=True, default=str) + "\n")
            log.info("Compiling a graph for compile range (1, 8192) takes 0.01 s", "backends.py:393")
        dirs.append(d)
    log.info(f"torch.compile took {time.monotonic() - t0:.2f} s in total", "monitor.py:53")
    return dirs


def _api_keys(fs: dict, args: dict) -> list[str]:
    """--api-key (one or several) else the catalog's environment variable (vLLM: VLLM_API_KEY)."""
    given = args.get("--api-key")
    if isinstance(given, str):
        given = [given]
    env = fs.get("api_key_env")
    return [k for k in (given or [os.environ.get(env) if env else None]) if k]


def _wait_for_ray(world: int, log: runtime.Log) -> None:
    cluster = _ray_cluster(log)
    if cluster is None:
        runtime.die(
            log,
            "ConnectionError: Could not find any running Ray instance. Please specify the one to "
            "connect to by setting RAY_ADDRESS, or start Ray with `ray start --head`.",
            where="ray_utils.py:1",
        )
    host, port = cluster
    deadline = time.monotonic() + runtime.wait_timeout()
    # ray.init(address=...) keeps retrying the GCS for a while before it gives up
    answer_by = time.monotonic() + runtime.connect_timeout()
    gpus = 0
    while time.monotonic() < deadline:
        status = runtime.query(host, port)
        if status is None:
            if time.monotonic() < answer_by:
                time.sleep(0.5)
                continue
            runtime.die(
                log,
                f"ConnectionError: the Ray cluster at {host}:{port} does not answer "
                f"(retried for {runtime.connect_timeout():.0f} s)",
                where="ray_utils.py:1",
            )
        gpus = sum(int(m.get("gpus", 0)) for m in status.get("members", []))
        if gpus >= world:
            log.info(
                f"Ray cluster at {host}:{port}: {len(status['members'])} node(s), {gpus} GPUs; "
                f"placing {world} workers",
                "ray_utils.py:1",
            )
            return
        time.sleep(0.5)
    runtime.die(
        log,
        f"ValueError: The number of required GPUs exceeds the total number of available GPUs in the "
        f"placement group: Ray cluster at {host}:{port} has {gpus}, TP x PP needs {world}",
        where="ray_utils.py:1",
    )


def _check_local_devices(dp_local, world, devices, log) -> None:
    """The node's DP ranks x world size fit its devices (vLLM's parallel config check)."""
    if world * dp_local > devices:
        runtime.die(
            log,
            f"ValueError: {dp_local} local DP ranks x world size {world} need {world * dp_local} "
            f"GPUs; this node has {devices}",
            where="parallel.py:1",
        )


def _dp_master(args, dp, dp_local, world, devices, log):
    _check_local_devices(dp_local, world, devices, log)
    port = int(args.get("--data-parallel-rpc-port", 29550))
    rdv = runtime.Rendezvous("0.0.0.0", port, log)
    log.info(
        f"Data parallel master listening on tcp://{args.get('--data-parallel-address')}:{port}; "
        f"waiting for {dp - dp_local} remote engine(s)",
        "coordinator.py:1",
    )
    ok = rdv.wait_for(
        lambda ms: dp_local + sum(int(m.get("ranks", 0)) for m in ms) >= dp, runtime.wait_timeout()
    )
    if not ok:
        joined = dp_local + sum(int(m.get("ranks", 0)) for m in rdv.members)
        runtime.die(
            log,
            f"TimeoutError: timed out waiting for data parallel engines: {joined} of {dp} connected",
            where="coordinator.py:1",
        )
    log.info(f"All {dp} data parallel engines connected", "coordinator.py:1")
    return rdv


def _native_local(nnodes: int, world: int, devices: int, log) -> int:
    """Each node of vLLM's own multi-node launch runs world / nnodes ranks on its own GPUs."""
    if world % nnodes != 0:
        runtime.die(
            log,
            f"ValueError: world size {world} (TP x PP) is not divisible by --nnodes {nnodes}",
            where="parallel.py:1",
        )
    local = world // nnodes
    if local > devices:
        runtime.die(
            log,
            f"ValueError: each of the {nnodes} nodes runs {local} of the {world} ranks; this node has "
            f"{devices} GPUs",
            where="parallel.py:1",
        )
    return local


def _local_address(address: str) -> bool:
    """address is one of this node's own (a socket can be bound to it)."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


def _store_error(log, message: str) -> None:
    """Exit as vLLM does when torch.distributed's store (the multi-node rendezvous) fails."""
    runtime.die(log, message, where="parallel_state.py:1")


def _native_master(args, nnodes, tp, pp, world, devices, log):
    """Node rank 0: the torch.distributed store on --master-port (every interface, as TCPStore binds);
    waits until node ranks 1..N-1 have joined, each once, with the same group; --master-addr must be
    this node's own address (its own workers connect to it too)."""
    local = _native_local(nnodes, world, devices, log)
    address = args.get("--master-addr", "127.0.0.1")
    port = int(args.get("--master-port", 29501))
    if not _local_address(address):
        _store_error(log, f"torch.distributed.DistNetworkError: The client socket has failed to connect to any network "
                          f"address of ({address}, {port}): --master-addr {address} is not an address of node rank 0")
    rdv = runtime.Rendezvous("0.0.0.0", port, log)
    log.info(
        f"Multi-node launch: node rank 0 of {nnodes}, ranks 0..{local - 1} of {world} here; master "
        f"tcp://{address}:{port}, waiting for node ranks 1..{nnodes - 1}",
        "parallel_state.py:1",
    )
    ok = rdv.wait_for(lambda ms: len(ms) >= nnodes - 1, runtime.wait_timeout())
    ranks = sorted(int(m.get("node_rank", -1)) for m in rdv.members)
    if not ok:
        _store_error(log, f"torch.distributed.DistStoreError: Timed out after {runtime.wait_timeout():g} s waiting for "
                          f"node ranks of {nnodes}: joined {ranks or 'none'}")
    for m in rdv.members:
        if (int(m.get("nnodes", 0)), int(m.get("world", 0))) != (nnodes, world):
            _store_error(log, f"RuntimeError: node rank {m.get('node_rank')} joined with --nnodes {m.get('nnodes')} and "
                              f"world size {m.get('world')}; node rank 0 has --nnodes {nnodes}, world size {world}")
    if ranks != list(range(1, nnodes)):
        _store_error(log, f"RuntimeError: node ranks {[0, *ranks]} do not cover 0..{nnodes - 1} "
                          f"(each --node-rank once)")
    log.info(f"All {nnodes} nodes joined (TP {tp} x PP {pp} = {world} ranks)", "parallel_state.py:1")
    # a node that dies later is NOT noticed while idle: the real vLLM 0.26.0's node rank 0 stayed up,
    # silent, with /health 200, for the two minutes after node 2's engine was killed (SIGKILL to its
    # process group) on the lent 4x H200 (docs/examples/serve-real-multinode/faults/kill-rank/): an
    # idle engine runs no collective. The next request fails with 500 and the API exits 0 (ApiConfig.
    # group_lost). The loss is the group's to see (llmb-group, the serve role's group check)
    return rdv


def _native_follower(args, nnodes, world, devices, log) -> int:
    """Node rank r > 0: workers only (--headless), joining node rank 0's store at --master-addr."""
    rank = int(args.get("--node-rank", 0))
    if rank >= nnodes:  # vLLM 0.26.0 engine/arg_utils.py, word for word
        runtime.die(log, f"AssertionError: node_rank={rank} must be less than nnodes={nnodes}.",
                    where="arg_utils.py:1987")
    if rank == 0:
        runtime.die(log, f"ValueError: --headless on node rank 0 of --nnodes {nnodes}: node rank 0 runs the API "
                         "server", where="serve.py:1")
    if not args.get("--headless"):
        runtime.die(
            log,
            f"ValueError: node rank {rank} of --nnodes {nnodes} must run with --headless: only node "
            "rank 0 runs the API server",
            where="serve.py:1",
        )
    local = _native_local(nnodes, world, devices, log)
    address = args.get("--master-addr", "127.0.0.1")
    port = int(args.get("--master-port", 29501))
    log.info(
        f"Headless mode: node rank {rank} of {nnodes}, ranks {rank * local}..{rank * local + local - 1} of "
        f"{world}, master tcp://{address}:{port}",
        "serve.py:1",
    )
    timeout = runtime.connect_timeout()
    info = {"node_rank": rank, "nnodes": nnodes, "world": world, "pid": os.getpid()}
    sock = runtime.join(address, port, info, timeout)
    if sock is None:
        _store_error(log, f"torch.distributed.DistNetworkError: The client socket has failed to connect to any network "
                          f"address of ({address}, {port}) within {timeout:g} s (is node rank 0 running, and is "
                          f"{address} its address?)")
    log.info(f"Joined node rank 0 at {address}:{port}", "parallel_state.py:1")
    compile_graphs(args, [(r, 0) for r in range(rank * local, rank * local + local)], log)
    runtime.watch_master(sock, log, f"node rank 0 {address}:{port}")
    return runtime.wait_for_signal(log, "vllm serve --headless")


def _headless(args, dp, dp_local, world, devices, log) -> int:
    address = args.get("--data-parallel-address")
    port = int(args.get("--data-parallel-rpc-port", 29550))
    start = int(args.get("--data-parallel-start-rank", 0))
    if not address:
        runtime.die(
            log, "ValueError: --headless needs --data-parallel-address of the rank 0 node", where="serve.py:1"
        )
    _check_local_devices(dp_local, world, devices, log)
    log.info(
        f"Headless mode: DP ranks {start}..{start + dp_local - 1} of {dp}, master tcp://{address}:{port}",
        "serve.py:1",
    )
    timeout = runtime.connect_timeout()
    sock = runtime.join(address, port, {"start_rank": start, "ranks": dp_local, "pid": os.getpid()}, timeout)
    if sock is None:
        runtime.die(
            log,
            f"RuntimeError: could not connect to the data parallel master at tcp://{address}:{port} "
            f"within {timeout:g} s (is DP rank 0 running, and is {address} reachable from this node?)",
            where="core_client.py:1",
        )
    log.info(f"Connected to the data parallel master at {address}:{port}", "core_client.py:1")
    compile_graphs(args, [(r, d) for d in range(start, start + dp_local) for r in range(world)], log)
    runtime.watch_master(sock, log, f"data parallel master {address}:{port}")
    return runtime.wait_for_signal(log, "vllm serve --headless")


if __name__ == "__main__":
    sys.exit(main())
