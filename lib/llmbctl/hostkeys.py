"""Host keys of a node to recover: what it presents (ssh-keyscan) against what known_hosts pins.

A replaced or reinstalled node presents a new host key; OpenSSH then refuses it ("REMOTE HOST
IDENTIFICATION HAS CHANGED") after the connection timeout, and says nothing about what to do.
recover.yml asks here first, in a second: the key is pinned (go on), unknown or changed (stop and
show the presented key's SHA256 fingerprint and the one way to accept exactly that key:
`-e llmb_recover_hostkey=SHA256:...`). The accepted fingerprint must be one the node presents now;
only that host's entries of the known_hosts file are replaced. Stdlib only (controller side).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import shlex
import subprocess
from dataclasses import dataclass

from llmb.fsutil import atomic_write_text

FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")
# ssh's own order of preference among the key types a server offers
TYPE_ORDER = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "rsa-sha2-512",
              "ssh-rsa"]
_KEY_B64 = re.compile(r"^[A-Za-z0-9+/]+={0,3}$")


class HostKeyError(ValueError):
    """Bad input (a fingerprint, a known_hosts file, a keyscan answer); the message names it."""


@dataclass(frozen=True)
class HostKey:
    type: str
    key: str  # base64 blob as in known_hosts

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


def fingerprint(key_b64: str) -> str:
    """OpenSSH's SHA256 fingerprint (ssh-keygen -l): base64 of sha256(blob), without padding."""
    try:
        blob = base64.b64decode(key_b64, validate=True)
    except ValueError as e:
        raise HostKeyError(f"host key {key_b64[:20]!r}...: not base64 ({e})") from None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def check_fingerprint(value: str, var: str = "llmb_recover_hostkey") -> str:
    value = str(value).strip()
    if not FINGERPRINT.match(value):
        raise HostKeyError(f"{var}: expected a SHA256 fingerprint as ssh-keygen -l prints it "
                           f"(SHA256: and 43 base64 characters), found {value[:80]!r}")
    return value


def parse_keyscan(text: str) -> list[HostKey]:
    """`ssh-keyscan` output lines `host type key` (comments skipped), one HostKey per type."""
    seen: dict[str, HostKey] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or line.startswith("#") or not _KEY_B64.match(parts[2]):
            continue
        seen.setdefault(parts[1], HostKey(parts[1], parts[2]))
    return sorted(seen.values(), key=lambda k: TYPE_ORDER.index(k.type) if k.type in TYPE_ORDER else 99)


def lookup_name(address: str, port: int) -> str:
    """The name ssh looks up in known_hosts for a connection to address:port."""
    return address if int(port) == 22 else f"[{address}]:{int(port)}"


def _matches(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        try:
            _, _, salt, digest = pattern.split("|", 3)
            mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
        except (ValueError, TypeError):
            return False
        return hmac.compare_digest(base64.b64encode(mac).decode(), digest)
    # ssh's patterns know only * and ? ([host]:port brackets are literal)
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name) is not None


def line_matches(hosts_field: str, name: str) -> bool:
    """Does a known_hosts line's host field (comma list, hashed, wildcards, !negation) match name?"""
    hit = False
    for pat in hosts_field.split(","):
        if pat.startswith("!"):
            if _matches(pat[1:], name):
                return False
        elif _matches(pat, name):
            hit = True
    return hit


def pinned(text: str, names: list[str]) -> list[HostKey]:
    """The keys a known_hosts text pins for any of names (@cert-authority / @revoked lines aside)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or line.lstrip().startswith("#") or parts[0].startswith("@"):
            continue
        if any(line_matches(parts[0], n) for n in names):
            out.append(HostKey(parts[1], parts[2]))
    return out


def known_hosts_files(ssh_args: str) -> list[str]:
    """The files ssh reads as its user known_hosts: -o UserKnownHostsFile=... in the connection's
    arguments (ansible_ssh_common_args / ansible_ssh_extra_args), else ~/.ssh/known_hosts."""
    try:
        argv = shlex.split(ssh_args or "")
    except ValueError as e:
        raise HostKeyError(f"ansible_ssh_common_args: cannot split {ssh_args!r}: {e}") from None
    opts = []
    for i, a in enumerate(argv):
        if a == "-o" and i + 1 < len(argv):
            opts.append(argv[i + 1])
        elif a.startswith("-o") and len(a) > 2:
            opts.append(a[2:])
    for o in opts:
        key, _, val = o.replace("=", " ", 1).partition(" ")
        if key.strip().lower() == "userknownhostsfile" and val.strip():
            return [os.path.expanduser(p) for p in val.split()]
    return [os.path.expanduser("~/.ssh/known_hosts")]


@dataclass
class Verdict:
    status: str  # pinned | unknown | changed
    offer: HostKey | None  # the presented key to accept (the type ssh will use)
    pinned: list[HostKey]


def decide(presented: list[HostKey], pins: list[HostKey]) -> Verdict:
    if not presented:
        raise HostKeyError("the node presented no host key")
    if any(p == k for p in pins for k in presented):
        return Verdict("pinned", None, pins)
    pinned_types = {p.type for p in pins}
    offer = next((k for k in presented if k.type in pinned_types), presented[0])
    return Verdict("changed" if pins else "unknown", offer, pins)


def choose(presented: list[HostKey], accept: str) -> HostKey:
    """The presented key whose fingerprint the operator gave; refuses any other."""
    accept = check_fingerprint(accept)
    for k in presented:
        if k.fingerprint == accept:
            return k
    raise HostKeyError(f"llmb_recover_hostkey: the node presents {', '.join(f'{k.type} {k.fingerprint}' for k in presented)}, "
                       f"not {accept}; refusing to pin a key the node does not hold (run again without "
                       "llmb_recover_hostkey to see what it presents)")


def repin(text: str, names: list[str], key: HostKey) -> str:
    """known_hosts text with this host's entries replaced by `key` (other hosts' lines kept:
    a plain comma list loses only these names, a hashed line for one of them is dropped)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.lstrip().startswith("#") and not parts[0].startswith("@"):
            pats = parts[0].split(",")
            keep = [p for p in pats if not any(_matches(p.lstrip("!"), n) for n in names)]
            if len(keep) != len(pats):
                if not keep:
                    continue
                line = " ".join([",".join(keep), *parts[1:]])
        out.append(line)
    out.append(f"{','.join(names)} {key.type} {key.key}")
    return "\n".join(out) + "\n"


