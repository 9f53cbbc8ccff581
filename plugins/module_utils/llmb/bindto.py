"""Build the llmb-bindto preload on a node and prove it works there (runs on nodes: stdlib, 3.9+).

The library (roles/serve/files/llmb-bindto.c) moves the wildcard listeners of the ports in
LLMB_BIND_PORTS onto LLMB_BIND_ADDRESS; the planner gives it to the services whose engine binds every
interface with no option (llmb.ports.BINDS, kind "preload"). ``ensure`` builds it with the node's C
compiler into a temporary file beside the destination, loads it into a child Python that binds
0.0.0.0 and must find itself on 127.0.0.1, and only then renames it into place, with a stamp of the
source and flags beside it: a re-run with the same source changes nothing, a crash leaves the old
library whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile

FLAGS = ["-O2", "-shared", "-fPIC", "-fno-stack-protector", "-Wall"]
COMPILERS = ("cc", "gcc", "clang")

# the child: binds a listed port on 0.0.0.0 (IPv4) and on :: (dual stack), prints where each landed
SELF_TEST = (
    "import socket,sys\n"
    "p=int(sys.argv[1]);q=int(sys.argv[2])\n"
    "a=socket.socket();a.bind(('0.0.0.0',p))\n"
    "b=socket.socket(socket.AF_INET6)\n"
    "b.setsockopt(socket.IPPROTO_IPV6,socket.IPV6_V6ONLY,0)\n"
    "b.bind(('::',q))\n"
    "print(a.getsockname()[0],b.getsockname()[0])\n"
)


class BindtoError(Exception):
    """The library cannot be built or does not work on this node (message says what to do)."""


def stamp_of(source: str) -> str:
    return hashlib.sha256("\0".join([source, *FLAGS]).encode()).hexdigest()


def current(dest: str) -> str | None:
    """The stamp of the library in place (None when it or its stamp is missing)."""
    if not os.path.isfile(dest):
        return None
    try:
        with open(dest + ".sha256", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def compiler(candidates: tuple[str, ...] = COMPILERS) -> str:
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    raise BindtoError(
        "no C compiler (cc, gcc or clang) on this node to build the llmb-bindto preload, which binds Ray's "
        "GCS and the torch.distributed store to the cluster address: install one (Debian/Ubuntu: apt-get "
        "install gcc libc6-dev; RHEL: dnf install gcc glibc-devel), or set llmb_confine_listeners: false to "
        "leave those listeners on every interface (docs/ports.md)"
    )


def _free_ports(n: int) -> list[int]:
    socks, out = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            out.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return out


def self_test(lib: str, python: str = sys.executable, timeout: float = 30.0) -> None:
    """Load lib into a child Python that binds two listed ports on every interface: both must land on
    127.0.0.1 (the IPv6 one in its IPv4-mapped form). Raises BindtoError saying what was found."""
    p, q = _free_ports(2)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_PRELOAD": lib,
           "LLMB_BIND_ADDRESS": "127.0.0.1", "LLMB_BIND_PORTS": f"{p},{q}"}
    try:
        out = subprocess.run([python, "-c", SELF_TEST, str(p), str(q)], env=env, capture_output=True,
                             text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BindtoError(f"the llmb-bindto self-test could not run {python}: {exc}") from None
    found = out.stdout.split()
    if out.returncode != 0 or found != ["127.0.0.1", "::ffff:127.0.0.1"]:
        detail = (out.stderr.strip().splitlines() or [""])[-1]
        raise BindtoError(
            "the llmb-bindto preload built here does not confine a listener: a child binding 0.0.0.0 and :: "
            f"with it loaded expected 127.0.0.1 and ::ffff:127.0.0.1, found {' '.join(found) or 'nothing'}"
            + (f" ({detail})" if detail else "")
        )


def ensure(source: str, dest: str, check: bool = False, cc: str | None = None) -> dict:
    """Build the library at dest from source unless the same build is there; returns
    {changed, path, stamp, compiler}. Check mode reports what a run would do and builds nothing."""
    want = stamp_of(source)
    if current(dest) == want:
        return {"changed": False, "path": dest, "stamp": want, "compiler": None}
    cc = cc or compiler()
    if check:
        return {"changed": True, "path": dest, "stamp": want, "compiler": cc}
    parent = os.path.dirname(dest) or "."
    os.makedirs(parent, mode=0o755, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".llmb-bindto.") as tmp:
        src = os.path.join(tmp, "llmb-bindto.c")
        lib = os.path.join(tmp, "llmb-bindto.so")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(source)
        try:
            out = subprocess.run([cc, *FLAGS, "-o", lib, src], capture_output=True, text=True, timeout=300,
                                 check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BindtoError(f"{cc} could not build the llmb-bindto preload: {exc}") from None
        if out.returncode != 0:
            tail = " | ".join(out.stderr.strip().splitlines()[-4:])
            raise BindtoError(f"{cc} failed to build the llmb-bindto preload (exit {out.returncode}): {tail}; "
                              "is libc's development package installed (libc6-dev / glibc-devel)?")
        os.chmod(lib, 0o755)
        self_test(lib)
        stamp = os.path.join(tmp, "stamp")
        with open(stamp, "w", encoding="ascii") as fh:
            fh.write(want + "\n")
        os.replace(lib, dest)  # the library first: a stamp never vouches for a library not in place
        os.replace(stamp, dest + ".sha256")
    return {"changed": True, "path": dest, "stamp": want, "compiler": cc}
