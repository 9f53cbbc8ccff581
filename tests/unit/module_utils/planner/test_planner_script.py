"""scripts/launch-plan and the filter plugin, as the serve role and preflight use them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from planner_helpers import REPO, load_inventory

SCRIPT = str(REPO / "scripts" / "launch-plan")


def run(*args):
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


@pytest.fixture(scope="module")
def h800_json():
    proc = run("-i", "inventories/h800", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_h800_json_holds_the_seed_002_command(h800_json):
    head = h800_json[0]
    api = [s for s in head["services"] if s["role"] == "api"][0]
    argv = api["argv"]
    for pair in (
        ["--tensor-parallel-size", "8"],
        ["--pipeline-parallel-size", "2"],
        ["--decode-context-parallel-size", "8"],
        ["--quantization", "fp8"],
        ["--kv-cache-dtype", "fp8"],
        ["--max-model-len", "2048"],
        ["--max-num-seqs", "1"],
        ["--max-num-batched-tokens", "1024"],
    ):
        assert any(argv[i : i + 2] == pair for i in range(len(argv))), pair
    for flag in ("--trust-remote-code", "--enable-chunked-prefill", "--no-enable-log-requests"):
        assert flag in argv
    for svc in head["services"]:  # the contract's keys
        assert {"name", "kind", "argv", "env", "image", "devices", "mounts", "order"} <= set(svc)
        assert svc["kind"] in ("systemd", "container", "mpirun")


def test_a3_json_holds_the_seed_001_docker_run():
    proc = run("-i", "inventories/a3", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    (svc,) = json.loads(proc.stdout)[0]["services"]
    assert [f"/dev/davinci{i}" for i in range(16)] == svc["devices"][:16]
    assert {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"} <= set(svc["devices"])
    assert "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/" in svc["mounts"]
    assert svc["env"]["HCCL_OP_EXPANSION_MODE"] == "AIV" and svc["container"]["shm_size"] == "1g"


def test_text_format_and_host_filter():
    proc = run("-i", "inventories/h800", "--host", "gpu-h800-02")
    assert proc.returncode == 0, proc.stderr
    assert "gpu-h800-02" in proc.stdout and "gpu-h800-01 (" not in proc.stdout
    assert "ray start --address 192.168.100.11:6379" in proc.stdout


def test_check_ok_and_usage_errors():
    ok = run("-i", "inventories/sim", "--check")
    assert ok.returncode == 0 and ok.stdout.startswith("OK: inventory inventories/sim plans 2 host(s)")
    assert run("-i", "inventories/does-not-exist").returncode == 2


def test_filter_plugin_matches_the_script():
    sys.path.insert(0, str(REPO / "plugins" / "filter"))
    try:
        import llmb_deployment as llmb_plan
    finally:
        sys.path.pop(0)
    hv, groups = load_inventory("sim")
    filters = llmb_plan.FilterModule().filters()
    plan = filters["llmb_launch_plan"](hv, groups)
    assert [h["host"] for h in plan] == ["node1", "node2"]
    assert filters["llmb_host_plan"](plan, "node2")["services"][0]["role"] == "ray-worker"
    assert filters["llmb_plan_problems"](hv, groups) == []
    hv["node1"]["llmb_tensor_parallel"] = 64
    problems = filters["llmb_plan_problems"](hv, groups)
    assert problems and "fix:" in filters["llmb_plan_report"](problems)
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="no host was contacted"):
        filters["llmb_launch_plan"](hv, groups)
