"""llmb.sshmesh: authorized_keys lines, known_hosts, /proc listeners, the all-pairs runner, the matrix."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from llmb import sshmesh

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh8m0YbqLkZ1gXoJq3sVvLr0fJm2P6dQm0xq3a1b2c3 llmb-ssh-mesh-h800"
OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorOperatorOperatorOperatorOperator000 op@laptop"
ADDRS = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    "text, expected",
    [
        (KEY, ("ssh-ed25519", KEY.split()[1], "llmb-ssh-mesh-h800")),
        ("ssh-rsa AAAAB3Nza== ", ("ssh-rsa", "AAAAB3Nza==", "")),
        ("ecdsa-sha2-nistp256 AAAAE2Vj two words", ("ecdsa-sha2-nistp256", "AAAAE2Vj", "two words")),
    ],
)
def test_parse_public_key(text, expected):
    assert sshmesh.parse_public_key(text) == expected


@pytest.mark.parametrize("text", ["", "ssh-ed25519", "ssh-dss AAAA", "from=\"x\" ssh-ed25519 AAAA", "ssh-ed25519 not*base64"])
def test_parse_public_key_rejects(text):
    with pytest.raises(sshmesh.MeshError):
        sshmesh.parse_public_key(text)


def test_authorized_key_line_restricts_to_cluster_addresses():
    line = sshmesh.authorized_key_line(KEY, ADDRS, "llmb-cluster", extra=["192.168.0.0/24", "10.0.0.12"])
    assert line == (
        'from="10.0.0.11,10.0.0.12,10.0.0.13,192.168.0.0/24",restrict,pty ssh-ed25519 '
        + KEY.split()[1] + " llmb-cluster"
    )


def test_authorized_key_line_keeps_key_comment_by_default():
    assert sshmesh.authorized_key_line(KEY, ADDRS).endswith(" llmb-ssh-mesh-h800")


@pytest.mark.parametrize("addresses", [["node1", "10.0.0.1"], ["10.0.0.300"], []])
def test_from_patterns_refuses_names_and_nothing(addresses):
    with pytest.raises(sshmesh.MeshError) as err:
        sshmesh.from_patterns(addresses)
    if addresses and addresses[0] == "node1":
        assert "node1" in str(err.value) and "10.0.0.1" not in str(err.value).split(":")[0]


def test_from_patterns_accepts_ipv6_and_cidr():
    assert sshmesh.from_patterns(["fd00::1", "10.1.0.0/16"]) == ["fd00::1", "10.1.0.0/16"]


def test_authorized_key_regexp_matches_the_key_whatever_its_options_not_others():
    rx = re.compile(sshmesh.authorized_key_regexp(KEY))
    blob = KEY.split()[1]
    assert rx.search(f'from="10.9.9.9",restrict ssh-ed25519 {blob} old-comment')
    assert rx.search(f"ssh-ed25519 {blob}")
    assert not rx.search(OTHER)
    assert not rx.search(f"ssh-ed25519 {blob}X comment")  # a longer blob is another key


def test_lineinfile_semantics_keep_other_lines():
    """What the role's lineinfile does: replace the cluster key's line, keep every other line."""
    rx = re.compile(sshmesh.authorized_key_regexp(KEY))
    existing = ["# operator keys", OTHER, 'from="10.9.9.9" ' + KEY, "", "ssh-rsa AAAAB3Nza== x"]
    new = sshmesh.authorized_key_line(KEY, ADDRS)
    out = [new if rx.search(line) else line for line in existing]
    assert out[0:2] == existing[0:2] and out[3:] == existing[3:]
    assert out[2] == new


# --------------------------------------------------------------------------- known_hosts

NODES = [
    {"names": ["n1", "node1", "10.0.0.11"], "host_key": "ssh-ed25519 AAAAhost1", "sshd_host_key": "ssh-ed25519 AAAAc1"},
    {"names": ["n2", "10.0.0.12"], "host_key": "ssh-ed25519 AAAAhost2", "sshd_host_key": ""},
]


def test_known_hosts_port_22_and_container_port():
    text = sshmesh.known_hosts_for_nodes(NODES[:1], 22, 2233, header="managed\nsecond")
    assert text == (
        "# managed\n# second\n"
        "n1,node1,10.0.0.11 ssh-ed25519 AAAAhost1\n"
        "[n1]:2233,[node1]:2233,[10.0.0.11]:2233 ssh-ed25519 AAAAc1\n"
    )


def test_known_hosts_other_sshd_port():
    assert sshmesh.known_hosts_for_nodes(NODES[:1], 2222) == "[n1]:2222,[node1]:2222,[10.0.0.11]:2222 ssh-ed25519 AAAAhost1\n"


def test_known_hosts_missing_key_fails_naming_node_unless_allowed():
    with pytest.raises(sshmesh.MeshError, match="n2"):
        sshmesh.known_hosts_for_nodes(NODES, 22, 2233)
    text = sshmesh.known_hosts_for_nodes(NODES, 22, 2233, allow_missing=True)
    assert "[n2]:2233" not in text and "n2,10.0.0.12 ssh-ed25519 AAAAhost2" in text


def test_known_hosts_is_accepted_by_ssh_keygen(tmp_path: Path):
    """Real OpenSSH reads the file: ssh-keygen -F finds each name on its port."""
    if subprocess.run(["which", "ssh-keygen"], capture_output=True).returncode != 0:
        pytest.skip("no ssh-keygen")
    keys = []
    for i in range(2):
        k = tmp_path / f"k{i}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True)
        keys.append(k.with_suffix(".pub").read_text().strip())
    nodes = [{"names": ["n1", "10.0.0.11"], "host_key": keys[0], "sshd_host_key": keys[1]}]
    kh = tmp_path / "known_hosts"
    kh.write_text(sshmesh.known_hosts_for_nodes(nodes, 22, 2233))
    for name, key in (("n1", keys[0]), ("10.0.0.11", keys[0]), ("[n1]:2233", keys[1]), ("[10.0.0.11]:2233", keys[1])):
        out = subprocess.run(["ssh-keygen", "-F", name, "-f", str(kh)], capture_output=True, text=True).stdout
        assert key.split()[1] in out, name


# --------------------------------------------------------------------------- listeners

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20114 1 0000000000000000 100 0 0 10 0
   1: 00000000:08B9 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   2: 0B00000A:0016 0C00000A:D2F4 01 00000000:00000000 02:000A7D6A 00000000     0        0 40001 4 0000000000000000 20 4 29 10 -1
"""


