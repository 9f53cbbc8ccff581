"""vLLM's own multi-node launch on the double (issue 23): node rank 0 serves once every node rank
joined its store on --master-port; it refuses what the real engine refuses: a node rank > 0 without
--headless, node ranks that do not cover 0..N-1, a master address that is not rank 0's."""

from __future__ import annotations

import contextlib
import time
import urllib.request

import pytest
from enginesim_helpers import Proc, cli, free_port, make_model, run, sim_env, wait_healthy, wait_port

SERVE = ["serve", "--trust-remote-code", "--served-model-name", "kimi-k2-sim", "--host", "127.0.0.1"]


@pytest.fixture
def model(tmp_path):
    return make_model(tmp_path / "model")


def native(master_port: int, nnodes: int = 2, tp: int | None = None, addr: str = "127.0.0.1") -> list[str]:
    tp = tp or 8 * nnodes  # 8 ranks a node (LLMB_ENGINESIM_DEVICES=8)
    return ["--tensor-parallel-size", str(tp), "--nnodes", str(nnodes), "--master-addr", addr,
            "--master-port", str(master_port)]


def rank0(tmp_path, model, api, master, nnodes=2, name="rank0"):
    return Proc([*cli("vllm"), *SERVE, str(model), "--port", str(api), *native(master, nnodes), "--node-rank", "0"],
                sim_env(tmp_path / name), tmp_path / f"{name}.log")


def follower(tmp_path, model, api, master, rank, nnodes=2, headless=True, addr="127.0.0.1", name=None):
    name = name or f"rank{rank}"
    argv = [*cli("vllm"), *SERVE, str(model), "--port", str(api), *native(master, nnodes, addr=addr),
            "--node-rank", str(rank), *(["--headless"] if headless else [])]
    return Proc(argv, sim_env(tmp_path / name), tmp_path / f"{name}.log")


@contextlib.contextmanager
def two_nodes_serving(tmp_path, model):
    """Node rank 0 and a headless node rank 1, serving: (rank 0, rank 1, the API port)."""
    api, master = free_port(), free_port()
    with rank0(tmp_path, model, api, master) as r0:
        wait_port(master)
        with follower(tmp_path, model, api, master, 1) as r1:
            wait_healthy(api, r0)
            yield r0, r1, api


def test_node_rank_0_serves_once_the_headless_node_joined(tmp_path, model):
    with two_nodes_serving(tmp_path, model) as (r0, r1, _api):
        assert "All 2 nodes joined (TP 16 x PP 1 = 16 ranks)" in r0.output()
        assert "node rank 1 of 2, ranks 8..15 of 16" in r1.output()
        r0.stop()
        assert r1.wait(15) == 1  # a headless node does not outlive node rank 0
        assert "lost the connection to the node rank 0" in r1.output()


def test_a_node_rank_above_0_without_headless_is_refused(tmp_path, model):
    proc = run([*cli("vllm"), *SERVE, str(model), *native(free_port()), "--node-rank", "1"], sim_env(tmp_path / "s"))
    assert proc.returncode == 1
    assert "node rank 1 of --nnodes 2 must run with --headless" in proc.stderr


def test_node_ranks_that_do_not_cover_0_to_n_minus_1_are_refused(tmp_path, model):
    api, master = free_port(), free_port()
    with rank0(tmp_path, model, api, master, nnodes=3) as r0:
        wait_port(master)
        with follower(tmp_path, model, api, master, 1, nnodes=3, name="a"), \
                follower(tmp_path, model, api, master, 1, nnodes=3, name="b"):
            assert r0.wait(20) == 1
    assert "node ranks [0, 1, 1] do not cover 0..2" in r0.output()


def test_a_node_rank_out_of_range_is_refused(tmp_path, model):
    proc = run([*cli("vllm"), *SERVE, str(model), *native(free_port()), "--node-rank", "2", "--headless"],
               sim_env(tmp_path / "s"))
    assert proc.returncode == 1 and "node_rank=2 must be less than nnodes=2." in proc.stderr  # vLLM 0.26.0's words


def test_a_follower_pointed_at_another_master_address_fails_naming_it(tmp_path, model):
    api, master = free_port(), free_port()
    with rank0(tmp_path, model, api, master) as r0:
        wait_port(master)
        # a TEST-NET address nothing answers on (rank 0's store listens on every interface)
        with follower(tmp_path, model, api, master, 1, addr="192.0.2.1") as r1:
            assert r1.wait(20) == 1
        assert "failed to connect to any network address of (192.0.2.1," in r1.output()
        assert r0.p.poll() is None  # rank 0 still waits (until its own timeout)


def test_rank_0_whose_master_address_is_not_its_own_fails(tmp_path, model):
    argv = [*cli("vllm"), *SERVE, str(model), *native(free_port(), addr="192.0.2.1"), "--node-rank", "0"]
    proc = run(argv, sim_env(tmp_path / "s"))
    assert proc.returncode == 1
    assert "--master-addr 192.0.2.1 is not an address of node rank 0" in proc.stderr


def test_each_node_needs_its_share_of_the_ranks_on_its_own_gpus(tmp_path, model):
    env = sim_env(tmp_path / "s", LLMB_ENGINESIM_DEVICES="")
    env["CUDA_VISIBLE_DEVICES"] = "0,1"  # a node emulated on two GPUs of a machine
    proc = run([*cli("vllm"), *SERVE, str(model), *native(free_port(), tp=8), "--node-rank", "0"], env)
    assert proc.returncode == 1
    assert "each of the 2 nodes runs 4 of the 8 ranks; this node has 2 GPUs" in proc.stderr


