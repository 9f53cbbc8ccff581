"""llmb.container: one plan container reconciled with docker (fake docker CLI; real /proc and sockets).

Left running when its spec did not change, replaced (and only it) when the spec changed, check mode
that tells the truth, and every fault named with host, container and cause."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from fakedocker import FakeDocker
from llmb.container import (
    BAD_SPEC,
    DEVICE_MISSING,
    EXITED_AT_START,
    IMAGE_DRIFT,
    IMAGE_MISSING,
    PORT_TAKEN,
    RUN_FAILED,
    SPEC_LABEL,
    ContainerFault,
    Node,
    Reconciler,
    Spec,
    cdi_declared,
    docker_run_argv,
    spec_hash,
)

IMAGE = "vllm/vllm-openai-rocm:v0.19.1"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
ID1 = "sha256:" + "a" * 64
ID2 = "sha256:" + "b" * 64


def spec(**kw) -> Spec:
    base = dict(
        name="kimi-K2",
        image=IMAGE,
        argv=["-c", 'exec "$@"', "bash", "ray", "start", "--head", "--block"],
        env={"VLLM_HOST_IP": "192.168.104.11", "HF_TOKEN": "hf_secret value"},
        devices=["/dev/kfd", "/dev/dri"],
        mounts=["/:/work"],
        options={"network": "host", "ipc": "host", "entrypoint": "/bin/bash", "privileged": True},
        ports=[{"port": 6379, "purpose": "ray-gcs"}],
        digest=D1,
    )
    base.update(kw)
    return Spec(**base)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """A node root with the devices the specs ask for."""
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    (tmp_path / "dev" / "kfd").write_text("")
    return Node(root=str(tmp_path), proc="/proc", cdi_dirs=("/etc/cdi", "/var/run/cdi"))


@pytest.fixture
def docker() -> FakeDocker:
    fake = FakeDocker()
    fake.add_image(IMAGE, ID1, [f"registry.local:5000/vllm/vllm-openai-rocm@{D1}"])
    return fake


def rec(docker, node, **kw) -> Reconciler:
    return Reconciler(docker, "mi300x-01", node, settle_s=kw.pop("settle_s", 0), **kw)


def fault_of(fn) -> ContainerFault:
    with pytest.raises(ContainerFault) as err:
        fn()
    return err.value


# ------------------------------------------------------------------------------ idempotence
def test_create_then_leave_running(docker, node):
    r = rec(docker, node)
    out = r.reconcile(spec())
    assert out.changed and out.action == "create" and out.image_id == ID1
    box = docker.containers["kimi-K2"]
    assert box["Config"]["Labels"][SPEC_LABEL] == out.spec_hash
    # env values travel in the env file only: never on the command line, and the file is gone after
    run = box["_argv"]
    assert not any("hf_secret" in a or "192.168.104.11" in a for a in run)
    assert docker.env_files == ["HF_TOKEN=hf_secret value\nVLLM_HOST_IP=192.168.104.11\n"]
    assert not os.path.exists(run[run.index("--env-file") + 1])
    assert "<env-file>" in out.cmd
    assert run[run.index(IMAGE) :] == [IMAGE, *spec().argv]
    docker.calls.clear()
    again = rec(docker, node).reconcile(spec())
    assert not again.changed and again.action == "none" and again.spec_hash == out.spec_hash
    assert docker.mutations() == []


def test_changed_argv_replaces_only_that_container(docker, node):
    r = rec(docker, node)
    r.reconcile(spec())
    r.reconcile(spec(name="other", ports=[]))
    docker.calls.clear()
    out = r.reconcile(spec(argv=["-c", 'exec "$@"', "bash", "ray", "start", "--head", "--block", "--num-gpus", "8"]))
    assert out.action == "replace"
    assert out.before["spec_hash"] != out.after["spec_hash"]
    assert docker.mutations()[0] == ["docker", "rm", "-f", "kimi-K2"]
    assert docker.mutations()[1][:2] == ["docker", "run"] and len(docker.mutations()) == 2
    assert not rec(docker, node).reconcile(spec(name="other", ports=[])).changed


@pytest.mark.parametrize(
    "change",
    [
        {"env": {"VLLM_HOST_IP": "192.168.104.12", "HF_TOKEN": "hf_secret value"}},
        {"devices": ["/dev/kfd"]},
        {"mounts": ["/:/work:ro"]},
        {"options": {"network": "host", "ipc": "host", "entrypoint": "/bin/sh", "privileged": True}},
        {"config": [{"path": "/etc/llmb/trtllm/extra-llm-api-config.yml", "content": "print_iter_log: false\n"}]},
    ],
    ids=["env", "devices", "mounts", "options", "config-files"],
)
def test_every_part_of_the_spec_is_in_the_hash(docker, node, change):
    r = rec(docker, node)
    r.reconcile(spec())
    assert r.reconcile(spec(**change)).action == "replace"


def test_new_pinned_image_replaces_the_container(docker, node):
    """A repin: the engine stage pulled the new digest and tagged it with the plan's name."""
    r = rec(docker, node)
    first = r.reconcile(spec())
    docker.add_image(IMAGE, ID2, [f"vllm/vllm-openai-rocm@{D2}"])
    out = r.reconcile(spec(digest=D2))
    assert out.action == "replace" and out.image_id == ID2 and out.spec_hash != first.spec_hash
    assert docker.containers["kimi-K2"]["Image"] == ID2