def test_parse_proc_net_tcp_lists_listen_sockets_only():
    assert sshmesh.parse_proc_net_tcp(PROC_NET_TCP) == [(22, 20114), (2233, 31337)]


def fake_proc(tmp_path: Path, sockets: dict[int, tuple[str, str]]) -> Path:
    """A /proc with net/tcp and one process per inode: {inode: (comm, cmdline)}."""
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(PROC_NET_TCP)
    (proc / "net" / "tcp6").write_text(PROC_NET_TCP.splitlines()[0] + "\n")
    for pid, (inode, (comm, cmd)) in enumerate(sockets.items(), start=100):
        fd = proc / str(pid) / "fd"
        fd.mkdir(parents=True)
        (fd / "3").symlink_to(f"socket:[{inode}]")
        (fd / "0").symlink_to("/dev/null")
        (proc / str(pid) / "comm").write_text(comm + "\n")
        (proc / str(pid) / "cmdline").write_bytes(cmd.replace(" ", "\0").encode() + b"\0")
    return proc


def test_listeners_from_proc(tmp_path: Path):
    proc = fake_proc(tmp_path, {20114: ("sshd", "sshd: /usr/sbin/sshd -D"),
                                31337: ("python3", "/usr/bin/python3 -m http.server 2233")})
    assert sshmesh.listeners(2233, str(proc)) == [
        {"pid": 101, "comm": "python3", "cmdline": "/usr/bin/python3 -m http.server 2233"}]
    assert sshmesh.listeners(8000, str(proc)) == []


def test_listener_in_another_pid_namespace_is_reported_unknown(tmp_path: Path):
    proc = fake_proc(tmp_path, {20114: ("sshd", "sshd")})
    assert sshmesh.listeners(2233, str(proc)) == [{"pid": None, "comm": "?", "cmdline": "?"}]


def test_port_conflict_spares_the_mesh_sshd():
    cfg = "/etc/llmb/ssh-mesh/sshd_config"
    found = [{"pid": 7, "comm": "sshd", "cmdline": f"sshd: /usr/sbin/sshd -D -e -f {cfg} [listener]"},
             {"pid": 8, "comm": "nc", "cmdline": "nc -l 2233"}]
    assert sshmesh.port_conflict(found, cfg) == [found[1]]
    assert sshmesh.port_conflict([{"pid": None, "comm": "?", "cmdline": "?"}], cfg)  # unknown owner: conflict


