"""Simulated cross-node fabric tools: perftest `ib_write_bw`, nccl-tests `all_reduce_perf` (one rank per
process, under the node image's real Open MPI mpirun) and `dmesg` (the kernel log's NVRM / Xid lines).

The outputs follow the real formats: the NCCL_DEBUG=INFO socket lines as the lent H100 printed them
(docs/examples/health-real-h100/all-reduce-perf-1gpu.txt), the NET/IB lines and the ib_write_bw banner
and result table as public nccl-tests / perftest reports show them. Faults (faults.py): `rail_down
nic=` (the port is Down: ib_write_bw refuses the device, NCCL leaves it out), `socket_fallback` (NCCL
finds no IB device: NET/Socket), `slow_link nic= gbps=` (ib_write_bw measures that rate).

ib_write_bw really crosses the simulated network: the server listens on its -p port (TCP), the client
connects to the peer's, and both print the slower side's rate; a server whose rail is down never
listens, so its peer's client cannot connect, as with the real tool.
Limit: each all_reduce_perf rank prints its own rank line and INFO lines (the real rank 0 gathers the
rank lines through MPI); the bandwidth table of rank 0 reflects rank 0's node only.
"""

from __future__ import annotations

import json
import os
import socket
import zlib

from .faults import active

RATE_GBPS = 400  # simulated rail rate when the profile does not say (profile key "rdma_rate_gbps")
SEP = "-" * 87 + "\n"


def _nics(profile: dict) -> list[str]:
    return [n["name"] for n in profile.get("nics", [])]


def _rail_state(node, nic: str) -> tuple[bool, float]:
    """(down, rate Gb/s) of one rail of this node."""
    down = any(f["nic"] == nic for f in active(node.faults, "rail_down"))
    rate = float(node.profile.get("rdma_rate_gbps", RATE_GBPS))
    for f in active(node.faults, "slow_link"):
        if f["nic"] == nic:
            rate = float(f.get("gbps", 100))
    return down, rate


def _opts(argv: list[str]) -> tuple[dict, list[str]]:
    opts: dict = {}
    rest = []
    it = iter(argv)
    for a in it:
        if a in ("-d", "-p", "-D", "-x", "-s", "-q", "-b", "-e", "-f", "-g", "-n", "-w", "-t"):
            opts[a] = next(it, None)
        elif a.startswith("-"):
            opts[a] = True
        else:
            rest.append(a)
    return opts, rest


# --------------------------------------------------------------------------- ib_write_bw


def _banner(dev: str, link: str, gid: int | None) -> str:
    lines = [SEP, "                    RDMA_Write BW Test\n",
             f" Dual-port       : OFF\t\tDevice         : {dev}\n",
             " Number of qps   : 1\t\tTransport type : IB\n",
             " Connection type : RC\t\tUsing SRQ      : OFF\n",
             " PCIe relax order: ON\n", " ibv_wr* API     : ON\n", " TX depth        : 128\n",
             " CQ Moderation   : 1\n", " Mtu             : 4096[B]\n", f" Link type       : {link}\n"]
    if link == "Ethernet":
        lines.append(f" GID index       : {gid if gid is not None else 3}\n")
    lines += [" Max inline data : 0[B]\n", " rdma_cm QPs\t : OFF\n", " Data ex. method : Ethernet\n", SEP]
    return "".join(lines)


def _result(gbps: float, seconds: int) -> str:
    msg = 65536
    iters = int(gbps * 1e9 / 8 / msg * seconds)
    return (f" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" {msg:<10} {iters:<16} {gbps + 0.03:<18.2f} {gbps:<6.2f}\t\t   {gbps * 1e9 / 8 / msg / 1e6:.6f}\n"
            + SEP)


