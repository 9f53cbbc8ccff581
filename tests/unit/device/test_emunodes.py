"""tests/device/emunodes.py: N emulated nodes on one host (issue 23). The layout, each node's
identity environment and interpreter wrapper, and the inventories it writes, planned by the
planner: the serve stage's own argv and env for shapes a (TP across nodes, vLLM's own launch) and
c (DP + EP, rank 0 + --headless)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("emunodes", ROOT / "tests" / "device" / "emunodes.py")
emunodes = importlib.util.module_from_spec(spec)
sys.modules["emunodes"] = emunodes  # dataclasses look their module up
spec.loader.exec_module(emunodes)


def test_layout_gives_each_node_its_address_gpu_slice_and_host_identity():
    nodes = emunodes.layout(2, 2, total_gpus=4)
    assert [(n.name, n.netns, n.address, n.gpus, n.hostid) for n in nodes] == [
        ("node1", "llmb-node1", "10.99.0.1", (0, 1), "node1"),
        ("node2", "llmb-node2", "10.99.0.2", (2, 3), "node2"),
    ]
    assert emunodes.identity_env(nodes[1]) == {"CUDA_VISIBLE_DEVICES": "2,3", "NCCL_HOSTID": "node2"}
    assert [n.gpus for n in emunodes.layout(4, 1)] == [(0,), (1,), (2,), (3,)]


@pytest.mark.parametrize("args, needle", [
    ((3, 2, 4), "--nodes 3 x --gpus-per-node 2 = 6 GPUs; this machine has 4"),
    ((0, 2, None), "--nodes: expected 1..32, found 0"),
    ((2, 0, None), "--gpus-per-node: expected a positive integer, found 0"),
])
def test_a_layout_that_cannot_be_is_refused_naming_the_option(args, needle):
    with pytest.raises(emunodes.UsageError, match=needle.replace("+", r"\+")):
        emunodes.layout(*args)


def test_the_cli_exits_2_on_a_bad_shape(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "tests/device/emunodes.py"), "inventory", "--shape", "z",
                        "--out", str(tmp_path / "i"), "--state", str(tmp_path / "s"), "--python", sys.executable],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--shape: expected one of a, b, one, c, found 'z'" in p.stderr


def test_the_wrapper_enters_the_nodes_namespace_with_its_identity(tmp_path):
    """Ansible's interpreter of node2: nsenter --net=<its namespace> <python> <args>, with its GPUs,
    NCCL_HOSTID, runner state and the systemctl/journalctl stand-ins first on PATH."""
    node = emunodes.layout(2, 2)[1]
    wrapper = tmp_path / "interp-node2"
    wrapper.write_text(emunodes.wrapper_text(node, "/root/llmb-vllm/bin/python", tmp_path / "state"))
    wrapper.chmod(0o755)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nsenter").write_text(
        "#!/bin/sh\nexec python3 -c 'import json,os,sys; print(json.dumps({\"argv\": sys.argv[1:], "
        "\"env\": {k: os.environ.get(k) for k in (\"CUDA_VISIBLE_DEVICES\", \"NCCL_HOSTID\", "
        "\"LLMB_RUNNER_STATE\", \"RAY_TMPDIR\", \"PATH\")}}))' \"$@\"\n")
    (fake / "nsenter").chmod(0o755)
    out = subprocess.run([str(wrapper), "/tmp/AnsiballZ_x.py"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", LLMB_EMU_MOUNTS="node2"))
    got = json.loads(out.stdout)  # (LLMB_EMU_MOUNTS: the node's mount namespace is made already, none here)
    assert got["argv"] == ["--net=/var/run/netns/llmb-node2", "/root/llmb-vllm/bin/python", "/tmp/AnsiballZ_x.py"]
    assert got["env"]["CUDA_VISIBLE_DEVICES"] == "2,3" and got["env"]["NCCL_HOSTID"] == "node2"
    assert got["env"]["LLMB_RUNNER_STATE"] == str(tmp_path / "state" / "node2")
    assert got["env"]["RAY_TMPDIR"] == "/tmp/llmb-ray-node2"  # each node its own /tmp for Ray
    assert got["env"]["PATH"].split(os.pathsep)[:2] == [str(ROOT / "tests/device/bin"), "/root/llmb-vllm/bin"]


def _plan(tmp_path: Path, shape: str, nodes: int = 2, gpn: int = 2) -> dict[str, dict]:
    inv = tmp_path / f"inv-{shape}"
    emunodes.write_inventory(inv, emunodes.layout(nodes, gpn), shape, "/root/llmb-vllm/bin/python",
                             tmp_path / "state")
    venv_bin = ROOT / ".venv" / "bin"
    p = subprocess.run([str(venv_bin / "python"), str(ROOT / "scripts/launch-plan"), "-i", str(inv), "--format", "json"],
                       capture_output=True, text=True, env=dict(os.environ, PATH=f"{venv_bin}:{os.environ['PATH']}"))
    assert p.returncode == 0, p.stderr
    return {h["host"]: h for h in json.loads(p.stdout)}


def _flags(argv: list[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[tok] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def test_shape_a_plans_vllms_own_launch_across_the_emulated_nodes(tmp_path):
    hosts = _plan(tmp_path, "a")
    (n1,), (n2,) = hosts["node1"]["services"], hosts["node2"]["services"]
    f1, f2 = _flags(n1["argv"]), _flags(n2["argv"])
    for f in (f1, f2):
        assert (f["--tensor-parallel-size"], f["--nnodes"], f["--master-addr"], f["--master-port"]) == \
            ("4", "2", "10.99.0.1", "29600")
        assert f["--enforce-eager"] is True
    assert (f1["--node-rank"], f2["--node-rank"]) == ("0", "1")
    assert "--headless" not in f1 and f2["--headless"] is True
    assert (n1["role"], n1["order"], n2["role"], n2["order"]) == ("node-rank-0", 10, "node-headless", 20)
    assert n1["ready"] == {"type": "tcp", "host": "10.99.0.1", "port": 29600, "timeout_s": 300}
    for svc, addr in ((n1, "10.99.0.1"), (n2, "10.99.0.2")):
        env = svc["env"]
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "llmb0"
        assert env["VLLM_HOST_IP"] == addr
        assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and env["NCCL_NVLS_ENABLE"] == "0"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
        # the node's identity is the emulation's (its wrapper), never the plan's
        assert "CUDA_VISIBLE_DEVICES" not in env and "NCCL_HOSTID" not in env


def test_shape_c_plans_dp_with_expert_parallelism_rank_0_and_headless(tmp_path):
    hosts = _plan(tmp_path, "c")
    (n1,), (n2,) = hosts["node1"]["services"], hosts["node2"]["services"]
    f1, f2 = _flags(n1["argv"]), _flags(n2["argv"])
    for f in (f1, f2):
        assert (f["--data-parallel-size"], f["--data-parallel-size-local"], f["--data-parallel-address"],
                f["--data-parallel-rpc-port"], f["--enable-expert-parallel"]) == ("4", "2", "10.99.0.1", "13345", True)
        assert "--nnodes" not in f
    assert "--headless" not in f1 and (f2["--headless"], f2["--data-parallel-start-rank"]) == (True, "2")


def test_shape_b_plans_ray_with_the_custom_all_reduce_off_for_the_emulation(tmp_path):
    """On one host the Ray worker of node 2 sees CUDA_VISIBLE_DEVICES=2,3 and vLLM 0.26.0's custom
    all-reduce failed with "IndexError: device_id 2 is out of range" (nodes-b-first/): the shape's
    inventory turns it off, keeping the common engine args (--enforce-eager)."""
    hosts = _plan(tmp_path, "b")
    (vllm,) = [s for s in hosts["node1"]["services"] if s["name"] == "llmb-vllm"]
    f = _flags(vllm["argv"])
    assert f["--distributed-executor-backend"] == "ray" and f["--tensor-parallel-size"] == "4"
    assert f["--disable-custom-all-reduce"] is True and f["--enforce-eager"] is True
    assert [s["role"] for s in hosts["node2"]["services"]] == ["ray-worker"]
    # only shape b: the native launch did not need it
    (n1a,) = _plan(tmp_path, "a")["node1"]["services"]
    assert "--disable-custom-all-reduce" not in n1a["argv"]


def test_any_n_four_nodes_of_one_gpu(tmp_path):
    hosts = _plan(tmp_path, "a", nodes=4, gpn=1)
    ranks = [_flags(hosts[f"node{i}"]["services"][0]["argv"]).get("--node-rank") for i in range(1, 5)]
    assert ranks == ["0", "1", "2", "3"]
    assert [bool(_flags(hosts[f"node{i}"]["services"][0]["argv"]).get("--headless")) for i in range(1, 5)] == \
        [False, True, True, True]


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_up_and_down_make_and_remove_the_namespaces():
    pytest.importorskip("pyroute2")
    nodes = emunodes.layout(2, 1)
    try:
        emunodes.up(nodes)
        have = set(os.listdir(emunodes.NETNS_DIR))
        assert {"llmb-node1", "llmb-node2", emunodes.SWITCH_NS} <= have
        probe = subprocess.run(["nsenter", "--net=/var/run/netns/llmb-node2", sys.executable, "-c",
                                "import socket; s=socket.socket(); s.bind(('10.99.0.2', 0)); print('ok')"],
                               capture_output=True, text=True)
        assert probe.stdout.strip() == "ok", probe.stderr
    finally:
        emunodes.down(nodes)
    assert not {"llmb-node1", "llmb-node2", emunodes.SWITCH_NS} & set(os.listdir(emunodes.NETNS_DIR))


def test_mpiruns_launch_agent_finds_the_node_and_the_command():
    """PRRTE's ssh launcher calls the agent as ssh: options, the host (the -H name or address), the
    command's words; the fabric run on the 4x H200 went through it (docs/examples/serve-real-multinode/fabric/)."""
    nodes = emunodes.layout(2, 2)
    host, cmd = emunodes.rsh_split(["-x", "-F", "/etc/llmb/ssh-mesh/ssh_config", "-p", "22", "10.99.0.2",
                             "PATH=/x:$PATH", ";", "export", "PATH", ";", "prted", "--prtemca", "ess", "env"])
    assert host == "10.99.0.2" and cmd == "PATH=/x:$PATH ; export PATH ; prted --prtemca ess env"
    assert emunodes.node_of(host, nodes).name == "node2" and emunodes.node_of("node1", nodes).gpus == (0, 1)
    with pytest.raises(emunodes.UsageError, match="is no emulated node"):
        emunodes.node_of("10.99.0.9", nodes)
    with pytest.raises(emunodes.UsageError, match="no command"):
        emunodes.rsh_split(["-x", "10.99.0.2"])