def test_listeners_of_this_machine_sees_a_real_socket():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        found = sshmesh.listeners(port)
        assert found and found[0]["pid"] is not None
        assert "python" in found[0]["cmdline"] or "pytest" in found[0]["cmdline"]
    finally:
        s.close()


# --------------------------------------------------------------------------- all pairs


def test_ssh_argv():
    assert sshmesh.ssh_argv("10.0.0.2", 2233, "root", "/etc/llmb/ssh-mesh/ssh_config", 5, "hostname") == [
        "ssh", "-F", "/etc/llmb/ssh-mesh/ssh_config",
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
        "-o", "ControlMaster=no", "-o", "ControlPath=none", "-o", "LogLevel=ERROR",
        "-p", "2233", "-l", "root", "10.0.0.2", "hostname"]


def test_rotate_spreads_targets():
    order = ["a", "b", "c", "d"]
    targets = [{"name": n} for n in order if n != "c"]
    assert [t["name"] for t in sshmesh.rotate(targets, "c", order)] == ["d", "a", "b"]
    assert [t["name"] for t in sshmesh.rotate(targets, "zz", order)] == ["a", "b", "d"]


# (stderr of ssh, rc) per address: what a runner returns, and the expected outcome
CASES = [
    # target, responses (one per attempt), ok, attempts, error fragment, hint fragment
    ("10.0.0.2", [(0, "n2\n", "")], True, 1, "", ""),
    ("10.0.0.3", [(255, "", "ssh: connect to host 10.0.0.3 port 22: Connection timed out\r\n")], False, 1,
     "Connection timed out", "firewalls"),
    ("10.0.0.4", [(255, "", "Warning: Permanently added '10.0.0.4' (ED25519) to the list of known hosts.\n"
                             "root@10.0.0.4: Permission denied (publickey).\n")], False, 1,
     "Permission denied (publickey)", "from= list"),
    ("10.0.0.5", [(255, "", "kex_exchange_identification: Connection closed by remote host\n"),
                  (255, "", "kex_exchange_identification: read: Connection reset by peer\n"),
                  (0, "n5\n", "")], True, 3, "", ""),
    ("10.0.0.6", [(255, "", "Host key verification failed.\n")], False, 1, "Host key verification failed",
     "re-run the ssh_mesh stage"),
    ("10.0.0.7", [(255, "", "kex_exchange_identification: Connection closed by remote host\n")] * 3, False, 3,
     "Connection closed", "ssh by hand"),
    ("10.0.0.8", [(255, "", "ssh: connect to host 10.0.0.8 port 2233: Connection refused\n")], False, 1,
     "Connection refused", "sshd"),
]


@pytest.mark.parametrize("address, responses, ok, attempts, error, hint", CASES)
def test_check_pairs_table(address, responses, ok, attempts, error, hint):
    calls = []

    def runner(argv, timeout):
        calls.append(argv)
        return responses[min(len(calls), len(responses)) - 1]

    (res,) = sshmesh.check_pairs([{"name": "t", "address": address}], port=22, timeout=3, attempts=3,
                                 runner=runner)
    assert res["ok"] is ok and res["attempts"] == attempts == len(calls)
    assert error in res["error"] and hint in res["hint"]
    assert calls[0][-2:] == [address, "hostname"]
    if ok:
        assert res["output"].startswith("n") and res["error"] == ""
    else:
        assert "Warning: Permanently" not in res["error"]


def test_check_pairs_runs_in_parallel():
    import threading
    import time

    active, peak, lock = [0], [0], threading.Lock()

    def runner(argv, timeout):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return 0, "x\n", ""

    targets = [{"name": f"n{i}", "address": f"10.0.0.{i}"} for i in range(12)]
    res = sshmesh.check_pairs(targets, parallel=6, runner=runner)
    assert [r["target"] for r in res] == [t["name"] for t in targets]
    assert peak[0] == 6


def test_check_pairs_real_ssh_failure_is_reported():
    """The default runner with the real ssh client and an address nothing listens on."""
    if subprocess.run(["which", "ssh"], capture_output=True).returncode != 0:
        pytest.skip("no ssh client")
    (res,) = sshmesh.check_pairs([{"name": "nobody", "address": "127.0.0.1"}], port=1, timeout=2, attempts=1,
                                 config="/dev/null")
    assert not res["ok"] and res["rc"] == 255 and "refused" in res["error"]


# --------------------------------------------------------------------------- matrix


def pair(target, ok=True, error=""):
    return {"target": target, "address": f"10.0.0.{target[-1]}", "port": 22, "ok": ok, "rc": 0 if ok else 255,
            "output": target, "error": error, "hint": "check firewalls", "attempts": 1, "seconds": 0.1}