def test_same_tag_other_image_id_replaces_when_unpinned(docker, node):
    r = rec(docker, node)
    r.reconcile(spec(digest=None))
    docker.add_image(IMAGE, ID2, [])
    assert r.reconcile(spec(digest=None)).action == "replace"


def test_stopped_container_with_the_same_spec_is_started(docker, node):
    r = rec(docker, node)
    r.reconcile(spec())
    docker.containers["kimi-K2"]["State"] = {"Status": "exited", "Running": False, "ExitCode": 0}
    docker.calls.clear()
    out = r.reconcile(spec())
    assert out.action == "start" and docker.mutations() == [["docker", "start", "kimi-K2"]]


def test_absent_removes(docker, node):
    r = rec(docker, node)
    r.reconcile(spec())
    assert r.reconcile(spec(), state="absent").action == "remove" and "kimi-K2" not in docker.containers
    assert not r.reconcile(spec(), state="absent").changed


# ------------------------------------------------------------------------------ check mode
def test_check_mode_tells_what_would_happen_and_touches_nothing(docker, node):
    r = rec(docker, node)
    assert r.reconcile(spec(), check_mode=True).action == "create"
    assert docker.mutations() == [] and docker.containers == {}
    r.reconcile(spec())
    docker.calls.clear()
    assert not r.reconcile(spec(), check_mode=True).changed
    out = r.reconcile(spec(env={"A": "1"}), check_mode=True)
    assert out.changed and out.action == "replace" and out.before["spec_hash"] != out.after["spec_hash"]
    docker.containers["kimi-K2"]["State"]["Running"] = False
    assert r.reconcile(spec(), check_mode=True).action == "start"
    assert docker.mutations() == []


def test_check_mode_before_the_engine_stage_warns_instead_of_failing(node):
    out = rec(FakeDocker(), node).reconcile(spec(), check_mode=True)
    assert out.changed and out.action == "create" and "is not on this node yet" in out.warnings[0]


# ------------------------------------------------------------------------------ faults
def test_image_missing(node):
    f = fault_of(lambda: rec(FakeDocker(), node).reconcile(spec()))
    assert f.cause == IMAGE_MISSING and f.message().startswith("mi300x-01: container kimi-K2: image ")
    assert "engine stage" in f.fix


def test_image_digest_drifted_leaves_the_running_container_alone(docker, node):
    r = rec(docker, node)
    r.reconcile(spec())
    # the tag on the node now names another image (a `docker pull` of the moved tag)
    docker.add_image(IMAGE, ID2, [f"vllm/vllm-openai-rocm@{D2}"])
    docker.calls.clear()
    f = fault_of(lambda: r.reconcile(spec()))
    assert f.cause == IMAGE_DRIFT and f.host == "mi300x-01" and f.name == "kimi-K2"
    assert D1 in f.text and D2 in f.text and "LLMB_REPIN" in f.fix
    assert docker.mutations() == [] and docker.containers["kimi-K2"]["Image"] == ID1


def test_image_id_pin_of_a_tarball_load(docker, node):
    f = fault_of(lambda: rec(docker, node).reconcile(spec(digest=None, image_id=ID2)))
    assert f.cause == IMAGE_DRIFT and ID2 in f.text
    assert rec(docker, node).reconcile(spec(digest=None, image_id=ID1)).action == "create"