def ib_write_bw_main(node, argv: list[str], result) -> None:
    opts, rest = _opts(argv)
    dev = opts.get("-d") or (_nics(node.profile) or ["mlx5_0"])[0]
    port = int(opts.get("-p") or 18515)
    seconds = int(opts.get("-D") or 5)
    gid = int(opts["-x"]) if opts.get("-x") is not None else None
    link = node.profile.get("rdma_link_layer", "IB")
    if dev not in _nics(node.profile):
        result.fail(1, f" IB device {dev} not found\n Unable to find the Infiniband/RoCE device")
        return
    down, rate = _rail_state(node, dev)
    if down:
        result.fail(1, " Port number 1 state is Down\n Couldn't set the link layer\n Couldn't get context for the device")
        return
    mine = json.dumps({"host": node.host, "dev": dev, "rate": rate}).encode() + b"\n"
    deadline = seconds + 60
    if not rest:  # server: one client, then exit
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(("0.0.0.0", port))
        except OSError as exc:
            result.fail(1, f" Couldn't bind to port {port}: {exc}\n Unable to open file descriptor for socket connection")
            return
        srv.listen(1)
        srv.settimeout(deadline)
        result.write("\n************************************\n* Waiting for client to connect... *\n"
                     "************************************\n")
        try:
            conn, _ = srv.accept()
        except OSError:
            result.fail(1, " Couldn't accept a client: timed out")
            return
        finally:
            srv.close()
        with conn:
            conn.settimeout(deadline)
            peer = json.loads(conn.makefile("rb").readline() or b"{}")
            conn.sendall(mine)
        gbps = min(rate, float(peer.get("rate", rate))) * 0.98
        result.write(_banner(dev, link, gid) + _result(gbps, seconds))
        return
    host = rest[0]
    try:
        conn = socket.create_connection((host, port), timeout=5)
    except OSError:
        result.fail(1, f"Couldn't connect to {host}:{port}\n Unable to open file descriptor for socket connection"
                       " Unable to init the socket connection")
        return
    with conn:
        conn.settimeout(deadline)
        conn.sendall(mine)
        peer = json.loads(conn.makefile("rb").readline() or b"{}")
    gbps = min(rate, float(peer.get("rate", rate))) * 0.98
    result.write(_banner(dev, link, gid) + _result(gbps, seconds))


# --------------------------------------------------------------------------- all_reduce_perf


def _size(text: str | None, default: int) -> int:
    if not text:
        return default
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KMGkmg")) * mult