def guidance(host: str, address: str, port: int, verdict: Verdict, files: list[str], inventory: str,
             presented: list[HostKey]) -> str:
    where = f"{address} port {port}"
    fp = verdict.offer.fingerprint if verdict.offer else "?"
    lines = []
    if verdict.status == "changed":
        lines.append(f"recover: {host} ({where}) presents a host key that is not the one pinned for it in {files[0]}")
        lines += [f"  pinned:    {p.type} {p.fingerprint}" for p in verdict.pinned]
    else:
        lines.append(f"recover: {host} ({where}) presents a host key that no known_hosts entry pins ({files[0]})")
    lines += [f"  presented: {k.type} {k.fingerprint}" for k in presented]
    lines += [
        f"If {host} was replaced or reinstalled, compare with the key on its console "
        "(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and accept exactly that key, for this host only:",
        f"  ansible-playbook playbooks/recover.yml -i {inventory} -e llmb_recover_host={host} "
        f"-e llmb_recover_hostkey={fp}",
        f"If {host} was not replaced, do not accept it: something else answers at {address}.",
    ]
    return "\n".join(lines)


def scan(address: str, port: int, types: list[str], timeout_s: int) -> tuple[list[HostKey], str]:
    """ssh-keyscan (argv) for the given key types; one connection per type, so only those needed."""
    proc = subprocess.run(["ssh-keyscan", "-T", str(int(timeout_s)), "-p", str(int(port)), "-t", ",".join(types),
                           "--", address], capture_output=True, text=True, timeout=timeout_s * len(types) + 5)
    return parse_keyscan(proc.stdout), proc.stderr


_SCAN_TYPE = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "rsa-sha2-512": "rsa", "ecdsa-sha2-nistp256": "ecdsa",
              "ecdsa-sha2-nistp384": "ecdsa", "ecdsa-sha2-nistp521": "ecdsa"}


def check_host(host: str, address: str, port: int, ssh_args: str, accept: str | None, inventory: str,
               timeout_s: int = 5, user: str | None = None, control_path: str = "~/.ansible/cp/%C",
               check_mode: bool = False) -> dict:
    """recover.yml's first step. Returns {ok, changed, status, fingerprint?, known_hosts, presented, msg?}:
    ok=False with the guidance when the node's key is unknown or changed and not accepted."""
    if accept:
        check_fingerprint(accept)
    files = known_hosts_files(ssh_args)
    names = [lookup_name(address, port)] + ([host] if host != address else [])
    try:
        text = open(files[0]).read() if os.path.exists(files[0]) else ""
    except OSError as e:
        raise HostKeyError(f"cannot read {files[0]}: {e}") from None
    pins = pinned(text, names[:1])
    # ask only for the key types that matter: the pinned ones (ssh will use them), else ed25519
    types = sorted({_SCAN_TYPE.get(p.type, "ed25519") for p in pins}) or ["ed25519"]
    presented, err = scan(address, port, types, timeout_s)
    if not presented and types != ["ed25519", "ecdsa", "rsa"]:
        presented, err = scan(address, port, ["ed25519", "ecdsa", "rsa"], timeout_s)
    out: dict = {"ok": True, "changed": False, "known_hosts": files[0],
                 "presented": [{"type": k.type, "fingerprint": k.fingerprint} for k in presented]}
    if not presented:
        out.update(ok=False, msg=f"recover: {host} ({address} port {port}) presents no SSH host key within {timeout_s} s "
                                 f"(ssh-keyscan: {err.strip()[-300:] or 'no answer'}): check that the node is up, sshd "
                                 "runs and the address in the inventory is right")
        return out
    verdict = decide(presented, pins)
    if verdict.status == "pinned":
        out.update(status="pinned", fingerprint=next(k.fingerprint for k in presented if k in pins))
        return out
    if not accept:
        out.update(ok=False, status=verdict.status, offer=verdict.offer.fingerprint if verdict.offer else None,
                   msg=guidance(host, address, port, verdict, files, inventory, presented))
        return out
    key = choose(presented, accept)
    if not check_mode:
        os.makedirs(os.path.dirname(os.path.abspath(files[0])), exist_ok=True)
        mode = os.stat(files[0]).st_mode & 0o777 if os.path.exists(files[0]) else 0o600
        atomic_write_text(files[0], repin(text, names, key), mode=mode)
        # a control master opened to the old machine would carry the next connections: close it
        argv = ["ssh", "-O", "exit", "-o", f"ControlPath={os.path.expanduser(control_path)}", "-p", str(int(port))]
        if user:
            argv += ["-l", user]
        try:
            subprocess.run([*argv, "--", address], capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            pass  # no master, or it does not answer: the next connection opens a new one
    out.update(changed=True, status="accepted", fingerprint=key.fingerprint)
    return out
