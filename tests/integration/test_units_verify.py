"""The serve role's units, checked by systemd itself in one simulated node (`make units-verify`).

Every sample inventory's systemd/mpirun services (and hostile services: every value of
units_samples.HOSTILE_ARGS as an argument and as an environment value) are rendered by the
role's real templates and filter plugin, copied into one container of the node image
(scripts/build-node-image; systemd 252 as PID 1, started as scripts/sim-cluster starts nodes), and

1. `systemd-analyze verify` runs on every unit: any complaint fails the test, listed per unit;
2. every unit is started: the program it names is a stub that records the argv and environment
   systemd gave it, which must be exactly the plan's argv (ExecStart, and ExecStop, which systemd
   runs once the main process has exited) and hold exactly the plan's environment.

Stubs, not the engine double: the units name programs at exact paths (the engine venv's `vllm`
and `ray`, `/usr/bin/docker` for the TensorRT-LLM launcher); a stub at each path is what
`verify` needs (the file exists and is executable), covers docker as well, and makes the argv
and environment systemd passes observable without starting an engine.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from units_samples import REPO, hostile_services, render, render_group, sample_groups, sample_services

BOOT_TIMEOUT_S = 40
RUN_TIMEOUT_S = 30
DUMP = "/run/llmb-dump"
STUB = f"""#!/bin/sh
# records the argv and environment systemd started it with, under {DUMP}/<unit>/<pid>.*
# the unit: the name=systemd hierarchy's last component (cgroup v1), else the unified one's (v2)
u=$(sed -n 's#^[0-9]*:name=systemd:.*/##p' /proc/self/cgroup | head -n1)
[ -n "$u" ] || u=$(sed -n 's#^0::.*/##p' /proc/self/cgroup | head -n1)
d={DUMP}/$u
mkdir -p "$d"
cat /proc/$$/environ > "$d/$$.environ"
printf '%s\\0' "$0" "$@" > "$d/$$.tmp" && mv "$d/$$.tmp" "$d/$$.argv"
"""


def _run(*argv: str, check: bool = True, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), input=stdin, capture_output=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(argv[:6])} ...: exit {p.returncode}\n{p.stderr.decode(errors='replace')}")
    return p


@pytest.fixture(scope="module")
def node():
    if shutil.which("docker") is None or _run("docker", "info", check=False).returncode != 0:
        pytest.fail("no Docker engine answers: run `make docker-engine image` first")
    image = _run(str(REPO / "scripts" / "build-node-image"), timeout=600).stdout.decode().split()[-1]
    name = f"llmb-units-verify-{os.getpid()}"
    _run("docker", "rm", "-f", name, check=False)
    try:
        _run(
            "docker", "run", "-d", "--name", name, "--hostname", "units-verify", "--network", "none",
            "--label", "io.llm-bringup.test=units-verify",
            "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
            "--cap-add", "SYS_ADMIN",
            "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp:exec",
            "--stop-signal", "SIGRTMIN+3", image, "/lib/systemd/systemd",
        )
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            state = _run("docker", "exec", name, "systemctl", "is-system-running", check=False).stdout.decode().strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"node {name} did not boot in {BOOT_TIMEOUT_S} s (systemctl is-system-running: {state!r})")
        yield name
    finally:
        _run("docker", "rm", "-f", name, check=False)


def _cases() -> list[tuple[str, str, dict]]:
    """(directory label, unit label, service): one directory per sample host (their unit names
    repeat across hosts), one for all hostile services."""
    cases = [(f"{inv}/{host}", f"{inv}/{host}/{svc['name']}", svc) for inv, host, svc in sample_services()]
    cases += [("hostile", f"hostile/{svc['name']}", svc) for svc in hostile_services()]
    return cases


def _add(tar: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(path.lstrip("/"))
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def test_units_load_verify_and_run_with_the_plan_argv_and_environment(node):
    cases = _cases()
    buf = io.BytesIO()
    live: dict[str, tuple[str, dict]] = {}
    dirs = sorted({d for d, _l, _s in cases})
    with tarfile.open(fileobj=buf, mode="w") as tar:
        programs = set()
        for d, label in enumerate(dirs):
            _add(tar, f"/srv/units/{d}/label", label.encode())
        for i, (dir_label, label, svc) in enumerate(cases):
            unit, env = render(svc)  # production paths: what `verify` checks
            _add(tar, f"/srv/units/{dirs.index(dir_label)}/{svc['name']}.service", unit.encode())
            # the started copy: its own name and EnvironmentFile directory, so hosts do not collide
            live_name = f"llmbt{i}-{svc['name']}"
            unit, env = render(svc, f"/etc/llmb-units/{i}")
            _add(tar, f"/etc/systemd/system/{live_name}.service", unit.encode())
            _add(tar, f"/etc/llmb-units/{i}/{svc['name']}.env", env.encode(), 0o600)
            live[f"{live_name}.service"] = (label, svc)
            programs.add(svc["argv"][0])
            if svc.get("stop_argv"):
                programs.add(svc["stop_argv"][0])
        for prog in sorted(programs):
            _add(tar, prog, STUB.encode(), 0o755)
    _run("docker", "exec", "-i", node, "tar", "-C", "/", "--no-overwrite-dir", "-xf", "-", stdin=buf.getvalue())

    # 1. systemd-analyze verify, one directory at a time (its complaints name the unit)
    script = (
        'for d in /srv/units/*/; do echo "@@@ $(cat "$d/label")"; '
        'systemd-analyze verify "$d"*.service 2>&1; echo "@@@ rc=$?"; done'
    )
    out = _run("docker", "exec", node, "sh", "-c", script, timeout=120).stdout.decode(errors="replace")
    complaints: dict[str, list[str]] = {}
    where = ""
    for line in out.splitlines():
        if line.startswith("@@@ rc="):
            if line != "@@@ rc=0":
                complaints.setdefault(where, []).append(line[4:])
        elif line.startswith("@@@ "):
            where = line[4:]
        elif line.strip():
            complaints.setdefault(where, []).append(line)
    verified = out.count("@@@ rc=")
    assert verified == len(dirs), f"verify ran on {verified} of {len(dirs)} unit directories:\n{out}"
    assert not complaints, "systemd-analyze verify complained:\n" + "\n".join(
        f"  {where}:\n" + "\n".join(f"    {c}" for c in lines) for where, lines in sorted(complaints.items())
    )

    # 2. start every unit; the stub records what systemd ran
    _run("docker", "exec", node, "systemctl", "daemon-reload")
    _run("docker", "exec", node, "systemctl", "start", *sorted(live))
    want = {u: 1 + bool(svc.get("stop_argv")) for u, (_label, svc) in live.items()}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        listing = _run("docker", "exec", node, "sh", "-c", f"cd {DUMP} && ls -1 */*.argv", check=False)
        got: dict[str, int] = {}
        for entry in listing.stdout.decode().split():
            got[entry.split("/")[0]] = got.get(entry.split("/")[0], 0) + 1
        if all(got.get(u, 0) >= n for u, n in want.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    dumps = tarfile.open(fileobj=io.BytesIO(_run("docker", "exec", node, "tar", "-C", DUMP, "-cf", "-", ".").stdout))
    runs: dict[str, list[tuple[list[str], dict[str, str]]]] = {}
    for member in dumps.getmembers():
        p = Path(member.name)
        if p.suffix == ".argv":
            argv = dumps.extractfile(member).read().decode().split("\0")[:-1]
            raw = dumps.extractfile(member.name[: -len(".argv")] + ".environ").read().decode()
            env = dict(kv.split("=", 1) for kv in raw.split("\0") if kv)
            runs.setdefault(p.parent.name, []).append((argv, env))

    problems = []
    for unit, (label, svc) in sorted(live.items()):
        expected = [svc["argv"]] + ([svc["stop_argv"]] if svc.get("stop_argv") else [])
        seen = runs.get(unit, [])
        if sorted(a for a, _e in seen) != sorted(expected):
            status = _run("docker", "exec", node, "systemctl", "status", "--no-pager", "-n", "5", unit, check=False)
            problems.append(
                f"{label} ({unit}): systemd ran {[a for a, _e in seen]}\n    plan {expected}\n"
                + status.stdout.decode(errors="replace")
            )
            continue
        for _argv, env in seen:
            wrong = {k: env.get(k) for k, v in svc["env"].items() if env.get(k) != v}
            if wrong:
                problems.append(f"{label} ({unit}): environment differs from the plan: {wrong}")
    assert not problems, "\n".join(problems)


def test_trtllm_container_sshd_command_takes_the_mesh_directory_verbatim(node):
    """The TensorRT-LLM container's sshd command (planner argv, constant script, directory as $1)
    run by the node's /bin/sh and sshd: a hostile directory is one path, nothing of it runs."""
    from llmbctl.planner.engines.trtllm import sshd_argv

    mesh = "/srv/my mesh; touch /tmp/pwned; #$(touch /tmp/pwned2)"
    _run("docker", "exec", node, "mkdir", "-p", mesh)
    _run("docker", "exec", "-i", node, "tee", f"{mesh}/sshd_config", stdin=b"NotAnOption yes\n")
    p = _run("docker", "exec", node, *sshd_argv(mesh), check=False, timeout=30)
    err = p.stderr.decode(errors="replace")
    assert p.returncode != 0 and f"{mesh}/sshd_config: line 1: Bad configuration option: NotAnOption" in err, err
    left = _run("docker", "exec", node, "sh", "-c", "ls /tmp/pwned* 2>/dev/null; true").stdout.decode()
    assert left == "", f"the shell ran part of the directory name: {left}"


