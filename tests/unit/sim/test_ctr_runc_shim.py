"""The runc shim of the simulated nodes' dockerd (tests/sim/ctr/llmb-sim-runc): before `create` it keeps
only the capabilities of the node's bounding set and then runs the real runc with the same arguments."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

SHIM = Path(__file__).resolve().parents[2] / "sim" / "ctr" / "llmb-sim-runc"
ALL = ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_BPF"]


def _bounding() -> set[str]:
    names = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
             "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
             "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
             "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
             "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
             "PERFMON", "BPF", "CHECKPOINT_RESTORE"]
    line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("CapBnd:"))
    mask = int(line.split()[1], 16)
    return {"CAP_" + n for i, n in enumerate(names) if mask >> i & 1}


def _run(tmp_path: Path, *args: str) -> tuple[dict, list[str]]:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    caps = {k: list(ALL) for k in ("bounding", "effective", "permitted")}
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {"capabilities": caps}}))
    fake = tmp_path / "runc"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {tmp_path}/argv\n")
    fake.chmod(0o755)
    argv = [a.replace("BUNDLE", str(bundle)) for a in args]
    subprocess.run(["python3", str(SHIM), *argv], check=True, env=dict(os.environ, LLMB_SIM_RUNC=str(fake)))
    return json.loads((bundle / "config.json").read_text()), (tmp_path / "argv").read_text().splitlines()


def test_create_keeps_only_the_bounding_set_and_passes_argv_through(tmp_path):
    args = ("--root", "/run/x", "create", "--bundle", "BUNDLE", "--pid-file", "/run/p", "ctr-id")
    spec, argv = _run(tmp_path, *args)
    want = [c for c in ALL if c in _bounding()]
    assert all(v == want for v in spec["process"]["capabilities"].values()), spec
    assert argv == [a.replace("BUNDLE", str(tmp_path / "bundle")) for a in args]


def test_other_commands_leave_the_bundle_alone(tmp_path):
    spec, argv = _run(tmp_path, "--root", "/run/x", "state", "ctr-id", "BUNDLE")
    assert all(v == ALL for v in spec["process"]["capabilities"].values())
    assert argv[2:4] == ["state", "ctr-id"]


def test_exec_keeps_only_the_bounding_set_in_the_process_file(tmp_path):
    """`docker exec` into a --privileged container: containerd hands runc exec a process spec file."""
    proc = tmp_path / "process.json"
    proc.write_text(json.dumps({"args": ["vllm", "serve"], "capabilities": {k: list(ALL) for k in ("bounding", "effective")},
                                "rlimits": [{"type": "RLIMIT_MEMLOCK", "hard": 2**64 - 1, "soft": 2**64 - 1}]}))
    _spec, argv = _run(tmp_path, "--root", "/run/x", "exec", "--process", str(proc), "--detach", "ctr-id")
    want = [c for c in ALL if c in _bounding()]
    got = json.loads(proc.read_text())
    assert got["args"] == ["vllm", "serve"] and all(v == want for v in got["capabilities"].values()), got
    import resource
    cap = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    assert got["rlimits"][0]["hard"] == (2**64 - 1 if cap == resource.RLIM_INFINITY else cap), got
    assert argv == ["--root", "/run/x", "exec", "--process", str(proc), "--detach", "ctr-id"]


def test_create_clamps_rlimits_to_the_nodes_hard_limits(tmp_path):
    """`--ulimit memlock=-1` (the TensorRT-LLM recipe): raising a hard limit needs CAP_SYS_RESOURCE, which
    the node lacks; the shim lowers it to the node's own hard limit."""
    import resource

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    huge = 2**64 - 1
    spec = {"process": {"capabilities": {"bounding": list(ALL)},
                        "rlimits": [{"type": "RLIMIT_MEMLOCK", "hard": huge, "soft": huge},
                                    {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]}}
    (bundle / "config.json").write_text(json.dumps(spec))
    fake = tmp_path / "runc"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    subprocess.run(["python3", str(SHIM), "create", "--bundle", str(bundle), "id"], check=True,
                   env=dict(os.environ, LLMB_SIM_RUNC=str(fake)))
    got = {r["type"]: r for r in json.loads((bundle / "config.json").read_text())["process"]["rlimits"]}
    cap = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    want = huge if cap == resource.RLIM_INFINITY else cap
    assert got["RLIMIT_MEMLOCK"]["hard"] == want and got["RLIMIT_MEMLOCK"]["soft"] == want, got
    assert got["RLIMIT_NOFILE"]["hard"] == min(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