def test_format_matrix():
    rows = {"n1": [pair("n2"), pair("n3")], "n2": [pair("n1"), pair("n3", False, "timed out")],
            "n3": [pair("n1"), pair("n2")]}
    assert sshmesh.format_matrix(rows, 22).splitlines() == [
        "SSH all-pairs (BatchMode, port 22): 5/6 ordered pairs ok",
        "from \\ to      n1      n2      n3",
        "n1           -      ok      ok",
        "n2          ok       -    FAIL",
        "n3          ok      ok       -",
    ]


def test_format_matrix_missing_row():
    text = sshmesh.format_matrix({"n1": [pair("n2")], "n2": []})
    assert text.splitlines()[-1].split() == ["n2", "?", "-"]


def test_failures_name_both_ends_and_hint():
    msgs = sshmesh.failures("n2", [pair("n1"), pair("n3", False, "ssh: connect to host 10.0.0.3 port 22: timed out")])
    assert msgs == ["n2 -> n3 (10.0.0.3:22): SSH with BatchMode failed: ssh: connect to host 10.0.0.3 port 22: "
                    "timed out (after 1 attempt(s)); fix: check firewalls"]


def test_mpirun_hostnames_ignore_noise():
    out = "n2\nn1\n--------------------------------------------------------------------------\nWARNING: x y\nn3\n"
    assert sshmesh.mpirun_hostnames(out) == ["n1", "n2", "n3"]


# --------------------------------------------------------------------------- which pairs


def _pairs(order, mode="mpirun", radix=64):
    return {src: [(p["target"], p["role"]) for p in row] for src, row in sshmesh.mesh_pairs(order, mode, radix).items()}


def test_mesh_pairs_mpirun_is_the_launcher_to_every_node_below_the_radix():
    nodes = [f"n{i}" for i in range(1, 33)]
    pairs = _pairs(nodes)
    assert pairs["n1"] == [(n, "launcher") for n in nodes[1:]]
    assert all(pairs[n] == [] for n in nodes[1:])


def test_mesh_pairs_mpirun_adds_open_mpis_radix_tree_edges():
    # radix 2 over 7 daemons (vpids 1..7 after the launcher, vpid 0): parent of v is (v - 1) // 2
    nodes = [f"n{i}" for i in range(8)]
    pairs = _pairs(nodes, radix=2)
    assert pairs["n0"] == [(n, "launcher") for n in nodes[1:]]
    assert pairs["n1"] == [("n3", "tree"), ("n4", "tree")]
    assert pairs["n2"] == [("n5", "tree"), ("n6", "tree")]
    assert pairs["n3"] == [("n7", "tree")]
    assert sum(len(v) for v in pairs.values()) <= 2 * (len(nodes) - 1)


def test_mesh_pairs_mpirun_grows_linearly_and_all_quadratically():
    for n in (2, 16, 32, 256, 1000):
        nodes = [f"n{i}" for i in range(n)]
        assert sum(len(v) for v in sshmesh.mesh_pairs(nodes).values()) <= 2 * (n - 1)
        if n <= 256:
            assert sum(len(v) for v in sshmesh.mesh_pairs(nodes, "all").values()) == n * (n - 1)
    # the launcher's row is the longest: the check's wall time is its rounds of `parallel` connections
    rows = sshmesh.mesh_pairs([f"n{i}" for i in range(256)])
    assert max(rows, key=lambda s: len(rows[s])) == "n0"


@pytest.mark.parametrize("mode, radix, word", [("every", 64, "ssh_mesh_check_pairs"), ("mpirun", 0, "ssh_mesh_mpi_tree_radix"),
                                               ("mpirun", True, "ssh_mesh_mpi_tree_radix")])
def test_mesh_pairs_refuses_bad_mode_and_radix(mode, radix, word):
    with pytest.raises(sshmesh.MeshError, match=word):
        sshmesh.mesh_pairs(["a", "b"], mode, radix)


def test_mesh_pairs_refuses_a_node_named_twice():
    with pytest.raises(sshmesh.MeshError, match="twice"):
        sshmesh.mesh_pairs(["a", "b", "a"])


def test_format_matrix_marks_pairs_not_needed():
    expected = sshmesh.mesh_pairs(["n1", "n2", "n3"])
    rows = {"n1": [pair("n2"), pair("n3", False, "timed out")], "n2": [], "n3": []}
    lines = sshmesh.format_matrix(rows, 22, expected, "mpirun").splitlines()
    assert lines[0].startswith("SSH pairs mpirun needs") and "1/2 ok" in lines[0]
    assert lines[2].split() == ["n1", "-", "ok", "FAIL"]
    assert lines[3].split() == ["n2", ".", "-", "."]