def test_group_units_target_and_restart_unit_verify(node):
    """The serving group's files of every multi-node sample host (units with PartOf=, BindsTo=, the
    member's ExecStartPre= wait and the ExecStopPost= hook, llmb-group.target, the head's
    llmb-group-restart.service): systemd-analyze verify, one directory per host, finds nothing."""
    groups = sample_groups()
    assert {inv for inv, _h, _g, _u in groups} >= {"h800", "h800-dp-ep", "h200-sglang", "sim"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add(tar, "/opt/llmb/bin/llmb-group", (REPO / "plugins/module_utils/llmb/grouptool.py").read_bytes(), 0o755)
        programs = {svc["argv"][0] for _i, _h, _g, units in groups for svc in units}
        programs |= {svc["stop_argv"][0] for _i, _h, _g, units in groups for svc in units if svc.get("stop_argv")}
        for prog in sorted(programs):
            _add(tar, prog, STUB.encode(), 0o755)
        for d, (inv, host, group, units) in enumerate(groups):
            _add(tar, f"/srv/groups/{d}/label", f"{inv}/{host}".encode())
            for fname, text in render_group(group, units).items():
                _add(tar, f"/srv/groups/{d}/{fname}", text.encode())
    _run("docker", "exec", "-i", node, "tar", "-C", "/", "--no-overwrite-dir", "-xf", "-", stdin=buf.getvalue())
    script = (
        'for d in /srv/groups/*/; do echo "@@@ $(cat "$d/label")"; '
        'systemd-analyze verify "$d"*.service "$d"*.target 2>&1; echo "@@@ rc=$?"; done'
    )
    out = _run("docker", "exec", node, "sh", "-c", script, timeout=120).stdout.decode(errors="replace")
    bad = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("@@@ ") or ln.startswith("@@@ rc=")
           and ln != "@@@ rc=0"]
    assert out.count("@@@ rc=") == len(groups), out
    assert not bad, out
