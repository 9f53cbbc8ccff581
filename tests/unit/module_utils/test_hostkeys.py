"""llmbctl.hostkeys: fingerprints as ssh-keygen prints them, known_hosts matching (plain, hashed,
ports), the decision, and re-pinning exactly one host's key."""

from __future__ import annotations

import subprocess

import pytest
from llmbctl.hostkeys import (
    HostKey,
    HostKeyError,
    check_fingerprint,
    choose,
    decide,
    guidance,
    known_hosts_files,
    lookup_name,
    parse_keyscan,
    pinned,
    repin,
)


def _key(tmp_path, name: str, kind: str = "ed25519") -> tuple[HostKey, str]:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
    typ, blob = (tmp_path / f"{name}.pub").read_text().split()[:2]
    fp = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / f"{name}.pub")], capture_output=True, text=True,
                        check=True).stdout.split()[1]
    return HostKey(typ, blob), fp


def test_fingerprint_is_ssh_keygens(tmp_path):
    for kind in ("ed25519", "ecdsa", "rsa"):
        key, fp = _key(tmp_path, f"k-{kind}", kind)
        assert key.fingerprint == fp
        assert check_fingerprint(fp) == fp


@pytest.mark.parametrize("bad", ["", "SHA256:short", "MD5:aa:bb", "SHA256:" + "a" * 43 + "; rm -rf /", "sha256:" + "A" * 43])
def test_bad_fingerprint_names_the_variable(bad):
    with pytest.raises(HostKeyError, match="llmb_recover_hostkey: expected a SHA256 fingerprint"):
        check_fingerprint(bad)


def test_keyscan_output_one_key_per_type_in_sshs_order(tmp_path):
    ed, _ = _key(tmp_path, "ed")
    rsa, _ = _key(tmp_path, "rsa", "rsa")
    text = (f"# 10.0.0.2:22 SSH-2.0-OpenSSH_9.2\n10.0.0.2 {rsa.type} {rsa.key}\n10.0.0.2 {ed.type} {ed.key}\n"
            "10.0.0.2 ssh-ed25519 not/base64!\n")
    assert parse_keyscan(text) == [ed, rsa]


def test_known_hosts_lookup_plain_hashed_and_port(tmp_path):
    k1, _ = _key(tmp_path, "k1")
    k2, _ = _key(tmp_path, "k2")
    kh = tmp_path / "known_hosts"
    kh.write_text(f"10.0.0.1,node1 {k1.type} {k1.key}\n[10.0.0.2]:2222 {k2.type} {k2.key}\n")
    assert pinned(kh.read_text(), ["10.0.0.1"]) == [k1]
    assert pinned(kh.read_text(), [lookup_name("10.0.0.2", 2222)]) == [k2]
    assert pinned(kh.read_text(), ["10.0.0.2"]) == []
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(kh)], check=True, capture_output=True)
    hashed = kh.read_text()
    assert "10.0.0.1" not in hashed and hashed.startswith("|1|")
    assert pinned(hashed, ["10.0.0.1"]) == [k1] and pinned(hashed, ["10.0.0.9"]) == []


def test_decide_pinned_changed_unknown(tmp_path):
    old, _ = _key(tmp_path, "old")
    new, _ = _key(tmp_path, "new")
    rsa, _ = _key(tmp_path, "rsa", "rsa")
    assert decide([new, rsa], [new]).status == "pinned"
    v = decide([new, rsa], [old])
    assert v.status == "changed" and v.offer == new  # the type that was pinned: the one ssh will use
    assert decide([rsa], []).status == "unknown"
    with pytest.raises(HostKeyError):
        decide([], [old])


def test_accept_only_a_key_the_node_presents(tmp_path):
    new, fp = _key(tmp_path, "new")
    _, other = _key(tmp_path, "other")
    assert choose([new], fp) == new
    with pytest.raises(HostKeyError, match="refusing to pin a key the node does not hold"):
        choose([new], other)


