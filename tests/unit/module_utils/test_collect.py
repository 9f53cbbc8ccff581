"""llmb collect: the node side (llmb.collect.gather through a fake run_command), the one secret rule
on text (llmbctl.secrets.redact_text), the host bundle and the archive (llmbctl.collect)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from llmb import collect as nc
from llmbctl import collect as cc
from llmbctl.secrets import MASK, redact_text

REAL = Path("/work/shared/fixtures/real/h100/query.txt")
KERNEL = """2026-11-27T05:00:01+0000 node1 kernel: Linux version 6.8.0
2026-11-27T05:10:00+0000 node1 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.
2026-11-27T05:10:01+0000 node1 kernel: pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received
2026-11-27T05:11:00+0000 node1 kernel: e1000e: eth0 NIC Link is Up
"""


def fake_run(answers):
    calls = []

    def run(argv):
        calls.append(argv)
        for prefix, answer in answers.items():
            if " ".join(argv).startswith(prefix):
                if isinstance(answer, Exception):
                    raise answer
                return answer
        return (1, "", "unknown")
    run.calls = calls
    return run


def test_gather_reads_units_journals_kernel_errors_and_versions():
    query = "index, name, driver_version, vbios_version, serial\n0, NVIDIA H100 80GB HBM3, 580.159.04, 96.00.99.00.01, 1650000000001\n"
    run = fake_run({"journalctl -u llmb-vllm.service": (0, "line\n" * 1000, ""), "journalctl -k": (0, KERNEL, ""),
                    "uname -r": (0, "6.8.0\n", ""), "nvidia-smi": (0, query, ""),
                    "/v/bin/vllm --version": (0, "INFO x\n0.19.1\n", ""),
                    "/v/bin/python -c": (0, "vllm 0.19.1\ntorch 2.9.0\n", ""),
                    "dpkg-query": (0, "libc6:amd64 2.36-9\nopenssh-server 1:9.2p1\n", ""),
                    "docker logs": (0, "engine says hi\n", "")})
    files = nc.gather(run, ["llmb-vllm", "llmb-group.target"], ["llmb-sglang"], max_bytes=1000,
                      version_command=["/v/bin/vllm", "--version"], venv="/v", vendor="nvidia",
                      read=lambda p: "[Unit]\n" if p.endswith(("llmb-vllm.service", "llmb-group.target"))
                      else 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n' if p == "/etc/os-release" else None)
    assert files["units/llmb-vllm.service"] == "[Unit]\n" and "units/llmb-group.target" in files
    journal = files["journal/llmb-vllm.service.log"]
    head, rest = journal.split("\n", 1)
    assert head == f"[llmb collect: the first {5000 - len(rest)} bytes cut, size cap 1000]"
    assert len(rest) <= 1000 and rest.startswith("line\n") and rest == "line\n" * (len(rest) // 5)
    assert files["engine/llmb-sglang.log"] == "engine says hi\n"
    assert files["kernel.log"].splitlines() == KERNEL.splitlines()[1:3]  # the Xid and the AER line only
    v = json.loads(files["versions.json"])
    assert v["devices"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04",
                             "vbios": "96.00.99.00.01", "serial": "1650000000001"}]
    assert (v["engine"], v["kernel"], v["os"]) == ("0.19.1", "6.8.0", "Debian GNU/Linux 12 (bookworm)")
    assert v["engine_venv_packages"] == {"torch": "2.9.0", "vllm": "0.19.1"}
    assert v["system_packages"]["openssh-server"] == "1:9.2p1"
    # what failed is said: the group target's journal (no answer given) has its exit status
    cmds = json.loads(files["commands.json"])
    assert {"argv": ["journalctl", "-u", "llmb-group.target", "-b", "--no-pager", "-o", "short-iso"], "rc": 1,
            "error": "unknown"} in cmds


def test_gather_falls_back_to_dmesg_and_survives_a_missing_tool():
    run = fake_run({"journalctl -k": (1, "", "no journal"), "dmesg": (0, KERNEL, ""),
                    "nvidia-smi": OSError("nvidia-smi: not found")})
    files = nc.gather(run, [], [], vendor="nvidia", read=lambda p: None)
    assert "Xid" in files["kernel.log"] and json.loads(files["versions.json"])["devices"] == []
    assert any(c.get("error") == "nvidia-smi: not found" for c in json.loads(files["commands.json"]))


def test_driver_versions_on_the_real_query_capture():
    text = "\n".join(ln for ln in REAL.read_text().splitlines() if not ln.startswith("#"))
    got = nc.driver_versions(text)
    assert got and got[0]["driver"] == "580.159.04" and got[0]["name"].startswith("NVIDIA H100")


@pytest.mark.parametrize(("text", "want"), [
    ("VLLM_API_KEY=sk-abc123 other=1", f"VLLM_API_KEY={MASK} other=1"),
    ("non-default args: {'api_key': 'sk-zzz', 'port': 8000}", f"non-default args: {{'api_key': '{MASK}', 'port': 8000}}"),
    ('{"hf_token": "hf_x1", "model": "m"}', f'{{"hf_token": "{MASK}", "model": "m"}}'),
    ("vllm serve /m --api-key sk-q1 --port 8000", f"vllm serve /m --api-key {MASK} --port 8000"),
    ("ExecStart=/x --hf-token=abc --y", f"ExecStart=/x --hf-token={MASK} --y"),
    ("https_proxy=http://u:pw1234@proxy:3128", f"https_proxy=http://u:{MASK}@proxy:3128"),
    ("Authorization: Bearer hf_abcdef", f"Authorization: Bearer {MASK}"),
    ("the model loaded in 3 s", "the model loaded in 3 s"),
])
def test_redact_text_by_the_one_rule(text, want):
    assert redact_text(text) == want


def test_redact_text_masks_known_values_anywhere():
    assert redact_text("sudo: pw=x; echo s3cr3t-pass; token hf_abcd", ["s3cr3t-pass", "hf_abcd", "ab"]) == \
        f"sudo: pw=x; echo {MASK}; token {MASK}"


def test_secret_values_from_the_environment():
    env = {"HF_TOKEN": "hf_1234", "PATH": "/bin", "HTTPS_PROXY": "http://u:p4ss@h:1", "AWS_SECRET_ACCESS_KEY": "a/b+c"}
    assert cc.secret_values(env, ["vaultpw", None, "x"]) == sorted(["hf_1234", "http://u:p4ss@h:1", "a/b+c", "vaultpw"])


def test_write_host_and_pack(tmp_path):
    run = tmp_path / "run1"
    (run / "bundle" / "node1").mkdir(parents=True)
    (run / "bundle" / "node1" / "query.txt").write_text("index, name\n0, NVIDIA H100\n")
    (run / "deployment.json").write_text(json.dumps({"run": {"id": "run1"}, "api_key": "sk-planted1"}))
    files = {"journal/llmb-vllm.service.log": "started with VLLM_API_KEY=sk-planted1 and hf_tok999\n",
             "units/llmb-vllm.service": "[Service]\nEnvironmentFile=/etc/llmb/llmb-vllm.env\n"}
    out = cc.write_host(str(run), "node1", files, ["hf_tok999"])
    assert out["files"] == 2
    host = run / "collect" / "node1"
    assert (host / "journal/llmb-vllm.service.log").read_text() == f"started with VLLM_API_KEY={MASK} and {MASK}\n"
    assert subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=host, capture_output=True).returncode == 0
    packed = cc.pack(str(run), "run1", ["node1", "node2"], ["hf_tok999"])
    with tarfile.open(packed["archive"]) as tar:
        names = tar.getnames()
        data = {n: tar.extractfile(n).read() for n in names if tar.getmember(n).isfile()}
    top = "llmb-collect-run1/"
    assert {top + p for p in ("index.html", "MANIFEST.json", "SHA256SUMS", "deployment.json",
                              "verify/node1/query.txt", "hosts/node1/journal/llmb-vllm.service.log")} <= set(names)
    assert not any(b"sk-planted1" in d or b"hf_tok999" in d for d in data.values())
    manifest = json.loads(data[top + "MANIFEST.json"])
    for f in manifest["files"]:
        assert hashlib.sha256(data[top + f["path"]]).hexdigest() == f["sha256"]
    assert b"node2" in data[top + "index.html"] and b"verify/node1/query.txt" in data[top + "index.html"]


@pytest.mark.parametrize("bad", ["../etc/passwd", "/etc/shadow", "a/../../b", ""])
def test_write_host_refuses_paths_out_of_its_directory(tmp_path, bad):
    with pytest.raises(cc.CollectError, match="expected a relative path"):
        cc.write_host(str(tmp_path), "node1", {bad: "x"})
