"""The container serve path on one shared simulated 2-node cluster whose nodes run their own dockerd.

Per recipe (file order; a recipe's later tests need its converge): converge, a re-run with
changed=0 that leaves every container running as it was, `--check --diff` with no change; then the
faults, each reported with host, container and cause. Tests run in file order.
"""

from __future__ import annotations

import json
import urllib.request

from conftest import MODEL_DIR, RECIPES

NODE_DIR = "/usr/local/Ascend/driver"


def _ok(run) -> None:
    assert run.rc == 0, run.tail()
    recap = run.recap()
    assert set(recap) >= {"node1", "node2"}, recap
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in recap.values()), recap


def _no_change(run) -> None:
    _ok(run)
    assert all(r["changed"] == 0 for r in run.recap().values()), (run.recap(), run.changed_tasks())


def _api(ctr, node: str = "node1", port: int = 8000) -> dict:
    with urllib.request.urlopen(f"http://{ctr.ip(node)}:{port}/v1/models", timeout=10) as r:
        return json.loads(r.read())


def _in(ctr, node: str, container: str, *cmd: str, check: bool = True):
    return ctr.node(node, "docker", "exec", container, *cmd, check=check)


def _running(ctr) -> dict[str, dict]:
    return {n: {k: (v["id"], v["started"]) for k, v in ctr.containers(n).items() if v["status"] == "running"}
            for n in ("node1", "node2")}


def _fails(run, *words: str) -> None:
    assert run.rc != 0, "expected a failure:\n" + run.tail()
    missing = [w for w in words if w not in run.out]
    assert not missing, f"the failure does not name {missing}:\n" + run.tail(8000)


# ------------------------------------------------------------------ a3: vllm-ascend, DP rank 0 + headless
A3 = RECIPES["a3"]


def test_a3_converges(ctr):
    ctr.switch(A3)
    run = ctr.playbook(A3)
    ctr.timings["a3_converge_s"] = round(run.seconds, 1)
    _ok(run)
    want = ctr.fixture["images"]["a3"]
    for node, headless in (("node1", False), ("node2", True)):
        c = ctr.containers(node)["vllm-ascend"]
        assert c["status"] == "running", (node, c)
        assert c["image"] == want["id"], f"{node}: container image {c['image']} is not the pinned {want}"
        assert ("--headless" in c["args"]) is headless, (node, c["args"])
        # devices and driver mounts, as the engine inside sees them
        listing = _in(ctr, node, "vllm-ascend", "sh", "-c", "ls /dev; ls /usr/local/dcmi " + NODE_DIR + "/lib64 "
                      "/etc/ascend_install.info " + NODE_DIR + "/version.info /usr/local/bin/npu-smi").stdout.split()
        for dev in [f"davinci{i}" for i in range(16)] + ["davinci_manager", "devmm_svm", "hisi_hdc"]:
            assert dev in listing, f"{node}: /dev/{dev} not inside the container: {listing}"
        assert "README.accelsim" in listing and "/etc/ascend_install.info" in listing, listing
        env = _in(ctr, node, "vllm-ascend", "printenv", "HCCL_IF_IP").stdout.strip()
        assert env == ctr.ip(node), f"{node}: HCCL_IF_IP={env!r}, expected {ctr.ip(node)}"
        assert MODEL_DIR in " ".join(c["args"])
    assert [m["id"] for m in _api(ctr)["data"]] == ["kimi-k2-sim"]


def test_a3_rerun_changes_nothing_and_keeps_containers(ctr):
    before = _running(ctr)
    run = ctr.playbook(A3)
    ctr.timings["a3_rerun_s"] = round(run.seconds, 1)
    _no_change(run)
    assert _running(ctr) == before, "a container whose spec did not change was replaced"


def test_a3_check_diff_reports_no_change(ctr):
    run = ctr.playbook(A3, "--check", "--diff")
    ctr.timings["a3_check_s"] = round(run.seconds, 1)
    _no_change(run)