def test_tarball_load_without_registry_digests_is_vouched_for_by_its_image_id(node):
    fake = FakeDocker()
    fake.add_image(IMAGE, ID1, [])  # docker load keeps no RepoDigests
    assert rec(fake, node).reconcile(spec(digest=D1, image_id=ID1)).action == "create"
    f = fault_of(lambda: rec(fake, node).reconcile(spec(name="x", digest=D1)))  # nothing vouches for it
    assert f.cause == IMAGE_DRIFT


def test_device_missing_names_every_device_and_changes_nothing(docker, node, tmp_path):
    r = rec(docker, node)
    r.reconcile(spec())
    docker.calls.clear()
    f = fault_of(lambda: r.reconcile(spec(devices=["/dev/kfd", "/dev/dri", "/dev/mem", "/dev/davinci3:/dev/davinci0"])))
    assert f.cause == DEVICE_MISSING
    assert "device /dev/mem is missing on this node" in f.text and "/dev/davinci3 does not exist" in f.text
    assert "/dev/kfd" not in f.text and docker.mutations() == []


def test_cdi_device_needs_a_spec_that_declares_it(docker, node, tmp_path):
    gpu = spec(devices=["nvidia.com/gpu=all"])
    f = fault_of(lambda: rec(docker, node).reconcile(gpu))
    assert f.cause == DEVICE_MISSING and "no CDI spec in /etc/cdi or /var/run/cdi declares nvidia.com/gpu" in f.text
    assert "nvidia-ctk cdi generate" in f.fix
    cdi = tmp_path / "etc" / "cdi"
    cdi.mkdir(parents=True)
    # the shape nvidia-ctk cdi generate writes
    (cdi / "nvidia.yaml").write_text(
        '---\ncdiVersion: 0.5.0\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n'
        'devices:\n- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n  name: "0"\n'
        "- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n  name: all\nkind: nvidia.com/gpu\n"
    )
    assert cdi_declared(node) == {"nvidia.com/gpu": {"0", "all"}}
    f = fault_of(lambda: rec(docker, node).reconcile(spec(devices=["nvidia.com/gpu=3"])))
    assert "declare nvidia.com/gpu devices 0, all, not '3'" in f.text
    assert rec(docker, node).reconcile(gpu).action == "create"


def test_cdi_spec_in_json(node, tmp_path):
    run_cdi = tmp_path / "var" / "run" / "cdi"
    run_cdi.mkdir(parents=True)
    (run_cdi / "amd.json").write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "amd.com/gpu",
                                                   "devices": [{"name": "0"}, {"name": "1"}]}))
    (run_cdi / "notes.txt").write_text("kind: ignored/x")
    (run_cdi / "x.yaml").write_text("kind: example.com/dev\ndevices:\n  - name: a\n    containerEdits: {}\n  - name: 'b'\n")
    assert cdi_declared(node) == {"amd.com/gpu": {"0", "1"}, "example.com/dev": {"a", "b"}}


def test_port_taken_names_the_holder(docker, node):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        f = fault_of(lambda: rec(docker, node).reconcile(spec(name="sshd-box", ports=[{"port": port, "purpose": "sshd"}])))
    finally:
        s.close()
    assert f.cause == PORT_TAKEN and f.name == "sshd-box"
    assert f"port {port} (sshd) is already in use on this node by pid {os.getpid()}" in f.text
    assert "llmb_sshd_port" in f.fix and docker.mutations() == []


def test_port_check_only_for_host_network_and_ignores_the_containers_own(docker, node):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        bridged = spec(options={"network": "bridge"}, ports=[{"port": port, "purpose": "api"}])
        assert rec(docker, node).reconcile(bridged).action == "create"
        # the current container holds the port itself (its init is this process): a replace goes on
        docker.containers["kimi-K2"]["State"]["Pid"] = os.getpid()
        mine = spec(ports=[{"port": port, "purpose": "api"}])
        assert rec(docker, node).reconcile(mine).action == "replace"
    finally:
        s.close()


