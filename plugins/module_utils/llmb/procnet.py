"""TCP sockets and the processes holding them, read from /proc (runs on nodes: stdlib only).

Shared by the ssh_mesh stage (who listens on the container sshd's port) and the serve stage
(whether a rank holds its connection to the master)."""

from __future__ import annotations

import ipaddress
import os
import struct

TCP_ESTABLISHED = "01"
TCP_LISTEN = "0A"


def addr(text: str) -> tuple[str, int]:
    """'0B00A8C0:18EB' (/proc/net/tcp, little-endian words) -> ('192.168.0.11', 6379); IPv6 too."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(struct.pack("<I", w) for w in struct.unpack(f">{len(raw) // 4}I", raw))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def rows(text: str, state: str) -> list[tuple[str, str, int]]:
    """(local address, remote address, socket inode) of the sockets in `state` in /proc/net/tcp{,6}
    text; addresses still in the kernel's hex form (see addr)."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or f[3] != state:
            continue
        try:
            out.append((f[1], f[2], int(f[9])))
        except ValueError:
            continue
    return out


def read_tables(net_dir: str) -> list[str]:
    """The texts of <net_dir>/tcp and tcp6 that can be read."""
    out = []
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(net_dir, name), encoding="ascii", errors="replace") as fh:
                out.append(fh.read())
        except OSError:
            continue
    return out


def socket_inodes(proc: str, pid: int) -> set[int]:
    """Inodes of the sockets process pid has open (empty when it cannot be read)."""
    fd_dir = os.path.join(proc, str(pid), "fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return set()
    out: set[int] = set()
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out
