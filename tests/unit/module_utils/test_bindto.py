"""The llmb-bindto preload (roles/serve/files/llmb-bindto.c), built with this machine's C compiler and
loaded into real child processes that bind real sockets; and llmb.bindto, which builds it on a node."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from llmb import bindto

ROOT = Path(__file__).resolve().parents[3]
SOURCE = (ROOT / "roles" / "serve" / "files" / "llmb-bindto.c").read_text()

pytestmark = pytest.mark.skipif(not any(bindto.shutil.which(c) for c in bindto.COMPILERS),
                                reason="no C compiler (make unit on CI installs gcc)")

# binds each "family|address|port" it is given, prints where each landed or the error
CHILD = r"""
import socket, sys
for spec in sys.argv[1:]:
    fam, host, port = spec.split("|")
    if fam == "4":
        s = socket.socket()
    else:
        s = socket.socket(socket.AF_INET6)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if fam == "6only" else 0)
    try:
        s.bind((host, int(port)))
        s.listen()
        print(s.getsockname()[0])
    except OSError as exc:
        print("error", exc.errno)
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> str:
    dest = tmp_path_factory.mktemp("bindto") / "llmb-bindto.so"
    bindto.ensure(SOURCE, str(dest))
    return str(dest)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bind_in_child(lib: str | None, specs: list[str], **env: str) -> tuple[list[str], str]:
    e = {"PATH": os.environ["PATH"], **env}
    if lib:
        e["LD_PRELOAD"] = lib
    out = subprocess.run([sys.executable, "-c", CHILD, *specs], env=e, capture_output=True, text=True,
                         timeout=30, check=True)
    return out.stdout.split("\n")[:-1], out.stderr


def test_a_listed_port_bound_to_every_interface_lands_on_the_address(lib):
    p, q = free_port(), free_port()
    got, err = bind_in_child(lib, [f"4|0.0.0.0|{p}", f"6|::|{q}"],
                             LLMB_BIND_ADDRESS="127.0.0.2", LLMB_BIND_PORTS=f"{p},{q}")
    assert got == ["127.0.0.2", "::ffff:127.0.0.2"] and err == ""


def test_without_the_library_the_same_binds_take_every_interface():  # the test sees the difference
    p, q = free_port(), free_port()
    got, _ = bind_in_child(None, [f"4|0.0.0.0|{p}", f"6|::|{q}"])
    assert got == ["0.0.0.0", "::"]


def test_other_ports_explicit_addresses_and_ephemeral_ports_are_left_alone(lib):
    listed, other, explicit = free_port(), free_port(), free_port()
    got, err = bind_in_child(lib, [f"4|0.0.0.0|{other}", f"4|127.0.0.3|{explicit}", "4|0.0.0.0|0"],
                             LLMB_BIND_ADDRESS="127.0.0.2", LLMB_BIND_PORTS=f"{listed},{explicit}")
    assert got == ["0.0.0.0", "127.0.0.3", "0.0.0.0"] and err == ""


def test_loaded_without_a_port_list_it_changes_nothing(lib):
    p = free_port()
    got, err = bind_in_child(lib, [f"4|0.0.0.0|{p}"], LLMB_BIND_ADDRESS="127.0.0.2")
    assert got == ["0.0.0.0"] and err == ""


def test_an_ipv6_address_is_used_on_ipv6_sockets_and_refused_on_ipv4_ones(lib):
    p, q = free_port(), free_port()
    got, err = bind_in_child(lib, [f"6|::|{p}", f"4|0.0.0.0|{q}"], LLMB_BIND_ADDRESS="::1",
                             LLMB_BIND_PORTS=f"{p},{q}")
    assert got == ["::1", "error 99"]
    assert f"port {q} not bound to every interface: LLMB_BIND_ADDRESS is IPv6 and the socket is IPv4" in err