def test_container_exiting_at_start_shows_its_log_tail(docker, node):
    docker.on_run = {"exit": 1, "logs": "ray start ...\nConnectionError: could not reach 192.168.104.11:6379"}
    f = fault_of(lambda: rec(docker, node, settle_s=0.2, sleep=lambda s: None).reconcile(spec()))
    assert f.cause == EXITED_AT_START and "restarted by docker 1 time(s)" in f.text
    assert "ConnectionError: could not reach" in f.log_tail and "--- container log tail ---" in f.message()


def test_container_that_exited_for_good(docker, node):
    r = rec(docker, node)
    r.reconcile(spec())
    docker.containers["kimi-K2"]["State"] = {"Status": "exited", "Running": False, "ExitCode": 0}
    docker.on_run = {}
    real_start = docker._started
    docker._started = lambda c: c.update(State={"Status": "exited", "Running": False, "ExitCode": 127,
                                                "Error": "exec: vllm: not found"}, _logs="")
    f = fault_of(lambda: r.reconcile(spec()))
    docker._started = real_start
    assert f.cause == EXITED_AT_START and f.text == "exited at start (exit code 127): exec: vllm: not found"


def test_docker_run_failure(docker, node):
    docker.on_run = {"rc": 125, "err": 'docker: Error response from daemon: error gathering device information while adding custom device "/dev/mem": no such file or directory.'}
    f = fault_of(lambda: rec(docker, node).reconcile(spec()))
    assert f.cause == RUN_FAILED and "rc=125" in f.text and "/dev/mem" in f.text


def test_env_that_cannot_be_passed_is_refused_before_anything_changes(docker, node):
    f = fault_of(lambda: rec(docker, node).reconcile(spec(env={"A": "x\ny"})))
    assert f.cause == BAD_SPEC and "A" in f.text and docker.calls == []


# ------------------------------------------------------------------------------ docker run argv
def test_docker_run_argv_maps_plan_options():
    s = Spec(
        name="llmb-vllm",
        image="quay.io/ascend/vllm-ascend:v1-a3",
        argv=["serve", "/m"],
        env={"HCCL_IF_IP": "10.0.0.1"},
        devices=["/dev/davinci0", {"host": "/dev/davinci_manager"}, "nvidia.com/gpu=all"],
        mounts=["/usr/local/dcmi:/usr/local/dcmi", {"host": "/etc/ascend_install.info", "readonly": True}],
        options={"network": "host", "shm_size": "1g", "ipc": "host", "cap_add": ["IPC_LOCK"], "privileged": True,
                 "ulimits": ["memlock=-1"], "group_add": ["video"], "gpus": "all", "workdir": "/w",
                 "entrypoint": "vllm"},
    )
    argv = docker_run_argv(s, "abc", "/tmp/x/env")
    text = " ".join(argv)
    assert argv[:5] == ["docker", "run", "-d", "--name", "llmb-vllm"]
    assert f"--label {SPEC_LABEL}=abc" in text and "--restart unless-stopped" in text
    for part in ("--network host", "--shm-size 1g", "--ipc host", "--privileged", "--cap-add IPC_LOCK",
                 "--ulimit memlock=-1", "--group-add video", "--gpus all", "-w /w", "--device /dev/davinci0",
                 "--device /dev/davinci_manager:/dev/davinci_manager", "--device nvidia.com/gpu=all",
                 "-v /etc/ascend_install.info:/etc/ascend_install.info:ro", "--env-file /tmp/x/env",
                 "--entrypoint vllm"):
        assert part in text, part
    assert "10.0.0.1" not in text
    assert argv[-3:] == ["quay.io/ascend/vllm-ascend:v1-a3", "serve", "/m"]


def test_spec_hash_is_canonical():
    assert spec_hash({"a": 1, "b": [1, 2]}) == spec_hash({"b": [1, 2], "a": 1})
    assert spec_hash({"a": 1}) != spec_hash({"a": 2})


def test_port_held_by_a_process_this_user_cannot_see(docker, node, monkeypatch):
    import llmb.container as C

    monkeypatch.setattr(C, "listeners", lambda ports, node: {2233: []})  # LISTEN socket, /proc/*/fd unreadable
    f = fault_of(lambda: rec(docker, node).reconcile(spec(name="llmb-trtllm", ports=[{"port": 2233, "purpose": "sshd"}])))
    assert f.cause == PORT_TAKEN and "port 2233 (sshd) is already in use on this node (by a process" in f.text