def test_failures_say_why_the_pair_is_checked():
    r = pair("n3", False, "timed out")
    r["role"] = "launcher"
    assert "n1 -> n3 (10.0.0.3:22) [mpirun launcher to node]: SSH" in sshmesh.failures("n1", [r])[0]


TARGETS = [{"name": "n1", "address": "10.0.0.11"}, {"name": "n2", "address": "10.0.0.12"},
           {"name": "n3", "address": "10.0.0.13"}]


def test_mpirun_hosts_names_the_launcher_by_its_host_name_and_keeps_the_order():
    """Open MPI 5 gives no slot to the launching node named by its IP (openpmix/prrte#2258)."""
    assert sshmesh.mpirun_hosts(TARGETS, 1, "gpu-01") == "gpu-01:1,10.0.0.12:1,10.0.0.13:1"
    assert sshmesh.mpirun_hosts(TARGETS, [8, 8, 4], "gpu-01.example.com") == \
        "gpu-01.example.com:8,10.0.0.12:8,10.0.0.13:4"
    assert sshmesh.mpirun_hosts(TARGETS[:1], "8", "solo") == "solo:8"
    assert sshmesh.mpirun_hosts(iter(TARGETS[:2]), (n for n in (2, 3)), "a") == "a:2,10.0.0.12:3"


@pytest.mark.parametrize(
    "targets, slots, name, message",
    [
        ([], 1, "gpu-01", "no nodes"),
        (TARGETS, [8, 8], "gpu-01", "2 slot counts for 3 nodes"),
        (TARGETS, 1, "", "the launcher n1's host name is '', expected an RFC 1123 host name"),
        (TARGETS, 1, "gpu 01; rm -rf /", "the launcher n1's host name is 'gpu 01; rm -rf /'"),
        (TARGETS, [8, 0, 8], "gpu-01", "n2: slots 0, expected a whole number >= 1"),
        (TARGETS, [8, "x", 8], "gpu-01", "n2: slots 'x'"),
        (TARGETS, [8, 8, True], "gpu-01", "n3: slots True"),
        ([TARGETS[0], {"name": "n2", "address": "10.0.0.12,evil:9"}], 1, "gpu-01", "n2: address '10.0.0.12,evil:9'"),
    ],
)
def test_mpirun_hosts_refuses_bad_input_naming_the_node(targets, slots, name, message):
    with pytest.raises(sshmesh.MeshError) as err:
        sshmesh.mpirun_hosts(targets, slots, name)
    assert message in str(err.value)


def test_stale_known_hosts_names_the_node_whose_key_changed():
    """verify's fabric: the mesh pinned the host keys at stage 4; a node reinstalled since presents
    another key, and mpirun over the mesh would fail on it ('REMOTE HOST IDENTIFICATION HAS CHANGED')."""
    text = sshmesh.known_hosts_for_nodes(
        [{"names": ["n1", "gpu-01", "10.0.0.11"], "host_key": KEY, "sshd_host_key": KEY},
         {"names": ["n2", "10.0.0.12"], "host_key": KEY, "sshd_host_key": KEY}],
        22, 2233)
    nodes = [{"name": "n1", "address": "10.0.0.11", "host_key": KEY},
             {"name": "n2", "address": "10.0.0.12", "host_key": KEY}]
    assert sshmesh.stale_known_hosts(text, nodes) == []
    assert sshmesh.stale_known_hosts(text, nodes, 2233) == []  # [addr]:2233 pinned too (same key here)
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFRlcGxhY2VkUmVwbGFjZWRSZXBsYWNlZFJlcGxhY2Vk root@n2"
    changed = [nodes[0], dict(nodes[1], host_key=other)]
    assert sshmesh.stale_known_hosts(text, changed) == ["n2 (10.0.0.12): its host key changed since the mesh pinned it"]
    assert sshmesh.stale_known_hosts(text, [*nodes, {"name": "n3", "address": "10.0.0.13", "host_key": KEY}]) == [
        "n3 (10.0.0.13): not in the mesh's known_hosts"]
    assert sshmesh.stale_known_hosts(text, [dict(nodes[0], host_key="")]) == [
        "n1 (10.0.0.11): its host key could not be read"]
    assert sshmesh.stale_known_hosts("", nodes[:1], 22) == ["n1 (10.0.0.11): not in the mesh's known_hosts"]