def all_reduce_perf_main(node, argv: list[str], result) -> None:
    opts, _ = _opts(argv)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    host = node.host
    pid = os.getpid()
    gpus = node.profile.get("gpus") or [{"bus_id": "00000000:00:00.0"}]
    bus = gpus[local % len(gpus)]["bus_id"]
    model = node.profile.get("device_spec", {}).get("name", "GPU")
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        addr = "192.0.2.1"
    fallback = bool(active(node.faults, "socket_fallback"))
    rails = [(i, n) for i, n in enumerate(_nics(node.profile)) if not _rail_state(node, n)[0]]
    pre = f"{host}:{pid}:{pid} [{local}] NCCL INFO "
    out = []
    if rank == 0:
        minb, maxb = _size(opts.get("-b"), 8), _size(opts.get("-e"), 1 << 27)
        out += ["# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809 (simulated by accelsim)\n",
                "# Collective test starting: all_reduce_perf\n",
                f"# nThread 1 nGpus 1 minBytes {minb} maxBytes {maxb} step: 2(factor) warmup iters: 1 iters: 20 "
                "agg iters: 1 validation: 1 graph: 0 unalign: 0\n", "#\n", "# Using devices\n"]
    out.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {local:2d} [{bus[4:8]}:{bus[9:11]}:{bus[12:14]}] {model}\n")
    out.append(pre + "NCCL version 2.28.9+cuda13.0\n")
    out.append(pre + "NET/Plugin: Could not find: libnccl-net.so\n")
    if fallback or not rails:
        out.append(pre + "NET/IB : No device found.\n")
        out.append(pre + "Failed to initialize NET plugin IB\n")
        out.append(pre + f"NET/Socket : Using [0]eth0:{addr}<0>\n")
        out.append(pre + "Using network Socket\n")
    else:
        link = "RoCE" if node.profile.get("rdma_link_layer") == "Ethernet" else "IB"
        devs = " ".join(f"[{j}]{n}:1/{link}" for j, (_, n) in enumerate(rails))
        out.append(pre + f"NET/IB : Using {devs} [RO]; OOB eth0:{addr}<0>\n")
        out.append(pre + "Using network IB\n")
    out.append(pre + f"ncclCommInitRankConfig comm 0x5600000{rank:04x} rank {rank} nranks {size} cudaDev {local} - Init START\n")
    if size > 1:
        peer = (rank + 1) % size
        if fallback or not rails:
            via = "NET/Socket/0"
        else:
            via = f"NET/IB/{local % len(rails)}/GDRDMA"
        for ch in range(2):
            out.append(pre + f"Channel {ch:02d}/0 : {rank}[{local}] -> {peer}[{local}] [send] via {via}\n")
    out.append(pre + f"ncclCommInitRankConfig comm 0x5600000{rank:04x} rank {rank} nranks {size} cudaDev {local} - Init COMPLETE\n")
    if rank == 0:
        rate = float(node.profile.get("rdma_rate_gbps", RATE_GBPS))
        per_node = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", str(len(gpus))))
        nodes = max(1, size // max(1, per_node))
        if nodes > 1 and not (fallback or not rails):
            peak = 0.95 * len(rails) * rate / 8 * min(_rail_state(node, n)[1] for _, n in rails) / rate
        elif nodes > 1:
            peak = 1.1
        else:
            peak = 300.0
        out += ["#\n", "#                                                              out-of-place                       "
                "in-place          \n",
                "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
                "busbw  #wrong \n",
                "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  "
                "(GB/s)         \n"]
        n = max(2, size)
        sizes = []
        s = minb
        while s <= maxb:
            sizes.append(s)
            s *= 2
        total = 0.0
        for s in sizes:
            busbw = peak * s / (s + (1 << 22))
            algbw = busbw * n / (2 * (n - 1))
            us = s / (algbw * 1e3) if algbw else 0.0
            total += busbw
            row = f"{s:12d}  {s // 4:12d}     float     sum      -1  {us:7.2f}  {algbw:6.2f}  {busbw:6.2f}       0"
            out.append(row + f"  {us:7.2f}  {algbw:6.2f}  {busbw:6.2f}       0\n")
        out += ["# Out of bounds values : 0 OK\n", f"# Avg bus bandwidth    : {total / max(1, len(sizes)):.3f} \n", "#\n"]
    result.write("".join(out))


# --------------------------------------------------------------------------- ibstat


def ibstat_main(node, argv: list[str], result) -> None:
    """`ibstat`: one CA block per profile NIC (the format of the public ConnectX-7 capture); a rail that
    is down shows State Down / Physical state Disabled."""
    link = "Ethernet" if node.profile.get("rdma_link_layer") == "Ethernet" else "InfiniBand"
    rate = int(node.profile.get("rdma_rate_gbps", RATE_GBPS))
    nics = _nics(node.profile)
    if argv:
        nics = [n for n in nics if n == argv[0]]
        if not nics:
            result.fail(255, f"ibpanic: [{os.getpid()}] main: '{argv[0]}' IB device can't be found: No such file or directory")
            return
    aborted = {f["nic"] for f in node.faults if f.get("kind") == "ibstat_abort"}
    out = []
    for i, name in enumerate(nics):
        if name in aborted:
            # ibstat stops at the device it cannot stat (umad_get_ca fails): what came before is printed
            result.write("".join(out))
            result.fail(255, f"ibpanic: [{os.getpid()}] main: stat of IB device '{name}' failed: No such file or directory")
            return
        down = _rail_state(node, name)[0]
        guid = f"0x946dae0300{zlib.crc32(f'{node.host}/{name}'.encode()) % 0xFFFFFF:06x}"
        out += [f"CA '{name}'\n", "\tCA type: MT4129\n", "\tNumber of ports: 1\n", "\tFirmware version: 28.39.1002\n",
                "\tHardware version: 0\n", f"\tNode GUID: {guid}\n", f"\tSystem image GUID: {guid}\n", "\tPort 1:\n",
                f"\t\tState: {'Down' if down else 'Active'}\n", f"\t\tPhysical state: {'Disabled' if down else 'LinkUp'}\n",
                f"\t\tRate: {rate}\n", f"\t\tBase lid: {0 if link == 'Ethernet' else 70 + i}\n", "\t\tLMC: 0\n",
                f"\t\tSM lid: {0 if link == 'Ethernet' else 334}\n", "\t\tCapability mask: 0xa751e848\n",
                f"\t\tPort GUID: {guid}\n", f"\t\tLink layer: {link}\n"]
    result.write("".join(out))


# --------------------------------------------------------------------------- dmesg


def dmesg_main(node, argv: list[str], result) -> None:
    if node.profile["vendor"] == "nvidia":
        from . import nvidia
        from .state import fabricmanager_alive

        model = nvidia.build(node.profile, node.faults, node.host, fabricmanager_alive())
        result.write(nvidia.render_kernel_log(model, node.faults, node.host))
    else:
        result.write("[    0.000000] Linux version 6.1.0-accelsim (simulated kernel log)\n")
