"""An engine upgrade and its rollback through the console (issue 27, points 2-3), on its own simulated
2-node cluster serving one DP group (vLLM DP 2 x TP 8, rank 0 on node1, a headless rank on node2).

The engine double ships as a wheel named like the engine (tests/enginesim/build_wheel.py); the
nodes' wheelhouse gets two releases of it, 0.19.1 (sim-cluster's) and 0.23.0, so the engine stage
really installs the new release into its own venv beside the running one. In order:

1. `llmb up` brings the cluster up on 0.19.1: lock history entry 1; the units, environment files
   and the argv of the running processes are kept as they are (bytes).
2. llmb_engine_version: 0.23.0, `llmb up --check`: the plan diff (engine, argv, units) per host and
   service, and nothing moves on the nodes.
3. The double's never_healthy fault planted on node1, `llmb up`: stages 0-4 everywhere, the serve
   stage for the group (node1, node2), which does not become healthy: the run stops (exit 1) with
   `llmb rollback -i INV --to 1` in its message and in the report; no bench ran.
4. Fault removed, `llmb rollback -i INV --to 1`: the units, environment files and argv are those of
   step 1, byte for byte; the API answers.
5. `llmb up` again (no fault): group 1 healthy, the rest of the stages, entry 2 recorded, the API
   runs the double 0.23.0; `llmb rollback` (default: the entry before) gives step 1's bytes again.

Own cluster (<LLMB_E2E_CLUSTER>-upgrade); about five bring-ups long.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CLUSTER, ROOT, hub_for, sim_up

sys.path.insert(0, str(ROOT / "tests"))
from enginesim import build_wheel  # noqa: E402

NAME = f"{CLUSTER}-upgrade"
OLD, NEW = "0.19.1", "0.23.0"
FAULTS = "/etc/llmb-enginesim/faults"
NODES = ("node1", "node2")


def node(*cmd: str, host: str = "node1", check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", f"{NAME}-{host}", *cmd], capture_output=True, text=True, check=check)


def set_line(path: Path, key: str, value: str | None) -> None:
    """Replace ``key: ...`` in a YAML file (never a second key); None removes it."""
    text = re.sub(rf"(?m)^{key}:.*\n", "", path.read_text())
    path.write_text(text + (f"{key}: {value}\n" if value is not None else ""))


@pytest.fixture(scope="module")
def dp_cluster(tmp_path_factory):
    """(inventory, hub URL): a fresh 2-node cluster, inventories/sim's variables with DP 2 x TP 8 instead of
    TP 8 x PP 2 over Ray, engine 0.19.1, and a wheelhouse with the double's releases 0.19.1 and 0.23.0."""
    inv = sim_up(NAME)
    gv = inv.parent / "group_vars"
    if gv.is_symlink() or gv.exists():
        gv.unlink() if gv.is_symlink() else shutil.rmtree(gv)
    shutil.copytree(ROOT / "inventories/sim/group_vars", gv)
    serve = gv / "all" / "serve.yml"
    set_line(serve, "llmb_pipeline_parallel", "1")
    set_line(serve, "llmb_vllm_multinode", None)
    set_line(serve, "llmb_data_parallel", "2")
    set_line(serve, "llmb_data_parallel_local", "1")
    set_line(serve, "llmb_health_timeout_s", "40")  # the planted unhealthy group fails within it
    set_line(gv / "all" / "llmb.yml", "llmb_engine_version", OLD)
    wheels = tmp_path_factory.mktemp("wheels")
    whl = build_wheel.build(wheels, "vllm", NEW)
    for h in NODES:
        subprocess.run(["docker", "cp", str(whl), f"{NAME}-{h}:/opt/llmb/wheelhouse/{whl.name}"], check=True)
    with hub_for(NAME, tmp_path_factory, "-upgrade") as (_hub, url):
        yield inv, url


