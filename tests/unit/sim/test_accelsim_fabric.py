"""Verify on simulated nodes: the health checks name the throttled / Xid GPU and the fabric checks
name the host and rail of a rail down, a socket fallback and a slow link, from the simulator's
outputs (accelsim: real formats) through the same parsers and checks the verify stage runs."""

from __future__ import annotations

import os
import socket
import threading
from contextlib import closing

import pytest
from llmb.hw.probes import VENDOR_PROBES
from llmbctl import verify as V
from llmbctl.hw.facts import build_facts
from sim.accelsim import faults, main, profiles
from sim.accelsim.main import Node

PROFILE = "h800-hgx8"
RAILS = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]  # the simulated H800's four NICs


def _sim(host: str, *fault_args: list[str]) -> Node:
    prof = profiles.load(PROFILE)
    fl = [faults.parse(a[0], a[1:]) for a in fault_args]
    for f in fl:
        faults.check(f, prof)
    return Node(prof, fl, host)


def _run(node: Node, tool: str, argv: list[str]) -> tuple[int, str, str]:
    """One simulated tool on `node` (main.run reads the state on disk; this takes the node given)."""
    import importlib

    vendor, module, function = main.HANDLERS[tool]
    res = main.Result()
    getattr(importlib.import_module(f"sim.accelsim.{module}"), function)(node, argv, res)
    return res.rc, "".join(res.out), "".join(res.err)


def _probe_facts(node: Node) -> dict:
    probes = []
    for p in VENDOR_PROBES["nvidia"]:
        if p["argv"] and p["argv"][0] in main.HANDLERS:
            rc, out, err = _run(node, p["argv"][0], p["argv"][1:])
            probes.append({"name": p["name"], "kind": p["kind"], "cmd": " ".join(p["argv"]), "rc": rc,
                           "stdout": out, "stderr": err, "ok_rcs": [0]})
    rc, out, err = _run(node, "dmesg", [])
    probes.append({"name": "kernel-log", "kind": "kernel-log", "cmd": "dmesg", "rc": rc, "stdout": out,
                   "stderr": err, "ok_rcs": [0]})
    return build_facts(probes, "nvidia")


def _failed(checks):
    return {c["id"]: c for c in checks if not c["ok"]}


def test_healthy_simulated_node_passes_every_health_check():
    checks = V.health_checks(_probe_facts(_sim("gpu-a")), V.load_profile(PROFILE))
    ids = {c["id"] for c in checks}
    assert {"health.xid.GPU0", "health.throttle.GPU7", "health.ecc.GPU3", "health.pcie.GPU1",
            "health.nvlink_errors.GPU2"} <= ids
    assert not _failed(checks)


def test_xid_throttle_and_ecc_named_by_gpu():
    node = _sim("gpu-b", ["xid", "gpu=3", "code=79"], ["throttle", "gpu=5", "reason=hw_thermal_slowdown"],
                ["ecc_uncorrectable", "gpu=6", "count=2"], ["link_degraded", "gpu=1", "link=2"])
    bad = _failed(V.health_checks(_probe_facts(node), V.load_profile(PROFILE)))
    assert set(bad) == {"health.xid.GPU3", "health.throttle.GPU5", "health.ecc.GPU6", "health.nvlink_errors.GPU1"}
    assert "Xid 79 (GPU has fallen off the bus)" in bad["health.xid.GPU3"]["found"]
    assert "hw_thermal_slowdown" in bad["health.throttle.GPU5"]["found"]
    assert bad["health.ecc.GPU6"]["found"] == "2 volatile"
    assert bad["health.nvlink_errors.GPU1"]["found"] == "link 2 crc 3"  # replay 12 is under its limit (100)
    line = V.report_lines([{"host": "gpu-b", "checks": [bad["health.xid.GPU3"]]}])[0]
    assert line.startswith("gpu-b: health.xid.GPU3: expected no Xid event since boot on GPU3 (0000:5d:00.0)")


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ibbw(server: Node, client: Node, port_base: int) -> tuple[dict, dict]:
    """Every rail: server on `server`, client from `client` (both on this machine, real TCP)."""
    servers, clients = [], []

    def serve(i, dev):
        rc, out, err = _run(server, "ib_write_bw", ["-d", dev, "-p", str(port_base + i), "--report_gbits", "-D", "1"])
        servers.append({"device": dev, "rc": rc, "output": out + err})

    threads = [threading.Thread(target=serve, args=(i, d)) for i, d in enumerate(RAILS)]
    for t in threads:
        t.start()
    for i, dev in enumerate(RAILS):
        for _ in range(50):
            rc, out, err = _run(client, "ib_write_bw", ["-d", dev, "-p", str(port_base + i), "--report_gbits", "-D", "1",
                                                        "127.0.0.1"])
            if "Couldn't connect" not in err or any(s["device"] == dev for s in servers):
                break
            threading.Event().wait(0.05)
        clients.append({"device": dev, "rc": rc, "output": out + err})
    for t in threads:
        t.join(10)
    return {"host": server.host, "servers": servers, "clients": []}, {"host": client.host, "servers": [], "clients": clients}


