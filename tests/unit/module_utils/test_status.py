"""llmb status: the node side (llmb.status: observe through a fake run_command, judge) and the
controller side (llmbctl.status: the records with the deployment's hosts, rows, exit status)."""

from __future__ import annotations

import json
from pathlib import Path

from llmb import status as st
from llmbctl import status as cst

REAL_QUERY = Path("/work/shared/fixtures/real/h100/query.txt")
# the simulated nvidia-smi of tests/sim (accelsim), as the sim cluster's nodes print it
SIM_QUERY = "index, memory.used [MiB], memory.total [MiB]\n0, 1024 MiB, 81559 MiB\n1, 512 MiB, 81559 MiB\n"
UNIT = "# Ansible managed - from the launch plan; do not edit on the node.\n[Unit]\nDescription=x\n\n[Service]\nLimitNOFILE=1048576\n"
HEALTH = {"url": "http://10.0.0.1:8000/health", "models_path": "/v1/models", "expect_model": "kimi"}


def show(**kv) -> str:
    base = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": "0",
            "ActiveEnterTimestamp": "Fri 2026-11-27 05:56:13 UTC", "MainPID": "42",
            "FragmentPath": "/etc/systemd/system/llmb-vllm.service", "DropInPaths": "", "NeedDaemonReload": "no",
            "UnitFileState": "enabled"}
    base.update(kv)
    return "".join(f"{k}={v}\n" for k, v in base.items())


def fake_run(answers: dict):
    def run(argv):
        for prefix, answer in answers.items():
            if " ".join(argv).startswith(prefix):
                return answer
        return (1, "", f"no such command {argv[0]}")
    return run


def fake_get(answers: dict):
    def get(url, timeout=5, token=None):
        return answers.get(url, (None, b""))
    return get


SERVICES = [{"name": "llmb-vllm", "kind": "systemd", "role": "api", "health": HEALTH, "ready": None,
             "api": {"base_url": "http://10.0.0.1:8000/v1"}, "unit": UNIT}]
ENGINE = {"name": "vllm", "version": "0.19.1", "install": "host", "version_command": ["/v/bin/vllm", "--version"]}
UP = {"http://10.0.0.1:8000/health": (200, b""),
      "http://10.0.0.1:8000/v1/models": (200, json.dumps({"data": [{"id": "kimi"}]}).encode()),
      "http://10.0.0.1:8000/version": (200, b'{"version": "0.19.1"}')}


def observe(tmp_path, answers, get=UP, unit_text=UNIT, model_commit="a" * 40):
    (tmp_path / ".llmb-weights.json").write_text(json.dumps({"format": 1, "files": {}, "commit": model_commit}))
    obs = st.observe(fake_run(answers), SERVICES, ENGINE, {"dir": str(tmp_path)}, None, True, get=fake_get(get))
    obs["services"][0]["unit_text"] = unit_text  # the file under /etc/systemd/system, here given
    return obs


RUNNING = {"systemctl show": (0, show(), ""), "/v/bin/vllm --version": (0, "0.19.1\n", ""),
           "nvidia-smi": (0, SIM_QUERY, "")}


def test_all_as_planned(tmp_path):
    obs = observe(tmp_path, RUNNING)
    s = obs["services"][0]
    assert (s["state"], s["restarts"], s["pid"], s["release"]) == ("active", 0, 42, "0.19.1")
    assert s["health"]["ok"] is True and "serves kimi" in s["health"]["detail"]
    assert obs["installed_release"] == "0.19.1" and obs["model_commit"] == "a" * 40
    assert obs["gpu"]["gpus"] == [{"index": 0, "used_mib": 1024, "total_mib": 81559},
                                  {"index": 1, "used_mib": 512, "total_mib": 81559}]
    assert st.judge(SERVICES, obs, ENGINE, {"commit": "a" * 40}) == []


