"""Engine containers in the launch plan (issue 10): Ray over containers, how NVIDIA GPUs reach a
container (llmb_container_nvidia_gpus), and the constant shell scripts the plan runs (executed here
with the real /bin/sh and bash, hostile arguments included)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from llmbctl.planner import containers
from planner_helpers import service
from units_samples import HOSTILE_ARGS


def _hosts(plan) -> dict[str, dict]:
    return {h["host"]: h for h in plan.to_list()}


# ------------------------------------------------------------------------------- Ray over containers
def test_ray_cluster_of_nvidia_containers_follows_run_cluster_sh(planned):
    """h800 (seed 002 TP8 x PP2 + DCP8) as containers: the refusal is gone, each node's engine container
    is a Ray node, vllm serve runs in the head's container; the engine flags are the host plan's."""
    host_plan = _hosts(planned("h800"))
    plan = _hosts(planned("h800", llmb_install="container"))
    head, worker = plan["gpu-h800-01"], plan["gpu-h800-02"]
    box_head, box_worker = service(head, "llmb-vllm", "ray-head"), service(worker, "llmb-vllm", "ray-worker")
    for box in (box_head, box_worker):
        assert box["kind"] == "container" and box["image"] == "vllm/vllm-openai:v0.19.1"
        assert box["container"]["gpus"] == "all" and box["container"]["network"] == "host"
        assert box["container"]["entrypoint"] == "ray" and box["container"]["command"] == box["argv"][1:]
        assert "/data/models/Kimi-K2-Instruct:/data/models/Kimi-K2-Instruct:ro" in box["mounts"]
    # the same Ray flags as the host install, only the executable differs (the image's PATH)
    assert box_head["argv"][1:] == service(host_plan["gpu-h800-01"], "llmb-ray")["argv"][1:]
    assert box_worker["argv"][1:] == service(host_plan["gpu-h800-02"], "llmb-ray")["argv"][1:]
    api = service(head, "llmb-vllm-serve", "api")
    host_api = service(host_plan["gpu-h800-01"], "llmb-vllm", "api")
    inner = api["argv"][api["argv"].index("vllm") :]
    assert inner[1:] == host_api["argv"][1:]
    assert api["env"] == host_api["env"]
    assert api["order"] == host_api["order"] == 30 and api["health"] == host_api["health"]


def test_ray_container_name_follows_llmb_container_name(planned):
    plan = _hosts(planned("h800", llmb_install="container", llmb_container_name="kimi"))
    api = service(plan["gpu-h800-01"], "kimi-serve")
    assert api["exec_in"] == "kimi" and set(api["depends_on"]) == {"gpu-h800-01/kimi", "gpu-h800-02/kimi"}
    assert service(plan["gpu-h800-02"], "kimi")["depends_on"] == ["gpu-h800-01/kimi"]


def test_ray_head_ports_do_not_collide_in_containers(planned):
    with pytest.raises(Exception) as err:
        planned("h800", llmb_install="container", llmb_ray_dashboard_port=8000)
    assert "port 8000 is used twice on gpu-h800-01" in str(err.value)


# ------------------------------------------------------------------------------- NVIDIA GPU access
def test_nvidia_gpus_default_keeps_the_recipes_gpus_all(planned):
    box = service(_hosts(planned("h200-trtllm"))["gpu-h200-01"], "llmb-trtllm")
    assert box["container"]["gpus"] == "all" and box["devices"] == []


def test_nvidia_gpus_through_cdi(planned):
    for hp in planned("h200-trtllm", llmb_container_nvidia_gpus="cdi").to_list():
        box = service(hp, "llmb-trtllm")
        assert box["container"]["gpus"] is None and box["devices"] == ["nvidia.com/gpu=all"]


def test_nvidia_gpus_as_device_nodes_of_the_platform(planned):
    plan = planned("h200-trtllm", llmb_container_nvidia_gpus="devices", llmb_container_devices=["/dev/infiniband"])
    box = service(plan.to_list()[1], "llmb-trtllm")
    assert box["container"]["gpus"] is None
    assert box["devices"] == [f"/dev/nvidia{i}" for i in range(8)] + [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
        "/dev/infiniband",
    ]


def test_nvidia_gpus_knob_leaves_host_installs_and_other_vendors_alone(planned):
    host = planned("h800", llmb_container_nvidia_gpus="cdi").to_list()
    assert all(s["kind"] == "systemd" and s["devices"] == [] for hp in host for s in hp["services"])
    a3 = service(planned("a3").to_list()[0], "vllm-ascend")
    assert "nvidia.com/gpu=all" not in a3["devices"] and a3["container"].get("gpus") is None


# ------------------------------------------------------------------------------- the shell scripts
def test_shell_entrypoint_passes_argv_untouched():
    """--entrypoint /bin/bash -c 'exec "$@"' bash ARGV: bash runs ARGV as given, whatever it holds."""
    bash = shutil.which("bash")
    assert bash
    argv = ["printf", "%s\\n", *[a for a in HOSTILE_ARGS if "\x00" not in a]]
    cmd = containers.container_command(argv, "/bin/bash")
    assert cmd[:3] == ["-c", 'exec "$@"', "bash"] and cmd[3:] == argv
    out = subprocess.run([bash, *cmd], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:-1] == argv[2:]
    assert containers.container_command(argv, None) == argv
    assert containers.container_command(argv, "/usr/bin/env") == argv


def test_exec_service_records_its_pid_and_stop_ends_it(tmp_path: Path):
    """The exec unit's script, run with /bin/sh (as `docker exec` runs it): the process keeps the
    shell's pid (exec) so the stop script's SIGTERM reaches it, and stop waits until it is gone."""
    argv = containers.exec_argv("svc", "box", {"A": "1"}, ["sleep", "30"])
    script_at = argv.index("/bin/sh")
    assert argv[:script_at] == ["/usr/bin/docker", "exec", "-e", "A", "box"]
    inner = argv[script_at:]
    pidfile = tmp_path / "svc.pid"
    inner[inner.index("/tmp/svc.pid")] = str(pidfile)
    proc = subprocess.Popen(inner)
    codes: list[int] = []
    reaper = threading.Thread(target=lambda: codes.append(proc.wait()))  # as the container's init reaps it
    reaper.start()
    try:
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.02)
        assert int(pidfile.read_text()) == proc.pid  # sh exec'd sleep: one process, one pid
        stop = containers.exec_stop_argv("svc", "box")
        assert stop[:3] == ["/usr/bin/docker", "exec", "box"]
        stop_inner = stop[3:]
        stop_inner[stop_inner.index("/tmp/svc.pid")] = str(pidfile)
        t0 = time.monotonic()
        done = subprocess.run(stop_inner, timeout=10, check=False)
        assert done.returncode == 0 and time.monotonic() - t0 < 5
        reaper.join(timeout=5)
        assert codes == [-15]  # SIGTERM
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, 9)
        reaper.join()


def test_trtllm_is_asked_for_by_its_model_argument(planned):
    """trtllm-serve has no served-name option: /v1/models lists its model argument, so the plan's API,
    health check and model block name that path (the e2e-ctr launcher was healthy and listed only it)."""
    launcher_host = _hosts(planned("h200-trtllm"))["gpu-h200-01"]
    launcher = service(launcher_host, "llmb-trtllm-launcher")
    model_arg = [a for a in launcher["argv"] if a.startswith("/")][-1]
    assert launcher["api"]["served_model_name"] == model_arg == launcher["health"]["expect_model"]
    assert launcher_host["model"]["served_model_name"] == model_arg