def test_a3_device_missing_on_one_node(ctr):
    """node2 lost /dev/davinci3 and its container must be (re)created: the run names host, container, device."""
    ctr.node("node2", "llmb-sim-devices", "remove", "/dev/davinci3")
    ctr.node("node2", "docker", "rm", "-f", "vllm-ascend")
    try:
        run = ctr.playbook(A3, playbook=ctr.serve_playbook)
        _fails(run, "node2", "vllm-ascend", "/dev/davinci3")
    finally:
        ctr.node("node2", "llmb-sim-devices", "restore")


def test_a3_container_exiting_at_start_shows_log_tail(ctr):
    """The engine dies at start (fault hook of the double through the plan's env): host, container, log tail."""
    inv = ctr.write_inventory(A3, ctr.pins_for(A3))
    extra = inv / "group_vars" / "all" / "zz-fault.yml"
    extra.write_text("llmb_engine_env: {LLMB_ENGINESIM_FAULTS: exit_at_start}\n")
    try:
        run = ctr.playbook(A3, playbook=ctr.serve_playbook)
        _fails(run, "node1", "vllm-ascend")
        assert "exit_at_start" in run.out or "Traceback" in run.out or "rror" in run.out, run.tail()
    finally:
        extra.unlink()


def test_a3_changed_container_on_one_node_is_replaced_alone(ctr):
    """Back to the recipe after the faults. Then node2's container is one started by hand with another argv:
    the next run replaces it, and only it (node1's keeps its id and start time)."""
    _ok(ctr.playbook(A3, playbook=ctr.serve_playbook))
    before = _running(ctr)
    img = ctr.fixture["images"]["a3"]["image"]
    ctr.node("node2", "docker", "rm", "-f", "vllm-ascend")
    ctr.node("node2", "docker", "run", "-d", "--name", "vllm-ascend", "--network", "host", img, "sleep", "infinity")
    run = ctr.playbook(A3, playbook=ctr.serve_playbook)
    _ok(run)
    after = _running(ctr)
    assert after["node1"] == before["node1"], "node1's container (spec unchanged) was replaced"
    c = ctr.containers("node2")["vllm-ascend"]
    assert c["args"][:1] == ["serve"] and "--headless" in c["args"], c["args"]
    assert run.recap()["node1"]["changed"] == 0 and run.recap()["node2"]["changed"] > 0, run.recap()


def test_a3_image_digest_drifted_in_registry(ctr):
    """The tag moved in the registry and the pinned digest is gone: node1's pull fails naming host, image,
    pinned digest and registry. Pinning the new digest then replaces both containers with the new image."""
    img = ctr.fixture["images"]["a3"]
    old_id = img["id"]
    new = ctr.registry("drift", "vllm-ascend").splitlines()[-1]
    # node1 lost the image (rebuilt disk): its container goes first, else the image stays in use
    ctr.node("node1", "docker", "rm", "-f", "vllm-ascend")
    ctr.node("node1", "docker", "rmi", "-f", img["image"], f"{ctr.fixture['mirror']}/{img['path']}@{img['digest']}",
             check=False)
    run = ctr.playbook(A3)
    _fails(run, "node1", img["image"], img["digest"], ctr.fixture["mirror"])
    before = _running(ctr)
    img["digest"] = new
    ctr.write_inventory(A3, ctr.pins_for(A3))
    run = ctr.playbook(A3)
    _ok(run)
    after = _running(ctr)
    assert after["node2"]["vllm-ascend"] != before["node2"]["vllm-ascend"], "node2: the container kept the old image"
    for n in ("node1", "node2"):
        c = ctr.containers(n)["vllm-ascend"]
        assert c["status"] == "running" and c["image"] != old_id, f"{n}: {c['image']} is still the drifted-from image"
    assert [m["id"] for m in _api(ctr)["data"]] == ["kimi-k2-sim"]


# ------------------------------------------------------------------ mi300x 2x8: ROCm image, Ray in containers, TP8 x PP2
MI = RECIPES["mi300x"]


def _ray_status(ctr) -> str:
    return _in(ctr, "node1", "kimi-K2", "ray", "status", check=False).stdout


