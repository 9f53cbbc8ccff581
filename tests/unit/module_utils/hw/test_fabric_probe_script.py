"""roles/verify/files/llmb_fabric_probe.py: detached servers collected by the clients' call, bad arguments
refused with exit status 2 naming the option (a stand-in ib_write_bw on PATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[4] / "roles" / "verify" / "files" / "llmb_fabric_probe.py"
FAKE = """#!/bin/sh
for a; do last=$a; done
echo " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
case "$last" in 127.0.0.1) echo " 65536 100 390.0 389.0 0.7";; *) sleep 0.3; echo " 65536 100 391.0 388.0 0.7";; esac
"""


def _run(tmp_path, *argv):
    (tmp_path / "bin").mkdir(exist_ok=True)
    tool = tmp_path / "bin" / "ib_write_bw"
    tool.write_text(FAKE)
    tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, env=env, timeout=60)


def test_serve_only_then_clients_collect_both_sides(tmp_path):
    state = str(tmp_path / "state")
    first = _run(tmp_path, "ibbw", "--serve-only", "--devices", "mlx5_0,mlx5_1", "--state-dir", state)
    assert first.returncode == 0 and json.loads(first.stdout)["serving"] == ["mlx5_0", "mlx5_1"]
    second = _run(tmp_path, "ibbw", "--devices", "mlx5_0,mlx5_1", "--state-dir", state, "--peer", "127.0.0.1")
    res = json.loads(second.stdout)
    assert [(s["device"], s["rc"]) for s in res["servers"]] == [("mlx5_0", 0), ("mlx5_1", 0)]
    assert all("388.0" in s["output"] for s in res["servers"]) and all("389.0" in c["output"] for c in res["clients"])
    assert res["clients"][0]["cmd"][-1] == "127.0.0.1" and not Path(state).exists()


def test_bad_arguments_exit_2_naming_the_option(tmp_path):
    bad = _run(tmp_path, "ibbw", "--devices", "mlx5_0;reboot", "--peer", "a b")
    assert bad.returncode == 2 and "--devices: 'mlx5_0;reboot'" in bad.stderr and "--peer: 'a b'" in bad.stderr
    bad = _run(tmp_path, "allreduce", "--hosts", "node1:8,$(id):8", "--env", "A B=1")
    assert bad.returncode == 2 and "--hosts" in bad.stderr and "--env" in bad.stderr
