"""playbooks/verify.yml end to end over a local connection, with stub accelerator tools on PATH that
print the real 2x H200 captures (../shared/fixtures/real/h200x2)."""

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
REAL = (ROOT / ".." / "shared" / "fixtures" / "real" / "h200x2").resolve()
BIN = Path(sys.executable).parent

from llmb.hw import split_capture  # noqa: E402
from llmb.hw.probes import QUERY_FIELDS  # noqa: E402

pytestmark = pytest.mark.skipif(not (BIN / "ansible-playbook").exists() or not REAL.exists(),
                                reason="needs the venv's ansible-playbook and the shared fixtures")


@pytest.fixture(scope="module")
def stub_path(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stubs")
    bindir = tmp / "bin"
    bindir.mkdir()

    def body(name):
        out = tmp / name
        out.write_text(split_capture((REAL / name).read_text())[1])
        return out

    cases = {"nvidia-smi": {"-q -x": body("smi-qx.txt"), f"--query-gpu={QUERY_FIELDS} --format=csv": body("query.txt"),
                            "topo -m": body("topo.txt"), "nvlink -s": body("nvlink-s.txt")},
             "numactl": {"-H": body("numactl.txt")}}
    for tool, answers in cases.items():
        lines = ["#!/bin/sh", 'case "$*" in']
        lines += [f'  "{a}") cat "{p}";;' for a, p in answers.items()]
        lines += ['  *) echo "unexpected: $*" >&2; exit 2;;', "esac"]
        (bindir / tool).write_text("\n".join(lines) + "\n")
        (bindir / tool).chmod(0o755 | stat.S_IEXEC)
    return f"{bindir}:{BIN}:/usr/bin:/bin"


def play(stub_path, *args, playbook="playbooks/verify.yml"):
    env = dict(os.environ, PATH=stub_path, LANG="C.UTF-8", LC_ALL="C.UTF-8", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    return subprocess.run([str(BIN / "ansible-playbook"), playbook, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)


def test_local_pass_writes_results_and_bundle(stub_path, tmp_path):
    r = play(stub_path, "-i", "localhost,", "-c", "local", "-e", "llmb_platform=h200-x2", "-e", "llmb_run_id=t1",
             "-e", f"llmb_artifacts_dir={tmp_path}", "-e", "verify_keep_bundle=true")
    assert r.returncode == 0, r.stdout[-3000:]
    res = json.loads((tmp_path / "verify" / "localhost.json").read_text())
    assert res["ok"] and res["platform"] == "h200-x2" and res["run_id"] == "t1"
    ids = {c["id"]: c for c in res["checks"]}
    assert ids["interconnect.GPU0-GPU1"]["found"] == "NV18" and ids["links.GPU0"]["found"] == "18 active"
    assert json.loads((tmp_path / "verify" / "summary.json").read_text())["ok"] is True
    bundle = tmp_path / "bundle" / "localhost"
    assert (bundle / "topo.txt").exists() and (bundle / "meta.json").exists()
    hw = subprocess.run([sys.executable, str(ROOT / "scripts" / "hwfacts"), "--bundle", str(tmp_path / "bundle"),
                         "--platform", "h200-x2"], capture_output=True, text=True, check=False)
    assert hw.returncode == 0, hw.stderr


def test_two_hosts_fail_once_listing_both(stub_path, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    accel_nodes:\n      hosts:\n"
        "        node-a: {ansible_connection: local, llmb_platform: h200-hgx8}\n"
        "        node-b: {ansible_connection: local, llmb_platform: h100-x1}\n"
        "  vars:\n    ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n"
    )
    r = play(stub_path, "-i", str(inv), "-e", f"llmb_artifacts_dir={tmp_path}")
    assert r.returncode == 2, r.stdout[-3000:]
    out = r.stdout
    assert out.count("fatal:") == 1  # one failure: the report, not each host's probe
    assert "verify: 2 of 2 hosts deviate" in out
    assert "node-a: device.count: expected 8 devices, found 2 devices." in out
    assert "node-b: device.model: expected every device matches /^NVIDIA H100 80GB HBM3$/" in out
    summary = json.loads((tmp_path / "verify" / "summary.json").read_text())
    assert summary["failed_hosts"] == ["node-a", "node-b"]


def test_check_mode_runs_the_same_read_only_probe(stub_path, tmp_path):
    r = play(stub_path, "--check", "-v", "-i", "localhost,", "-c", "local", "-e", "llmb_platform=h200-x2",
             "-e", f"llmb_artifacts_dir={tmp_path}")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "changed=0" in r.stdout
    # the registered result names the node's own host name (the fabric's mpirun -H names its launcher by it)
    assert f"node_hostname: {socket.gethostname()}" in r.stdout
    assert json.loads((tmp_path / "verify" / "localhost.json").read_text())["ok"] is True