def llmb(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_RUN_ID", "LLMB_ARTIFACTS_DIR")}
    env.update(LANG="C.UTF-8", LC_ALL="C.UTF-8", COLUMNS="200")
    t0 = time.monotonic()
    res = subprocess.run([str(ROOT / ".venv/bin/llmb"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    print(f"llmb {' '.join(args[:1])} {' '.join(a for a in args[1:] if a.startswith('--'))}: "
          f"exit {res.returncode} in {time.monotonic() - t0:.0f}s")
    return res


def snapshot() -> dict[str, bytes]:
    """What 'units and argv byte for byte' means: every unit and environment file the serve stage wrote,
    and the command line of every running llmb unit's main process, on both nodes."""
    out: dict[str, bytes] = {}
    for h in NODES:
        files = sorted(node("find", "/etc/systemd/system", "/etc/llmb", "-maxdepth", "1", "-type", "f", "(", "-name",
                            "llmb-*", "-o", "-name", "*.env", ")", host=h).stdout.split())
        for f in files:
            out[f"{h}:{f}"] = subprocess.run(["docker", "exec", f"{NAME}-{h}", "cat", f], capture_output=True,
                                             check=True).stdout
        units = [Path(f).name[: -len(".service")] for f in files if f.endswith(".service") and "group" not in f]
        for u in units:
            pid = node("systemctl", "show", "-p", "MainPID", "--value", u, host=h).stdout.strip()
            if pid and pid != "0":
                out[f"{h}:argv:{u}"] = subprocess.run(["docker", "exec", f"{NAME}-{h}", "cat", f"/proc/{pid}/cmdline"],
                                                      capture_output=True, check=True).stdout
    return out


def running_release() -> str:
    """The release the API process on node1 runs (its venv, from the process's argv)."""
    pid = node("systemctl", "show", "-p", "MainPID", "--value", "llmb-vllm").stdout.strip()
    argv = node("cat", f"/proc/{pid}/cmdline").stdout.split("\0")
    m = next((re.search(r"/venvs/vllm-([^/]+)/", a) for a in argv if "/venvs/vllm-" in a), None)
    return m.group(1) if m else "?"


def run_dir(res: subprocess.CompletedProcess) -> Path:
    m = re.search(r"report:\s+(\S+)/report\.html", res.stdout)
    assert m, res.stdout[-3000:]
    return Path(m.group(1))


STATE: dict = {}


def test_1_first_bring_up_records_entry_1(dp_cluster):
    inv, hub = dp_cluster
    res = llmb("up", "-i", str(inv), "-e", f"weights_hf_endpoint={hub}")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "applied: lock history entry 1" in res.stdout
    assert sorted(p.name for p in (inv.parent / "llmb.lock.history").glob("0*.json")) == ["0001.json"]
    assert running_release() == OLD
    snap = snapshot()
    assert any(k.endswith(":argv:llmb-vllm") for k in snap) and sum(":argv:" in k for k in snap) == 2, sorted(snap)
    STATE["before"] = snap


def test_2_check_mode_shows_the_diff_and_moves_nothing(dp_cluster):
    inv, hub = dp_cluster
    set_line(inv.parent / "group_vars" / "all" / "llmb.yml", "llmb_engine_version", NEW)
    res = llmb("up", "-i", str(inv), "-e", f"weights_hf_endpoint={hub}", "--check")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    out = res.stdout
    assert "plan diff: applied lock 1" in out, out[-4000:]
    for h in NODES:
        assert f"\n{h}\n  engine:\n    - vllm {OLD} (host: /opt/llmb/venvs/vllm-{OLD})\n    + vllm {NEW}" in out, out[-4000:]
        assert f"\n{h} llmb-vllm\n  argv:\n    - /opt/llmb/venvs/vllm-{OLD}/bin/vllm\n    + /opt/llmb/venvs/vllm-{NEW}/bin/vllm" in out
    assert "apply order (group by group, health between): group 1: node1, node2" in out
    md = (run_dir(res) / "report.md").read_text()
    assert "Plan diff and groups" in md and f"+ vllm {NEW}" in md
    assert snapshot() == STATE["before"]  # nothing moved: same files, same processes
    assert node("test", "-e", f"/opt/llmb/venvs/vllm-{NEW}", check=False).returncode != 0


def test_3_an_unhealthy_group_stops_the_upgrade_with_the_rollback_command(dp_cluster):
    inv, hub = dp_cluster
    node("sh", "-c", f"mkdir -p {Path(FAULTS).parent} && echo never_healthy > {FAULTS}")
    res = llmb("up", "-i", str(inv), "-e", f"weights_hf_endpoint={hub}")
    assert res.returncode == 1, res.stdout[-5000:] + res.stderr[-2000:]
    want = f"Roll back: llmb rollback -i {inv} --to 1"
    assert "upgrade stopped at group 1 (node1, node2): not healthy" in res.stdout and want in res.stdout, res.stdout[-4000:]
    rd = run_dir(res)
    rep = json.loads((rd / "report.json").read_text())
    assert rep["ok"] is False and want in rep["upgrade"]["message"]
    assert [g["status"] for g in rep["upgrade"]["groups"]] == ["NOT HEALTHY"]
    assert not (rd / "bench").exists()  # nothing after the group that failed
    assert running_release() == NEW  # the group was moved, and is what failed
    assert sorted(p.name for p in (inv.parent / "llmb.lock.history").glob("0*.json")) == ["0001.json"]


def test_4_rollback_restores_units_and_argv_byte_for_byte(dp_cluster):
    inv, hub = dp_cluster
    node("rm", "-f", FAULTS)
    res = llmb("rollback", "-i", str(inv), "--to", "1", "-e", f"weights_hf_endpoint={hub}")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "rolling back to lock history entry 1" in res.stdout
    after = snapshot()
    assert sorted(after) == sorted(STATE["before"])
    changed = [k for k in after if after[k] != STATE["before"][k]]
    assert changed == [], changed
    assert running_release() == OLD
    lock = json.loads((inv.parent / "llmb.lock.json").read_text())
    assert lock["engine"]["version"] == OLD


def test_5_a_healthy_upgrade_goes_through_and_rollback_defaults_to_the_entry_before(dp_cluster):
    inv, hub = dp_cluster
    res = llmb("up", "-i", str(inv), "-e", f"weights_hf_endpoint={hub}")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "group 1 of 1: node1, node2" in res.stdout and "applied: lock history entry 2" in res.stdout
    assert running_release() == NEW
    rep = json.loads((run_dir(res) / "report.json").read_text())
    assert rep["ok"] is True and [g["status"] for g in rep["upgrade"]["groups"]] == ["healthy"]
    assert rep["bench"], "the stages after serve ran"
    res = llmb("rollback", "-i", str(inv), "-e", f"weights_hf_endpoint={hub}")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "rolling back to lock history entry 1" in res.stdout
    after = snapshot()
    assert [k for k in after if after.get(k) != STATE["before"].get(k)] == [] and sorted(after) == sorted(STATE["before"])
