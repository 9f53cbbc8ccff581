"""Node facts: bundles on disk, the node-side probe runner (with stub tools on PATH), scripts/hwfacts."""

import json
import os
import stat
import subprocess
import sys

import hwsynth
import pytest
from conftest import FIXTURES, ROOT
from llmb.hw import split_capture
from llmb.hw.probes import bundle_text, hccn_devices, run_probes, write_bundle
from llmbctl.hw.facts import build_facts, norm_bus, read_bundle

HWFACTS = ROOT / "scripts" / "hwfacts"


def test_norm_bus():
    assert norm_bus("00000000:1B:00.0") == norm_bus("0000:1b:00.0") == "0000:1b:00.0"
    assert norm_bus("0000000C:00:00.0") == "000c:00:00.0"


def test_real_bundle_facts_h200():
    facts = build_facts(read_bundle(str(FIXTURES / "real" / "h200x2")))
    assert facts["vendor"] == "nvidia" and facts["driver_version"] == "580.159.04"
    assert [d["model"] for d in facts["devices"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert [d["bus_id"] for d in facts["devices"]] == ["0000:00:06.0", "0000:00:07.0"]
    assert facts["matrix"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert [len(facts["device_links"][g]) for g in ("GPU0", "GPU1")] == [18, 18]
    assert [d["numa_node"] for d in facts["devices"]] == [0, 0]
    assert facts["numa"]["nodes"][0]["cpus"] == list(range(32))
    assert facts["devices"][0]["fabric_state"] == "Completed"


def test_bundle_roundtrip(tmp_path):
    probes = hwsynth.nvidia(link_down=[(2, 3)])
    write_bundle({"probes": probes}, str(tmp_path))
    back = read_bundle(str(tmp_path))
    assert sorted(p["name"] for p in back) == sorted(p["name"] for p in probes)
    a, b = build_facts(probes), build_facts(back)
    for key in ("driver_version", "devices", "matrix", "device_links", "numa", "fabric_manager", "rdma_ports"):
        assert a[key] == b[key], key
    meta, body = split_capture((tmp_path / "fabricmanager.txt").read_text())
    assert meta["command"] == "systemctl is-active nvidia-fabricmanager" and body == "active\n"


def test_bundle_text_keeps_stderr_in_header():
    text = bundle_text({"cmd": "hccn_tool -i 3 -ip -g", "rc": 255, "stdout": "", "stderr": "Get ip failed\nret -1"})
    meta, body = split_capture(text)
    assert meta == {"command": "hccn_tool -i 3 -ip -g", "exit_status": 255, "stderr": "Get ip failed | ret -1"}


def test_hccn_devices_from_npu_smi():
    text = (FIXTURES / "public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt").read_text()
    if any(os.path.exists(f"/dev/davinci{i}") for i in range(16)):
        pytest.skip("this machine has Ascend devices")
    assert hccn_devices(split_capture(text)[1]) == list(range(16))
    a2 = (FIXTURES / "public/npu-smi/910b3-8npu-idle-24.1rc1-ms-swift.txt").read_text()
    assert hccn_devices(split_capture(a2)[1]) == list(range(8))
    assert hccn_devices("dcmi module initialize failed. ret is -8005\n") == []


def _stub(bindir, name, cases):
    """A shell script answering each argument string with a file's content (or an exit status)."""
    lines = ["#!/bin/sh", 'case "$*" in']
    for args, (path, rc) in cases.items():
        body = f'cat "{path}"; ' if path else ""
        lines.append(f'  "{args}") {body}exit {rc};;')
    lines += ['  *) echo "stub $0: unexpected arguments: $*" >&2; exit 2;;', "esac"]
    p = bindir / name
    p.write_text("\n".join(lines) + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def _body(tmp_path, rel):
    out = tmp_path / rel.replace("/", "_")
    out.write_text(split_capture((FIXTURES / rel).read_text())[1])
    return out


def test_runner_on_stub_nvidia_tools(tmp_path, monkeypatch):
    real = "real/h200x2/"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    from llmb.hw.probes import QUERY_FIELDS

    _stub(bindir, "nvidia-smi", {
        "-q -x": (_body(tmp_path, real + "smi-qx.txt"), 0),
        f"--query-gpu={QUERY_FIELDS} --format=csv": (_body(tmp_path, real + "query.txt"), 0),
        "topo -m": (_body(tmp_path, real + "topo.txt"), 0),
        "nvlink -s": (_body(tmp_path, real + "nvlink-s.txt"), 0),
    })
    _stub(bindir, "numactl", {"-H": (_body(tmp_path, real + "numactl.txt"), 0)})
    _stub(bindir, "lscpu", {"-J": (_body(tmp_path, "real/h100/lscpu-json.txt"), 0)})
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setattr("llmb.hw.probes.EXTRA_PATH", ())
    raw = run_probes()
    assert raw["vendor"] == "nvidia"
    names = {p["name"]: p for p in raw["probes"]}
    assert {"smi-qx", "query", "topo", "nvlink-s", "numactl", "lscpu-json", "cuda-init", "pci"} <= set(names)
    assert names["topo"]["rc"] == 0 and names["topo"]["cmd"] == "nvidia-smi topo -m"
    if not os.path.exists("/usr/bin/systemctl") and not os.path.exists("/bin/systemctl"):
        assert names["fabricmanager"]["rc"] == 127
    facts = build_facts(raw["probes"], raw["vendor"])
    assert facts["matrix"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert len(facts["devices"]) == 2 and facts["driver_version"] == "580.159.04"
    assert facts["fabric_manager"]["cuda_init"]["present"] in (True, False)


def test_runner_on_stub_ascend_tools(tmp_path, monkeypatch):
    if os.path.exists("/dev/davinci0"):
        pytest.skip("this machine has Ascend devices")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    npu = _body(tmp_path, "public/npu-smi/a3-16chip-ascend910-loaded-with-procs-vllm-ascend-3002.txt")
    _stub(bindir, "npu-smi", {"info": (npu, 0), "info -t topo": (None, 1)})
    up = tmp_path / "up.txt"
    up.write_text("link status: UP\n")
    ip = tmp_path / "ip.txt"
    ip.write_text("ipaddr:10.0.0.1\nnetmask:255.255.255.0\n")
    nh = tmp_path / "nh.txt"
    nh.write_text("net health status: Success\n")
    cases = {}
    for i in range(16):
        cases[f"-i {i} -link -g"] = (up, 0) if i != 9 else (tmp_path / "none", 1)
        cases[f"-i {i} -ip -g"] = (ip, 0)
        cases[f"-i {i} -net_health -g"] = (nh, 0)
    (tmp_path / "none").write_text("")
    _stub(bindir, "hccn_tool", cases)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setattr("llmb.hw.probes.EXTRA_PATH", ())
    raw = run_probes()
    assert raw["vendor"] == "ascend"
    hccn = [p for p in raw["probes"] if p["name"].startswith("hccn-")]
    assert len(hccn) == 48
    facts = build_facts(raw["probes"], raw["vendor"])
    assert len(facts["devices"]) == 16 and facts["driver_version"] == "25.2.0"
    assert facts["hccn"]["NPU3"] == {"device": 3, "link": "UP", "ipaddr": "10.0.0.1", "netmask": "255.255.255.0",
                                     "net_health": "Success"}
    assert "link" not in facts["hccn"]["NPU9"] and facts["hccn"]["NPU9"]["errors"][0].startswith("-link: exit status 1")
    assert any(e["probe"] == "npu-topo" for e in facts["errors"])


def _hwfacts(*args):
    return subprocess.run([sys.executable, str(HWFACTS), *args], capture_output=True, text=True, check=False)


def test_hwfacts_parses_every_real_capture():
    paths = sorted(str(p) for p in (FIXTURES / "real").rglob("*.txt"))
    r = _hwfacts(*paths)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [o["file"] for o in out] == paths and all("kind" in o for o in out)


def test_hwfacts_topo_contract():
    r = _hwfacts("--kind", "nvidia-smi-topo", str(FIXTURES / "public/nvidia-smi-topo/h800-8gpu-nv8-4nic-clipped-narrow-terminal.txt"))
    out = json.loads(r.stdout)
    assert set(out) >= {"kind", "gpus", "nics", "links"}
    assert set(out["gpus"][0]) >= {"index", "cpu_affinity", "numa_affinity"}
    assert out["nics"][3] == {"index": 3, "name": "mlx5_3"} and out["links"]["GPU0"]["GPU1"] == "NV8"


def test_hwfacts_errors_and_bundle(tmp_path):
    bad = tmp_path / "topo.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV18\n")
    r = _hwfacts(str(bad))
    assert r.returncode == 2 and "column GPU1 has no row" in r.stderr and str(bad) in r.stderr
    host = tmp_path / "bundle" / "gpu-7"
    write_bundle({"probes": hwsynth.nvidia(link_down=[(1, 0)])}, str(host))
    r = _hwfacts("--bundle", str(tmp_path / "bundle"), "--platform", "h100-hgx8")
    assert r.returncode == 1
    assert "gpu-7: links.GPU1: expected 18 active links at 26.562 GB/s, found 17 active; inactive: 0" in r.stderr
    assert json.loads(r.stdout)["host"] == "gpu-7"
    r = _hwfacts("--bundle", str(tmp_path / "bundle"), "--platform", "h100-hgx8", "--waive", "links.*",
                 "--waive", "interconnect.*")
    assert r.returncode == 0, r.stderr
    r = _hwfacts("--bundle", str(tmp_path / "bundle"), "--platform", "nope")
    assert r.returncode == 2 and "unknown platform profile 'nope'" in r.stderr  # bad input, not a failed check