@pytest.mark.parametrize(
    "env, why",
    [
        ({"LLMB_BIND_ADDRESS": "node1.cluster"}, "LLMB_BIND_ADDRESS is not an IP address"),
        ({}, "LLMB_BIND_ADDRESS is not set"),
        ({"LLMB_BIND_ADDRESS": "127.0.0.2", "LLMB_BIND_PORTS": "6379,x"}, "LLMB_BIND_PORTS is not a comma"),
        ({"LLMB_BIND_ADDRESS": "127.0.0.2", "LLMB_BIND_PORTS": "70000"}, "LLMB_BIND_PORTS is not a comma"),
    ],
)
def test_it_fails_closed_with_one_line_naming_the_variable(lib, env, why):
    p = free_port()
    env = {"LLMB_BIND_PORTS": str(p), **env}
    got, err = bind_in_child(lib, [f"4|0.0.0.0|{p}"], **env)
    assert got == ["error 99"]  # EADDRNOTAVAIL: never every interface
    assert err.startswith(f"llmb-bindto: port {p} not bound to every interface: {why}")


def test_an_ipv6_only_socket_cannot_take_an_ipv4_address_and_is_refused(lib):
    p = free_port()
    got, err = bind_in_child(lib, [f"6only|::|{p}"], LLMB_BIND_ADDRESS="127.0.0.2", LLMB_BIND_PORTS=str(p))
    assert got == ["error 99"] and "the socket is IPv6-only and LLMB_BIND_ADDRESS is IPv4" in err


def test_a_confined_listener_is_reached_on_its_address_and_not_on_another(lib):
    p = free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", "import socket,sys,time\ns=socket.socket();s.bind(('0.0.0.0',int(sys.argv[1])));"
         "s.listen();print('up',flush=True);time.sleep(30)", str(p)],
        env={"PATH": os.environ["PATH"], "LD_PRELOAD": lib, "LLMB_BIND_ADDRESS": "127.0.0.2",
             "LLMB_BIND_PORTS": str(p)}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        socket.create_connection(("127.0.0.2", p), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p), timeout=5)
    finally:
        child.kill()
        child.wait()


# ------------------------------------------------------------------ llmb.bindto: the build on a node
def test_ensure_builds_once_and_a_rerun_changes_nothing(tmp_path):
    dest = tmp_path / "lib" / "llmb-bindto.so"
    first = bindto.ensure(SOURCE, str(dest))
    assert first["changed"] and dest.is_file() and first["compiler"]
    assert (tmp_path / "lib" / "llmb-bindto.so.sha256").read_text().strip() == bindto.stamp_of(SOURCE)
    mtime = dest.stat().st_mtime_ns
    again = bindto.ensure(SOURCE, str(dest))
    assert not again["changed"] and dest.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in dest.parent.iterdir()) == ["llmb-bindto.so", "llmb-bindto.so.sha256"]


def test_check_mode_says_a_build_would_happen_and_builds_nothing(tmp_path):
    dest = tmp_path / "llmb-bindto.so"
    out = bindto.ensure(SOURCE, str(dest), check=True)
    assert out["changed"] and not dest.exists()


def test_a_changed_source_is_rebuilt(tmp_path):
    dest = tmp_path / "llmb-bindto.so"
    bindto.ensure(SOURCE, str(dest))
    assert bindto.ensure(SOURCE + "\n/* v2 */\n", str(dest))["changed"]


def test_no_compiler_is_refused_with_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(bindto.shutil, "which", lambda name: None)
    with pytest.raises(bindto.BindtoError, match=r"no C compiler.*apt-get install gcc libc6-dev.*llmb_confine_listeners: false"):
        bindto.ensure(SOURCE, str(tmp_path / "x.so"))


def test_a_failed_build_leaves_the_library_in_place_whole(tmp_path):
    dest = tmp_path / "llmb-bindto.so"
    bindto.ensure(SOURCE, str(dest))
    before = dest.read_bytes()
    with pytest.raises(bindto.BindtoError, match=r"failed to build the llmb-bindto preload \(exit 1\)"):
        bindto.ensure("this is not C", str(dest))
    assert dest.read_bytes() == before and bindto.current(str(dest)) == bindto.stamp_of(SOURCE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llmb-bindto.so", "llmb-bindto.so.sha256"]


def test_a_library_that_does_not_confine_is_never_put_in_place(tmp_path):
    dest = tmp_path / "llmb-bindto.so"
    with pytest.raises(bindto.BindtoError, match=r"expected 127.0.0.1 and ::ffff:127.0.0.1, found 0.0.0.0 ::"):
        bindto.ensure("int llmb_nothing(void) { return 0; }\n", str(dest))
    assert not dest.exists() and not (tmp_path / "llmb-bindto.so.sha256").exists()