def test_a_node_that_dies_leaves_node_rank_0_up_and_healthy_like_the_real_engine(tmp_path, model):
    """vLLM 0.26.0 on the lent 4x H200 (docs/examples/serve-real-multinode/faults/kill-rank/): node 2's
    engine killed with SIGKILL, node rank 0 did not exit and /health still answered 200 two minutes
    later. The double must not claim more: the loss is for the group (llmb-group) to see."""
    with two_nodes_serving(tmp_path, model) as (r0, r1, api):
        r1.p.kill()
        r1.p.wait(10)
        time.sleep(3)
        assert r0.p.poll() is None
        with urllib.request.urlopen(f"http://127.0.0.1:{api}/health", timeout=5) as resp:
            assert resp.status == 200
        assert "NCCL error" not in r0.output()


def test_the_first_request_after_a_lost_node_fails_and_rank_0_exits_0_like_the_real_engine(tmp_path, model):
    """vLLM 0.26.0 on the lent 4x H200, second kill-rank run (faults/kill-rank/): /health 200 for 30 s
    after node 2 was killed, then a chat request got HTTP 500 ("EngineCore encountered an issue") in
    0.02 s, the workers logged "RuntimeError: NCCL error: remote process exited or there was a network
    error", and node rank 0's API exited with status 0 (so Restart=on-failure alone would not restart it)."""
    import json
    import urllib.error

    with two_nodes_serving(tmp_path, model) as (r0, r1, api):
        r1.p.kill()
        r1.p.wait(10)
        time.sleep(1)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "still there?"}]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{api}/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 500
        assert json.loads(err.value.read())["error"]["message"].startswith("EngineCore encountered an issue")
        assert r0.p.wait(10) == 0
    assert "RuntimeError: NCCL error: remote process exited or there was a network error" in r0.output()


def test_the_native_launch_and_ray_do_not_mix(tmp_path, model):
    argv = [*cli("vllm"), *SERVE, str(model), *native(free_port()), "--node-rank", "0",
            "--distributed-executor-backend", "ray"]
    proc = run(argv, sim_env(tmp_path / "s"))
    assert proc.returncode == 1
    assert "nnodes > 1 can only be set when distributed executor backend is mp, uni or external_launcher." in proc.stderr


def test_the_double_logs_the_weight_load_as_vllm_0_26_does(tmp_path, model):
    """The real engine's "Loading weights took" and "Model loading took" lines (the load rate is read from them,
    llmb.serve.weight_load_timings): the checkpoint's safetensors bytes over the ranks of a node."""
    from llmb.serve import weight_load_timings

    api = free_port()
    with Proc([*cli("vllm"), *SERVE, str(model), "--port", str(api), "--tensor-parallel-size", "4"],
              sim_env(tmp_path / "one"), tmp_path / "one.log") as p:
        wait_healthy(api, p)
        got = weight_load_timings(p.output())
    shards = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    assert got["loading_weights_s"] is not None and got["loading_weights_s"] >= 0
    assert got["model_loading_gib"] == round(shards / 4 / 2**30, 2)


def _rank_dirs(root) -> list[str]:
    return sorted(p.parent.parent.name for p in root.glob("torch_compile_cache/*/rank_*/backbone/graph.bin"))


def test_each_node_compiles_its_own_ranks_and_a_peers_copy_gives_no_hit_like_vllm_0_26(tmp_path, model):
    """vLLM 0.26.0 on 2x H200 (docs/examples/serve-real-multinode/cache-group/): the torch.compile cache is kept
    per rank, one key for the group; node rank 0 holds only its ranks' directories, the headless node its own.
    A rebuilt node given node rank 0's cache (the serve role's peer copy) compiles again: no peer in one group
    holds its ranks. Its next start loads."""
    import shutil

    def start_group():
        with two_nodes_serving(tmp_path, model) as (r0, r1, _api):
            return r0.output(), r1.output()

    out0, out1 = start_group()
    c0, c1 = tmp_path / "rank0" / "vllm-cache", tmp_path / "rank1" / "vllm-cache"
    assert _rank_dirs(c0) == [f"rank_{r}_0" for r in range(8)] and out0.count("Compiling a graph") == 8
    assert _rank_dirs(c1) == sorted(f"rank_{r}_0" for r in range(8, 16)) and out1.count("Compiling a graph") == 8
    # one key for every rank of the group
    assert {p.name for p in c0.glob("torch_compile_cache/*")} == {p.name for p in c1.glob("torch_compile_cache/*")}
    # node rank 1 rebuilt, its cache filled from node rank 0's
    shutil.rmtree(c1)
    shutil.copytree(c0, c1)
    out0, out1 = start_group()
    assert out0.count("Directly load the compiled graph(s)") == 8 and "Compiling a graph" not in out0
    assert out1.count("Compiling a graph") == 8 and "Directly load" not in out1
    out0, out1 = start_group()
    assert out1.count("Directly load the compiled graph(s)") == 8 and "Compiling a graph" not in out1


def test_enforce_eager_compiles_nothing(tmp_path, model):
    api = free_port()
    with Proc([*cli("vllm"), *SERVE, str(model), "--port", str(api), "--enforce-eager"], sim_env(tmp_path / "n"),
              tmp_path / "n.log") as p:
        wait_healthy(api, p)
        assert "Enforce eager set, disabling torch.compile" in p.output()
    assert _rank_dirs(tmp_path / "n" / "vllm-cache") == []