def test_each_drift_is_named(tmp_path):
    edited = UNIT.replace("LimitNOFILE=1048576", "LimitNOFILE=65536")
    get = dict(UP, **{"http://10.0.0.1:8000/version": (200, b'{"version": "0.20.0"}')})
    answers = dict(RUNNING, **{"/v/bin/vllm --version": (0, "0.20.0\n", "")})
    obs = observe(tmp_path, answers, get=get, unit_text=edited, model_commit="b" * 40)
    drift = st.judge(SERVICES, obs, ENGINE, {"commit": "a" * 40})
    by = {(d["service"], d["check"]): d for d in drift}
    assert "LimitNOFILE=65536" in by[("llmb-vllm", "unit")]["found"] and "line 6" in by[("llmb-vllm", "unit")]["found"]
    assert by[("llmb-vllm", "release")]["found"] == "0.20.0"
    assert by[(None, "release")]["found"].startswith("0.20.0 installed")
    assert by[(None, "model")] == {"service": None, "check": "model", "expected": "a" * 40, "found": "b" * 40}
    assert "llmb-vllm: unit: expected" in st.drift_text(drift)


def test_killed_and_unhealthy_services(tmp_path):
    dead = dict(RUNNING, **{"systemctl show": (0, show(ActiveState="failed", SubState="failed", MainPID="0"), "")})
    drift = st.judge(SERVICES, observe(tmp_path, dead), ENGINE, {})
    assert drift == [{"service": "llmb-vllm", "check": "state", "expected": "active", "found": "failed (failed)"}]
    sick = observe(tmp_path, RUNNING, get={"http://10.0.0.1:8000/health": (503, b"")})
    assert sick["services"][0]["health"] == {"ok": False, "detail": "GET http://10.0.0.1:8000/health -> 503"}
    assert [d["check"] for d in st.judge(SERVICES, sick, ENGINE, {})] == ["health"]
    wrong = observe(tmp_path, RUNNING, get=dict(UP, **{"http://10.0.0.1:8000/v1/models": (200, b'{"data": []}')}))
    assert "not 'kimi'" in wrong["services"][0]["health"]["detail"]
    gone = observe(tmp_path, dict(RUNNING, **{"systemctl show": (0, show(LoadState="not-found"), "")}))
    assert st.judge(SERVICES, gone, ENGINE, {})[0]["found"] == "missing"


def test_dropin_and_reload_are_drift(tmp_path):
    dropin = observe(tmp_path, dict(RUNNING, **{"systemctl show": (0, show(DropInPaths="/etc/systemd/system/llmb-vllm.service.d/x.conf"), "")}))
    assert "overridden by /etc/systemd/system/llmb-vllm.service.d/x.conf" in st.judge(SERVICES, dropin, ENGINE, {})[0]["found"]
    stale = observe(tmp_path, dict(RUNNING, **{"systemctl show": (0, show(NeedDaemonReload="yes"), "")}))
    assert "not reloaded" in st.judge(SERVICES, stale, ENGINE, {})[0]["found"]


def test_container_image_against_the_lock():
    svc = [{"name": "llmb-sglang", "kind": "container", "container": {"name": "llmb-sglang"}, "health": None, "ready": None}]
    img = {"ref": "lmsysorg/sglang:v0.5.23", "digest": "sha256:" + "1" * 64, "id": "sha256:" + "2" * 64}
    inspect = json.dumps({"State": {"Status": "running", "StartedAt": "2026-11-27T05:56:13Z", "Pid": 7},
                          "RestartCount": 3, "Image": "sha256:" + "9" * 64})
    run = fake_run({"docker container inspect": (0, inspect, ""),
                    "docker image inspect": (0, json.dumps(["lmsysorg/sglang@sha256:" + "8" * 64]), "")})
    obs = st.observe(run, svc, {"version": "0.5.23", "install": "container", "image": img}, {}, None, False)
    assert obs["services"][0]["restarts"] == 3 and obs["services"][0]["state"] == "active"
    drift = st.judge(svc, obs, {"version": "0.5.23", "image": img}, {})
    assert drift == [{"service": "llmb-sglang", "check": "image", "expected": img["digest"], "found": "sha256:" + "9" * 64}]


