"""llmb.weights.relay: the relay sender's transient unit, started in one call (stop stale, start, wait)."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from llmb.weights import relay


class FakeRun:
    """Records every argv; answers with the return codes given per command name."""

    def __init__(self, rcs: dict[str, int] | None = None):
        self.calls: list[list[str]] = []
        self.rcs = rcs or {}

    def __call__(self, argv):
        self.calls.append(list(argv))
        rc = self.rcs.get(argv[0], 0)
        return subprocess.CompletedProcess(argv, rc, stdout="", stderr=f"{argv[0]} said no" if rc else "")


def test_unit_argv_is_unprivileged_read_only_and_bound():
    argv = relay.unit_argv(18090, "10.0.0.11", "/opt/llmb/models/kimi")
    assert argv[:3] == ["systemd-run", "--unit=llmb-weights-relay", "--collect"]
    for prop in ("DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes"):
        assert f"--property={prop}" in argv
    assert argv[argv.index("-c") - 1:] == ["/usr/bin/python3", "-c", relay.SERVER_SOURCE, "18090", "10.0.0.11",
                                           "/opt/llmb/models/kimi"]
    # systemd-run expands '$' (environment) and '%' (specifiers) in a command line
    assert "$" not in relay.SERVER_SOURCE and "%" not in relay.SERVER_SOURCE
    # argv stays an array: a value with spaces or shell characters is one element, never split
    odd = relay.unit_argv(1, "h", "/x y;rm -rf /")
    assert odd[-1] == "/x y;rm -rf /"


def test_start_stops_a_stale_unit_then_starts_and_waits():
    run = FakeRun({"systemctl": 5})  # no stale unit
    waited = []
    res = relay.start(18090, "10.0.0.11", "/m", run=run, wait=lambda a, p, t: waited.append((a, p, t)) or 0.01)
    assert [c[0] for c in run.calls] == ["systemctl", "systemd-run"]
    assert run.calls[0] == ["systemctl", "stop", "llmb-weights-relay.service"]
    assert waited == [("10.0.0.11", 18090, 30.0)]
    assert res["stale_rc"] == 5 and res["listen_seconds"] == 0.01 and res["argv"] == run.calls[1]


@pytest.mark.parametrize("rcs, what", [({"systemctl": 1}, "systemctl stop"), ({"systemd-run": 1}, "systemd-run")])
def test_start_fails_with_the_command_that_failed(rcs, what):
    with pytest.raises(relay.RelayError, match=what):
        relay.start(18090, "10.0.0.11", "/m", run=FakeRun(rcs), wait=lambda *a: 0.0)


def test_stop_accepts_an_absent_unit():
    assert relay.stop(run=FakeRun({"systemctl": 5})) == {"rc": 5}
    with pytest.raises(relay.RelayError, match="rc 1"):
        relay.stop(run=FakeRun({"systemctl": 1}))


def test_wait_listening_returns_once_a_connection_succeeds_and_times_out_otherwise():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        assert relay.wait_listening("127.0.0.1", srv.getsockname()[1], timeout=5) >= 0
    finally:
        port = srv.getsockname()[1]
        srv.close()
    with pytest.raises(relay.RelayError, match="not listening after"):
        relay.wait_listening("127.0.0.1", port, timeout=0.1, poll=0.02)


def test_server_source_serves_a_directory_to_many_parallel_clients(tmp_path):
    """The server the unit runs: files served as they are, 24 clients at once."""
    for i in range(24):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * 200_000)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = relay.unit_argv(port, "127.0.0.1", str(tmp_path), python=sys.executable)
    proc = subprocess.Popen(argv[argv.index(sys.executable):], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        relay.wait_listening("127.0.0.1", port, timeout=10)

        def get(i):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/f{i}", timeout=10) as r:
                return r.read()

        with ThreadPoolExecutor(24) as ex:
            bodies = list(ex.map(get, range(24)))
        assert bodies == [bytes([i]) * 200_000 for i in range(24)]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
