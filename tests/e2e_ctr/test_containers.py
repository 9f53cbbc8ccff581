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
    new = ctr.registry("drift", "vllm-ascend").splitlines()[-1]
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
    for n in ("node1", "node2"):
        assert after[n]["vllm-ascend"] != before[n]["vllm-ascend"], f"{n}: the container kept the old image"
    assert [m["id"] for m in _api(ctr)["data"]] == ["kimi-k2-sim"]
