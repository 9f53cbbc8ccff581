#!/usr/bin/env python3
"""Bandwidth probe of the verify role (tag `bandwidth`), run on the node.

nccl-tests' all_reduce_perf when it is on PATH (its output is printed unchanged); otherwise a short
torch probe printing 'gpuA->gpuB GB/s X' for a ring of device-to-device copies and
'allreduce busbw GB/s Y' for an all-reduce over NCCL/RCCL (one process per device). Exit status 3
when neither exists. The controller parses the output (llmb.hw kinds nccl-tests / torch-bw).
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time


def device_count_from_smi():
    for tool, args in (("nvidia-smi", ["-L"]), ("amd-smi", ["list"])):
        exe = shutil.which(tool)
        if exe:
            try:
                out = subprocess.run([exe] + args, capture_output=True, text=True, timeout=60, check=False).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            n = sum(1 for ln in out.splitlines() if ln.startswith("GPU"))
            if n:
                return n
    return 0


def nccl_tests(exe, size_mb, timeout):
    n = device_count_from_smi()
    if n < 2:
        print(f"all_reduce_perf found at {exe} but fewer than 2 devices are visible", file=sys.stderr)
        return 3
    lo = max(1, size_mb // 4)
    argv = [exe, "-b", f"{lo}M", "-e", f"{size_mb}M", "-f", "2", "-g", str(n), "-w", "5", "-n", "20"]
    print("# command: " + " ".join(argv), flush=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-4000:])
    return proc.returncode


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _allreduce_worker(rank, world, port, numel, iters, queue):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x = torch.ones(numel, dtype=torch.float32, device=f"cuda:{rank}")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / iters
    if rank == 0:
        algbw = numel * 4 / dt / 1e9
        queue.put(algbw * 2 * (world - 1) / world)
    dist.destroy_process_group()


def torch_probe(size_mb, iters):
    try:
        import torch
    except ImportError:
        print("no all_reduce_perf on PATH and no torch for this interpreter: nothing measures bandwidth "
              "(install nccl-tests, or set verify_bandwidth_python to a python with torch)", file=sys.stderr)
        return 3
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        print("torch sees no GPU", file=sys.stderr)
        return 3
    n = torch.cuda.device_count()
    nbytes = size_mb << 20
    if n == 1:
        print("one device: no device-to-device path to measure", file=sys.stderr)
    for i in range(n if n > 1 else 0):
        j = (i + 1) % n
        a = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}")
        b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{j}")
        for _ in range(3):
            b.copy_(a)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
        t = time.perf_counter()
        for _ in range(iters):
            b.copy_(a)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
        dt = time.perf_counter() - t
        print(f"gpu{i}->gpu{j} GB/s {iters * nbytes / dt / 1e9:.1f}", flush=True)
        del a, b
        torch.cuda.empty_cache()
    if n > 1:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        mp.start_processes(_allreduce_worker, args=(n, _free_port(), nbytes // 4, iters, queue), nprocs=n,
                           join=True, start_method="spawn")
        print(f"allreduce busbw GB/s {queue.get():.1f}", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--nccl-tests", default=os.environ.get("LLMB_ALL_REDUCE_PERF"))
    args = ap.parse_args()
    exe = args.nccl_tests or shutil.which("all_reduce_perf")
    if exe:
        return nccl_tests(exe, args.size_mb, args.timeout)
    return torch_probe(args.size_mb, args.iters)


if __name__ == "__main__":
    sys.exit(main())