def test_each_node_has_its_own_caches_and_the_one_shape_is_the_node_alone(tmp_path):
    """The plan's cache environment is used unchanged: the emulation adds no cache variable, it binds the
    node's own folder over the plan's cache root (llmb_compile_cache_dir's default) in the wrapper."""
    from llmbctl.planner.knobs import KNOBS

    node = emunodes.layout(4, 1)[2]
    env = emunodes.node_env(node, tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "2"
    assert not [k for k in env if "CACHE" in k or k == "XDG_CACHE_HOME"]
    default = next(k.default for k in KNOBS if k.name == "llmb_compile_cache_dir")
    assert emunodes.node_binds(node) == [[f"{emunodes.CACHE_ROOT}/node3", default]]
    spec = json.loads(eval(emunodes.wrapper_text(node, "/usr/bin/python3", tmp_path).split("json.loads(", 1)[1].split(")\n", 1)[0]))
    assert spec["binds"] == [[f"{emunodes.CACHE_ROOT}/node3", default]]
    hosts, shape_vars, _ = emunodes.inventory([node], "one", "/usr/bin/python3", tmp_path)
    assert list(hosts["all"]["children"]["accel_nodes"]["hosts"]) == ["node3"]
    assert shape_vars["llmb_tensor_parallel"] == 1


def test_nodes_of_one_gpu_get_a_platform_of_one_gpu_and_a_bad_platform_exits_2(tmp_path):
    """The cache run on a 2-GPU machine: 2 nodes x 1 GPU, shape a, the platform of one-GPU nodes in shape.yml
    (read after the common vars' h200-x2); a platform that is not a profile is refused naming the option."""
    import yaml

    inv = tmp_path / "inv"
    emunodes.write_inventory(inv, emunodes.layout(2, 1), "a", "/usr/bin/python3", tmp_path / "st", platform="h100-x1")
    assert yaml.safe_load((inv / "group_vars/all/shape.yml").read_text())["llmb_platform"] == "h100-x1"
    for bad in ("h999-x9", "../x"):
        p = subprocess.run([sys.executable, str(ROOT / "tests/device/emunodes.py"), "inventory", "--nodes", "2",
                            "--gpus-per-node", "1", "--shape", "a", "--platform", bad, "--out", str(tmp_path / "o"),
                            "--state", str(tmp_path / "s"), "--python", "/usr/bin/python3"], capture_output=True, text=True)
        assert p.returncode == 2 and "--platform" in p.stderr, p.stderr


def test_two_groups_side_by_side_each_plans_its_own_launch(tmp_path):
    """Two serving groups on one 4-GPU machine (the cache run's two samples at once): --only node3,node4 gives
    an inventory of those nodes alone, planned as a group of its own: node3 is its node rank 0 and master,
    with its own address and GPU, nothing of the first group's."""
    nodes = emunodes.layout(4, 1)
    assert [n.name for n in emunodes.only("node3,node4", nodes)] == ["node3", "node4"]
    for bad in ("node3,node3", "node9", ","):
        with pytest.raises(emunodes.UsageError, match="--only|is no emulated node"):
            emunodes.only(bad, nodes)
    inv = tmp_path / "inv-b"
    emunodes.write_inventory(inv, emunodes.only("node3,node4", nodes), "a", "/root/llmb-vllm/bin/python",
                             tmp_path / "state")
    venv_bin = ROOT / ".venv" / "bin"
    p = subprocess.run([str(venv_bin / "python"), str(ROOT / "scripts/launch-plan"), "-i", str(inv), "--format", "json"],
                       capture_output=True, text=True, env=dict(os.environ, PATH=f"{venv_bin}:{os.environ['PATH']}"))
    assert p.returncode == 0, p.stderr
    hosts = {h["host"]: h for h in json.loads(p.stdout)}
    assert sorted(hosts) == ["node3", "node4"]
    f3, f4 = (_flags(hosts[h]["services"][0]["argv"]) for h in ("node3", "node4"))
    assert (f3["--nnodes"], f3["--node-rank"], f4["--node-rank"]) == ("2", "0", "1")
    assert f3["--master-addr"] == f4["--master-addr"] == "10.99.0.3" and f4["--headless"] is True
    assert hosts["node3"]["services"][0]["env"]["VLLM_HOST_IP"] == "10.99.0.3"
    wrapper = (tmp_path / "state" / "interp" / "node4").read_text()
    assert '\\"CUDA_VISIBLE_DEVICES\\": \\"3\\"' in wrapper or '"CUDA_VISIBLE_DEVICES": "3"' in wrapper
