"""bandwidth.* checks: a parsed bandwidth probe (nccl-tests, torch-bw) against profile.bandwidth."""

from __future__ import annotations

from .base import _check, _skip


def bandwidth_checks(parsed: dict | None, profile: dict, error: str | None = None) -> list[dict]:
    """Checks from a parsed bandwidth probe (kind nccl-tests or torch-bw) against profile.bandwidth."""
    cfg = profile.get("bandwidth") or {}
    p2p, ar = cfg.get("p2p_gbps"), cfg.get("allreduce_busbw_gbps")
    if p2p is None and ar is None:
        return [_skip("bandwidth", "no thresholds", f"profile {profile.get('name')} sets no bandwidth thresholds")]
    if parsed is None:
        return [_check("bandwidth.probe", False, "nccl-tests all_reduce_perf or a torch probe runs", error or "no output",
                       "install nccl-tests (all_reduce_perf on PATH) or PyTorch with CUDA/ROCm on the node")]
    checks = []
    if parsed.get("kind") == "torch-bw" and p2p is not None:
        for c in parsed.get("copies", []):
            checks.append(_check(f"bandwidth.p2p.GPU{c['src']}-GPU{c['dst']}", c["gbps"] >= p2p, f">= {p2p} GB/s",
                                 f"{c['gbps']:.1f} GB/s",
                                 "device-to-device copies are slow: check the NVLink/XGMI state (links.* checks), "
                                 "P2P support (`nvidia-smi topo -p2p n`) and that no other job uses the GPUs"))
    busbw = parsed.get("avg_busbw_gbps") if parsed.get("kind") == "nccl-tests" else parsed.get("allreduce_busbw_gbps")
    if parsed.get("kind") == "nccl-tests":
        busbw = parsed.get("peak_busbw_gbps") or busbw
    if ar is not None:
        if busbw is None:
            checks.append(_skip("bandwidth.allreduce", f">= {ar} GB/s bus bandwidth", "not measured (one device)"))
        else:
            checks.append(_check("bandwidth.allreduce", busbw >= ar, f">= {ar} GB/s bus bandwidth",
                                 f"{busbw:.1f} GB/s", "all-reduce is slow: check the interconnect checks, NCCL_/RCCL_ "
                                 "environment (NCCL_P2P_DISABLE, NCCL_IB_*), and run nccl-tests with NCCL_DEBUG=INFO"))
    if parsed.get("kind") == "nccl-tests" and parsed.get("out_of_bounds"):
        checks.append(_check("bandwidth.correctness", False, "0 wrong values", f"{parsed['out_of_bounds']} wrong values",
                             "all-reduce returned wrong data: a GPU or link corrupts data; run dcgmi diag -r 3"))
    return checks or [_skip("bandwidth", "measurements", "the probe printed nothing to compare")]