def test_mi300x_converges(ctr):
    ctr.switch(MI)
    run = ctr.playbook(MI)
    ctr.timings["mi300x_converge_s"] = round(run.seconds, 1)
    _ok(run)
    want = ctr.fixture["images"]["mi300x"]
    head = ctr.ip("node1")
    for node, role in (("node1", "--head"), ("node2", "--address")):
        c = ctr.containers(node)["kimi-K2"]
        assert c["status"] == "running" and c["image"] == want["id"], (node, c, want)
        assert role in c["args"], (node, c["args"])
        dev = _in(ctr, node, "kimi-K2", "sh", "-c", "ls /dev/kfd /dev/dri").stdout.split()
        assert "/dev/kfd" in dev and "renderD128" in dev and "card7" in dev, f"{node}: {dev}"
        host_ip = _in(ctr, node, "kimi-K2", "printenv", "VLLM_HOST_IP").stdout.strip()
        assert host_ip == ctr.ip(node), f"{node}: VLLM_HOST_IP={host_ip!r}"
    assert f"{head}:6379" in " ".join(ctr.containers("node2")["kimi-K2"]["args"])
    # the head container's GCS: on the head's cluster address only (the llmb-bindto preload, mounted
    # read-only from the host's build), as the plan says
    ss = ctr.node("node1", "ss", "-Hltn", "sport = :6379").stdout.split()
    assert ss[3:4] in ([f"{head}:6379"], [f"[::ffff:{head}]:6379"]), ss
    env = _in(ctr, "node1", "kimi-K2", "printenv", "LD_PRELOAD", "LLMB_BIND_ADDRESS", "LLMB_BIND_PORTS").stdout.split()
    assert env == ["/opt/llmb/lib/llmb-bindto.so", head, "6379"], env
    status = _ray_status(ctr)
    assert status.count("node_") == 2, f"the Ray cluster is not head + worker:\n{status}"
    # vllm serve runs inside the head's container (docker exec from a systemd unit), TP8 x PP2 over Ray
    ps = _in(ctr, "node1", "kimi-K2", "ps", "-eo", "args").stdout
    serve = [ln for ln in ps.splitlines() if " serve " in ln and "vllm" in ln]
    assert serve and "--tensor-parallel-size 8" in serve[0] and "--pipeline-parallel-size 2" in serve[0], ps
    assert "--distributed-executor-backend ray" in serve[0], serve
    assert ctr.node("node1", "systemctl", "is-active", "kimi-K2-serve", check=False).stdout.strip() == "active"
    assert [m["id"] for m in _api(ctr)["data"]] == ["kimi-k2-sim"]


def test_mi300x_rerun_changes_nothing_and_keeps_containers(ctr):
    before = _running(ctr)
    run = ctr.playbook(MI)
    ctr.timings["mi300x_rerun_s"] = round(run.seconds, 1)
    _no_change(run)
    assert _running(ctr) == before, "a container whose spec did not change was replaced"


def test_mi300x_check_diff_reports_no_change(ctr):
    run = ctr.playbook(MI, "--check", "--diff")
    ctr.timings["mi300x_check_s"] = round(run.seconds, 1)
    _no_change(run)


def test_mi300x_worker_unable_to_reach_ray_head(ctr):
    """node2's worker container cannot reach the head's GCS port: host, container and cause named."""
    head = ctr.ip("node1")
    ctr.node("node2", "iptables", "-I", "OUTPUT", "-p", "tcp", "-d", head, "--dport", "6379", "-j", "REJECT")
    ctr.node("node2", "docker", "rm", "-f", "kimi-K2")
    extra = ctr.inventory_dir(MI) / "group_vars" / "all" / "zz-fault.yml"
    extra.write_text("llmb_ready_timeout_s: 20\n")
    try:
        run = ctr.playbook(MI, playbook=ctr.serve_playbook)
        _fails(run, "node2", "kimi-K2", f"{head}:6379")
    finally:
        extra.unlink()
        ctr.node("node2", "iptables", "-D", "OUTPUT", "-p", "tcp", "-d", head, "--dport", "6379", "-j", "REJECT")


