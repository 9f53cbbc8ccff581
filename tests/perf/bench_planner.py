#!/usr/bin/env python3
"""Benchmark: plan a 1,000-node inventory; print the time and its ratio to the 2 s budget.

    .venv/bin/python tests/perf/bench_planner.py [--nodes 1000] [--repeat 3]

Shapes: vLLM DP + EP with one DP master and 999 headless nodes (8 ranks each), and SGLang with
1,000 node ranks. The inventory is built in memory the way scripts/launch-plan hands it to the
planner (hostvars with group_vars merged, groups); the time covers validation, planning and the
JSON-ready dict. Prints figures only; it never fails on time (machines differ).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from llmbctl.planner import plan_inventory  # noqa: E402

BUDGET_S = 2.0


def inventory(nodes: int, shape: str) -> tuple[dict, dict]:
    common = {
        "llmb_platform": "h800-hgx8",
        "llmb_model": "kimi-k2-instruct",
        "llmb_install": "host",
        "llmb_model_dir": "/data/models/Kimi-K2-Instruct",
        "llmb_cluster_iface": "ens7f0np0",
        "llmb_engine_args": {"max-num-seqs": 256},
        "llmb_preset": "high-throughput",
    }
    if shape == "vllm-dp-ep":
        common.update(
            llmb_engine="vllm",
            llmb_engine_version="0.19.1",
            llmb_tensor_parallel=1,
            llmb_data_parallel=8 * nodes,
            llmb_data_parallel_local=8,
            llmb_expert_parallel=True,
        )
    else:
        common.update(
            llmb_engine="sglang",
            llmb_engine_version="0.5.5",
            # TP over every device with DP attention (attention TP 1): a TP of 8 x nodes alone would not
            # divide Kimi-K2's 64 heads past 8 nodes, which the planner refuses (SGLang would at start)
            llmb_tensor_parallel=8 * nodes,
            llmb_data_parallel=8 * nodes,
            llmb_engine_args={"max-running-requests": 256, "enable-dp-attention": True},
        )
    names = [f"gpu-{i:04d}" for i in range(nodes)]
    hostvars = {}
    for i, name in enumerate(names):
        hv = json.loads(json.dumps(common))  # every host has its own copy, as Ansible gives them
        hv.update(
            ansible_host=f"10.{i // 65536}.{(i // 256) % 256}.{i % 256 + 1}",
            llmb_node_ip=f"172.{16 + i // 65536}.{(i // 256) % 256}.{i % 256}",
        )
        hostvars[name] = hv
    return hostvars, {"all": names, "accel_nodes": names, "ungrouped": []}


def _through_inventory_files(nodes: int) -> tuple[float, float, int]:
    import importlib.machinery
    import importlib.util
    import tempfile

    import yaml

    hv, groups = inventory(nodes, "vllm-dp-ep")
    loader = importlib.machinery.SourceFileLoader("launch_plan", str(ROOT / "scripts" / "launch-plan"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    script = importlib.util.module_from_spec(spec)
    loader.exec_module(script)
    with tempfile.TemporaryDirectory() as tmp:
        inv = Path(tmp)
        (inv / "group_vars" / "all").mkdir(parents=True)
        shared = {
            k: v for k, v in hv[groups["accel_nodes"][0]].items() if k not in ("ansible_host", "llmb_node_ip")
        }
        (inv / "group_vars" / "all" / "llmb.yml").write_text(yaml.safe_dump(shared))
        hosts = {
            n: {"ansible_host": v["ansible_host"], "llmb_node_ip": v["llmb_node_ip"]} for n, v in hv.items()
        }
        (inv / "hosts.yml").write_text(
            yaml.safe_dump({"all": {"children": {"accel_nodes": {"hosts": hosts}}}})
        )
        t0 = time.perf_counter()
        read_hv, read_groups = script.load_inventory(str(inv))
        t1 = time.perf_counter()
        planned = plan_inventory(read_hv, read_groups, str(ROOT / "data"))
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, len(planned.hosts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--with-inventory",
        action="store_true",
        help="also write the inventory as files and read it the way scripts/launch-plan does",
    )
    args = ap.parse_args()
    # warm the data cache once (4 nodes: Kimi-K2 fits no fewer than 20 H800s, the planner checks)
    plan_inventory(*inventory(4, "vllm-dp-ep"), str(ROOT / "data"))
    print(f"planning a {args.nodes}-node inventory (best of {args.repeat}); budget {BUDGET_S:.1f} s")
    worst = 0.0
    for shape in ("vllm-dp-ep", "sglang-tp"):
        hv, groups = inventory(args.nodes, shape)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            planned = plan_inventory(hv, groups, str(ROOT / "data"))
            hosts = planned.to_list()
            times.append(time.perf_counter() - t0)
        services = sum(len(h["services"]) for h in hosts)
        best = min(times)
        worst = max(worst, best)
        print(
            f"  {shape:11s} {len(hosts)} hosts, {services} services: {best:.3f} s  "
            f"(ratio to budget {best / BUDGET_S:.2f}; {1000 * best / len(hosts):.2f} ms per host)"
        )
    if args.with_inventory:
        t_read, t_plan, n = _through_inventory_files(args.nodes)
        print(
            f"  via scripts/launch-plan's reader: {n} hosts read by ansible's InventoryManager in {t_read:.3f} s, "
            f"planned in {t_plan:.3f} s (planning ratio to budget {t_plan / BUDGET_S:.2f})"
        )
    verdict = "within" if worst <= BUDGET_S else "OVER"
    print(
        f"slowest shape {worst:.3f} s = {worst / BUDGET_S:.2f} x the {BUDGET_S:.0f} s budget ({verdict} budget)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