def _allreduce(nodes: list[Node], per_node: int = 2) -> str:
    out = []
    size = per_node * len(nodes)
    for n, node in enumerate(nodes):
        for local in range(per_node):
            env = {"OMPI_COMM_WORLD_RANK": str(n * per_node + local), "OMPI_COMM_WORLD_SIZE": str(size),
                   "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node)}
            old = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                out.append(_run(node, "all_reduce_perf", ["-b", "1M", "-e", "1G", "-f", "2", "-g", "1"])[1])
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
    return "".join(out)


@pytest.fixture
def profile():
    return V.load_profile(PROFILE, overrides={"rdma": {"nics": 4}})


def test_rail_down_socket_fallback_and_slow_link_named_by_host_and_rail(profile):
    a = _sim("gpu-a", ["slow_link", "nic=mlx5_2", "gbps=120"])
    b = _sim("gpu-b", ["rail_down", "nic=mlx5_3"], ["socket_fallback"])
    srv_b, cli_a = _ibbw(b, a, _free_port() // 10 * 10 % 60000 + 1000)
    nodes = {"gpu-a": {"hostname": "gpu-a", "rails": RAILS, "next": "gpu-b"},
             "gpu-b": {"hostname": "gpu-b", "rails": RAILS, "next": "gpu-a"}}
    ibbw = {"gpu-a": cli_a, "gpu-b": srv_b}
    out = V.fabric_checks(profile, nodes, ibbw, {"host": "gpu-a", "rc": 0, "output": _allreduce([a, b])})
    bad = {h: _failed(c) for h, c in out.items()}
    # rail down: on the host that owns it, the rail named; its peer's client is skipped, not blamed
    assert "Port number 1 state is Down" in bad["gpu-b"]["fabric.rail.mlx5_3"]["found"]
    assert next(c for c in out["gpu-a"] if c["id"] == "fabric.ib_write_bw.mlx5_3").get("skipped")
    # slow link: the pair and the rate
    slow = bad["gpu-a"]["fabric.ib_write_bw.mlx5_2"]
    assert slow["found"].startswith("117.6 Gb/s") and slow["expected"] == ">= 350 Gb/s to gpu-b mlx5_2"  # fabric.ib_write_bw_gbps of h800-hgx8
    # socket fallback: the host, from NCCL's own lines
    assert bad["gpu-b"]["fabric.transport"]["found"].startswith("socket (network Socket")
    assert "fabric.transport" not in bad["gpu-a"]
    # the slow rail and the socket fallback also pull the all-reduce under 150 GB/s (reported on the launcher)
    assert set(bad["gpu-a"]) == {"fabric.ib_write_bw.mlx5_2", "fabric.allreduce"}
    assert set(bad["gpu-b"]) == {"fabric.rail.mlx5_3", "fabric.transport"}
    # the rails recorded for the plan leave the down rail out
    rec = V.rail_record(nodes, ibbw)
    assert rec["gpu-b"]["llmb_rdma_rails"] == ["mlx5_0", "mlx5_1", "mlx5_2"]


def test_nccl_leaving_a_rail_out_is_named(profile):
    a = _sim("gpu-a", ["rail_down", "nic=mlx5_1"])
    b = _sim("gpu-b")
    nodes = {"gpu-a": {"hostname": "gpu-a", "rails": RAILS, "next": "gpu-b"},
             "gpu-b": {"hostname": "gpu-b", "rails": RAILS, "next": "gpu-a"}}
    out = V.fabric_checks(profile, nodes, None, {"host": "gpu-a", "rc": 0, "output": _allreduce([a, b])})
    bad = {h: _failed(c) for h, c in out.items()}
    assert bad["gpu-a"]["fabric.nccl_rails"]["found"].startswith("missing mlx5_1")
    assert not bad["gpu-b"]
    ar = next(c for c in out["gpu-a"] if c["id"] == "fabric.allreduce")  # 3 of 4 rails: under 150 GB/s
    assert not ar["ok"] and ar["found"].endswith("GB/s peak bus bandwidth, 0 wrong values")


def test_healthy_pair_passes_every_fabric_check(profile):
    a, b = _sim("gpu-a"), _sim("gpu-b")
    nodes = {"gpu-a": {"hostname": "gpu-a", "rails": RAILS, "next": "gpu-b"},
             "gpu-b": {"hostname": "gpu-b", "rails": RAILS, "next": "gpu-a"}}
    srv_b, cli_a = _ibbw(b, a, _free_port() // 10 * 10 % 60000 + 1000)
    out = V.fabric_checks(profile, nodes, {"gpu-a": cli_a, "gpu-b": srv_b},
                          {"host": "gpu-a", "rc": 0, "output": _allreduce([a, b])})
    assert not {h: _failed(c) for h, c in out.items() if _failed(c)}
    ids = {c["id"] for c in out["gpu-a"]}
    assert {"fabric.transport", "fabric.nccl_rails", "fabric.allreduce", "fabric.ib_write_bw.mlx5_0"} <= ids