def test_mi300x_serve_flag_change_keeps_the_ray_containers(ctr):
    """Back to the recipe; then a serve flag changes: the vllm serve unit restarts, the head and worker
    containers (their spec unchanged) keep running as they were."""
    _ok(ctr.playbook(MI, playbook=ctr.serve_playbook))
    before = _running(ctr)
    extra = ctr.inventory_dir(MI) / "group_vars" / "all" / "zz-change.yml"
    # the sample's engine args (a group_vars file replaces the whole dict) and one flag more
    extra.write_text("llmb_engine_args: {enable-prefix-caching: false, max-num-seqs: 7}\n")
    try:
        run = ctr.playbook(MI, playbook=ctr.serve_playbook)
        _ok(run)
        assert _running(ctr) == before, "a Ray container was replaced for a change of vllm serve's flags only"
        ps = _in(ctr, "node1", "kimi-K2", "ps", "-eo", "args").stdout
        assert "--max-num-seqs 7" in ps, ps
    finally:
        extra.unlink()


# ------------------------------------------------------------------ h200-trtllm: sshd on 2233 in both containers, mpirun -np 16
TRT = RECIPES["trtllm"]
TRT_MODEL = "/models/Kimi-K2-Instruct"  # llmb_container_model_dir of inventories/h200-trtllm


def test_trtllm_converges(ctr):
    ctr.switch(TRT)
    run = ctr.playbook(TRT)
    ctr.timings["trtllm_converge_s"] = round(run.seconds, 1)
    _ok(run)
    want = ctr.fixture["images"]["trtllm"]
    for node, peer in (("node1", "node2"), ("node2", "node1")):
        c = ctr.containers(node)["llmb-trtllm"]
        assert c["status"] == "running" and c["image"] == want["id"], (node, c, want)
        assert "/dev/nvidia7" in _in(ctr, node, "llmb-trtllm", "sh", "-c", "ls /dev/nvidia*").stdout
        listen = ctr.node(node, "ss", "-Hltnp", "sport = :2233").stdout
        assert "sshd" in listen, f"{node}: nothing of sshd listens on 2233: {listen!r}"
        # the mesh key, from this engine container to the other's sshd on 2233
        who = _in(ctr, node, "llmb-trtllm", "ssh", "-F", "/etc/llmb/ssh-mesh/ssh_config", "-p", "2233",
                  "-o", "BatchMode=yes", ctr.ip(peer), "hostname", check=False)
        assert who.returncode == 0 and who.stdout.strip() == peer, (node, peer, who.stdout, who.stderr)
    # mpirun -np 16 from the launcher container, ranks on both nodes through that sshd
    ps1 = _in(ctr, "node1", "llmb-trtllm", "ps", "-eo", "args").stdout
    assert any(ln.startswith("mpirun -np 16") for ln in ps1.splitlines()), ps1
    for node in ("node1", "node2"):
        ps = _in(ctr, node, "llmb-trtllm", "ps", "-eo", "args").stdout
        ranks = [ln for ln in ps.splitlines() if "trtllm-serve serve" in ln and not ln.startswith("mpirun")]
        assert len(ranks) >= 8, f"{node}: expected 8 ranks in the container, found {len(ranks)}:\n{ps}"
    # trtllm-serve lists its model argument (no served-name option): the sample's container path
    assert [m["id"] for m in _api(ctr)["data"]] == [TRT_MODEL]


def test_trtllm_rerun_changes_nothing_and_keeps_containers(ctr):
    before = _running(ctr)
    run = ctr.playbook(TRT)
    ctr.timings["trtllm_rerun_s"] = round(run.seconds, 1)
    _no_change(run)
    assert _running(ctr) == before, "a container whose spec did not change was replaced"


def test_trtllm_check_diff_reports_no_change(ctr):
    run = ctr.playbook(TRT, "--check", "--diff")
    ctr.timings["trtllm_check_s"] = round(run.seconds, 1)
    _no_change(run)


def test_trtllm_port_2233_taken_on_a_node(ctr):
    """Something else listens on 2233 on node2 when its engine container must start: host, container, port."""
    ctr.node("node2", "docker", "rm", "-f", "llmb-trtllm")
    ctr.node("node2", "systemd-run", "--unit", "llmb-test-squatter", "python3", "-m", "http.server", "2233")
    try:
        run = ctr.playbook(TRT, playbook=ctr.serve_playbook)
        _fails(run, "node2", "llmb-trtllm", "2233")
    finally:
        ctr.node("node2", "systemctl", "stop", "llmb-test-squatter", check=False)
    _ok(ctr.playbook(TRT, playbook=ctr.serve_playbook))
    print(f"\ne2e_ctr timings: {ctr.timings}")