def test_gpu_memory_on_real_and_failing_nvidia_smi():
    real = "\n".join(ln for ln in REAL_QUERY.read_text().splitlines() if not ln.startswith("#"))
    got = st.gpu_memory(fake_run({"nvidia-smi": (0, real, "")}))
    assert got["error"] is None and got["gpus"][0]["total_mib"] == 81559 and got["gpus"][0]["used_mib"] is None
    bad = st.gpu_memory(fake_run({"nvidia-smi": (9, "", "NVIDIA-SMI has failed")}))
    assert bad["gpus"] == [] and "exit 9: NVIDIA-SMI has failed" in bad["error"]
    assert "CSV header" in st.gpu_memory(fake_run({"nvidia-smi": (0, "Failed to initialize NVML: Driver/library version mismatch\n", "")}))["error"]


def test_plan_service_carries_no_argv_or_env():
    svc = {"name": "llmb-vllm", "kind": "systemd", "argv": ["x", "--api-key", "s"], "env": {"HF_TOKEN": "t"},
           "health": HEALTH, "api": {"base_url": "b", "api_key": {"var": "llmb_api_key"}}}
    out = st.plan_service(svc, {"llmb-vllm": UNIT})
    assert "argv" not in out and "env" not in out and out["api"] == {"base_url": "b"} and out["unit"] == UNIT


def write_run(tmp_path: Path, records: dict) -> Path:
    run = tmp_path / "run"
    (run / "status").mkdir(parents=True)
    (run / "deployment.json").write_text(json.dumps({"hosts": {"node1": {}, "node2": {}},
                                                     "engine": {"version": "0.19.1"}, "model": {"commit": "a" * 40},
                                                     "pins": {"lock": "/inv/llmb.lock.json"}}))
    for h, rec in records.items():
        (run / "status" / f"{h}.json").write_text(json.dumps(rec))
    return run


def record(drift=()):
    return {"ok": not drift, "services": [{"name": "llmb-ray", "state": "active", "since": "Fri 2026-11-27 05:56:13 UTC",
                                           "restarts": 0, "health": {"ok": True}}],
            "installed_release": "0.19.1", "model_commit": "a" * 40, "drift": list(drift),
            "gpu": {"gpus": [{"index": 0, "used_mib": 2048, "total_mib": 81920}], "error": None}}


def test_summary_names_a_missing_node_and_the_drift(tmp_path):
    unit = {"service": "llmb-ray", "check": "unit", "expected": "the unit the plan renders", "found": "unit edited"}
    s = cst.summarize(write_run(tmp_path, {"node1": record([unit])}), {"node2": "unreachable: ssh timed out"})
    assert cst.exit_status(s) == 1 and s["expected"]["lock"] == "/inv/llmb.lock.json"
    assert [(d["host"], d["check"]) for d in s["drift"]] == [("node1", "unit"), ("node2", "node")]
    assert s["drift"][1]["found"] == "unreachable: ssh timed out"
    r = cst.rows(s)
    assert r[0][:7] == ["node1", "llmb-ray", "active", "2026-11-27 05:56:13", "0", "healthy", "0.19.1"]
    assert r[0][8] == "2.0/80 GiB on 1" and r[0][9] == "unit" and r[1][2] == "no answer"
    assert "node2 host: node: expected answers" in cst.drift_lines(s)[1]


def test_summary_all_as_planned(tmp_path):
    s = cst.summarize(write_run(tmp_path, {"node1": record(), "node2": record()}))
    assert cst.exit_status(s) == 0 and s["drift"] == [] and [r[9] for r in cst.rows(s)] == ["-", "-"]