def test_repin_replaces_only_this_hosts_entries(tmp_path):
    a, _ = _key(tmp_path, "a")
    b, _ = _key(tmp_path, "b")
    new, _ = _key(tmp_path, "new")
    text = (f"# site\n10.0.0.1,node1 {a.type} {a.key}\n10.0.0.2,node2 {b.type} {b.key}\n"
            f"node2,node3 {b.type} {b.key}\n")
    out = repin(text, ["10.0.0.2", "node2"], new)
    assert pinned(out, ["10.0.0.2"]) == [new] and pinned(out, ["node2"]) == [new]
    assert pinned(out, ["10.0.0.1"]) == [a]
    assert pinned(out, ["node3"]) == [b]  # the shared line keeps node3
    assert out.startswith("# site\n")
    hashed = tmp_path / "kh"
    hashed.write_text(text)
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(hashed)], check=True, capture_output=True)
    out = repin(hashed.read_text(), ["10.0.0.2", "node2"], new)
    assert pinned(out, ["10.0.0.2"]) == [new] and pinned(out, ["10.0.0.1"]) == [a]


def test_known_hosts_file_from_the_connection_args(monkeypatch):
    monkeypatch.setenv("HOME", "/home/op")
    assert known_hosts_files("-o UserKnownHostsFile=/c/kh -o StrictHostKeyChecking=yes") == ["/c/kh"]
    assert known_hosts_files("-oUserKnownHostsFile=/c/kh") == ["/c/kh"]
    assert known_hosts_files("-o 'UserKnownHostsFile /a /b'") == ["/a", "/b"]
    assert known_hosts_files("") == ["/home/op/.ssh/known_hosts"]
    with pytest.raises(HostKeyError, match="ansible_ssh_common_args"):
        known_hosts_files("-o 'unterminated")


def test_guidance_shows_the_fingerprint_and_the_one_fix(tmp_path):
    old, _ = _key(tmp_path, "old")
    new, fp = _key(tmp_path, "new")
    v = decide([new], [old])
    msg = guidance("node2", "10.0.0.2", 22, v, ["/c/kh"], "inventories/prod", [new])
    assert f"presented: ssh-ed25519 {fp}" in msg and f"pinned:    ssh-ed25519 {old.fingerprint}" in msg
    assert (f"ansible-playbook playbooks/recover.yml -i inventories/prod -e llmb_recover_host=node2 "
            f"-e llmb_recover_hostkey={fp}") in msg
    assert "do not accept it" in msg


def test_check_host_stops_then_pins_exactly_the_accepted_key(tmp_path, monkeypatch):
    import llmbctl.hostkeys as hk

    old, _ = _key(tmp_path, "old")
    new, fp = _key(tmp_path, "new")
    other, _ = _key(tmp_path, "other")
    kh = tmp_path / "kh"
    kh.write_text(f"10.0.0.1,node1 {other.type} {other.key}\n10.0.0.2,node2 {old.type} {old.key}\n")
    asked = []
    monkeypatch.setattr(hk, "scan", lambda addr, port, types, t: (asked.append(types), ([new], ""))[1])
    args = ("node2", "10.0.0.2", 22, f"-o UserKnownHostsFile={kh}")
    out = hk.check_host(*args, None, "inv")
    assert out["ok"] is False and out["status"] == "changed" and out["offer"] == fp
    assert f"-e llmb_recover_hostkey={fp}" in out["msg"] and asked == [["ed25519"]]  # the pinned type only
    with pytest.raises(HostKeyError, match="refusing"):
        hk.check_host(*args, old.fingerprint, "inv")
    assert hk.check_host(*args, fp, "inv", check_mode=True)["changed"] is True
    assert pinned(kh.read_text(), ["10.0.0.2"]) == [old]  # check mode wrote nothing
    out = hk.check_host(*args, fp, "inv")
    assert out["ok"] and out["status"] == "accepted"
    assert pinned(kh.read_text(), ["10.0.0.2"]) == [new] and pinned(kh.read_text(), ["10.0.0.1"]) == [other]
    out = hk.check_host(*args, None, "inv")
    assert out["ok"] and out["status"] == "pinned" and not out["changed"]


def test_check_host_unreachable_says_so(tmp_path, monkeypatch):
    import llmbctl.hostkeys as hk

    monkeypatch.setattr(hk, "scan", lambda *a: ([], "connect to 10.0.0.2 port 22: No route to host"))
    out = hk.check_host("node2", "10.0.0.2", 22, f"-o UserKnownHostsFile={tmp_path}/kh", None, "inv")
    assert out["ok"] is False and "presents no SSH host key within 5 s" in out["msg"] and "No route" in out["msg"]
