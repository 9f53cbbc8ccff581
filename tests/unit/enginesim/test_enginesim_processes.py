"""The double as real processes on localhost ports (Python 3.11, stdlib only, as on the nodes).

Ranks and addresses are honoured: a headless DP rank, a Ray worker or an SGLang node rank > 0
whose master cannot be reached fails with a clear log line and a non-zero exit; with their
masters up, the API becomes healthy. Faults are injected through env / the faults file.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from enginesim_helpers import (
    PYTHON,
    REPO,
    Proc,
    cli,
    free_port,
    http,
    make_model,
    run,
    sim_env,
    wait_healthy,
    wait_port,
)

SERVE = ["serve", "--trust-remote-code", "--served-model-name", "kimi-k2-sim", "--host", "127.0.0.1"]


@pytest.fixture
def model(tmp_path):
    return make_model(tmp_path / "model")


def test_vllm_serves_the_openai_api(tmp_path, model):
    port = free_port()
    env = sim_env(tmp_path / "s")
    argv = [
        *cli("vllm"),
        *SERVE,
        str(model),
        "--port",
        str(port),
        "-tp",
        "8",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "kimi_k2",
        "--reasoning-parser",
        "kimi_k2",
    ]
    with Proc(argv, env, tmp_path / "vllm.log") as proc:
        wait_healthy(port, proc)
        status, models = http(f"http://127.0.0.1:{port}/v1/models")
        assert status == 200 and models["data"][0]["id"] == "kimi-k2-sim"
        status, resp = http(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert status == 200 and resp["choices"][0]["message"]["reasoning_content"]
        status, resp = http(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            {"model": "Kimi-K2-Thinking", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert status == 404
        assert proc.stop() == 0
        log = proc.output()
    assert "Starting vLLM API server 0 on http://127.0.0.1:" in log and "Application startup complete." in log


def test_version_and_unknown_flag(tmp_path, model):
    env = sim_env(tmp_path / "s")
    # no installed `vllm` distribution to stand in for: the newest shipped set (flagset.load)
    assert run([*cli("vllm"), "--version"], env).stdout.strip() == _newest("vllm")
    # --guided-decoding-backend: removed by vLLM PR #29326, in no shipped release (--disable-log-requests,
    # used here before, is back in 0.33.0 as the negation of --enable-log-requests)
    proc = run([*cli("vllm"), "serve", str(model), "--guided-decoding-backend", "xgrammar"], env)
    assert proc.returncode == 2
    assert "vllm: error: unrecognized arguments: --guided-decoding-backend xgrammar" in proc.stderr


@pytest.mark.parametrize(
    "fault, needle",
    [
        ("exit_at_start", "enginesim fault exit_at_start"),
    ],
)
def test_fault_exit_at_start_from_the_faults_file(tmp_path, model, fault, needle):
    env = sim_env(tmp_path / "s")
    (tmp_path / "s" / "faults").write_text(f"# injected by the test\n{fault}\n")
    proc = run([*cli("vllm"), *SERVE, str(model), "--port", str(free_port())], env)
    assert proc.returncode == 1 and needle in proc.stderr


def test_fault_never_healthy_and_no_reasoning(tmp_path, model):
    port = free_port()
    argv = [*cli("vllm"), *SERVE, str(model), "--port", str(port), "--reasoning-parser", "kimi_k2"]
    env = sim_env(tmp_path / "s", LLMB_ENGINESIM_FAULTS="never_healthy,no_reasoning")
    with Proc(argv, env, tmp_path / "v.log") as proc:
        wait_port(port)
        assert http(f"http://127.0.0.1:{port}/health")[0] == 503
    env = sim_env(tmp_path / "s2", LLMB_ENGINESIM_FAULTS="no_reasoning")
    with Proc(argv, env, tmp_path / "v2.log") as proc:
        wait_healthy(port, proc)
        _, resp = http(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert "reasoning_content" not in resp["choices"][0]["message"]


def dp16_args(rpc_port: int) -> list[str]:
    """DP 16 over two nodes of 8 ranks, TP 1, the master on 127.0.0.1:rpc_port."""
    return [
        "--data-parallel-size",
        "16",
        "--data-parallel-size-local",
        "8",
        "--data-parallel-address",
        "127.0.0.1",
        "--data-parallel-rpc-port",
        str(rpc_port),
        "-tp",
        "1",
    ]


def test_headless_rank_without_master_fails_clearly(tmp_path, model):
    env = sim_env(tmp_path / "s")
    argv = [
        *cli("vllm"),
        *SERVE,
        str(model),
        "--headless",
        "--data-parallel-start-rank",
        "8",
        *dp16_args(free_port()),
    ]
    proc = run(argv, env)
    assert proc.returncode == 1
    assert "could not connect to the data parallel master at tcp://127.0.0.1:" in proc.stderr


def test_dp_rank0_waits_for_headless_ranks(tmp_path, model):
    api, rpc = free_port(), free_port()
    common = [*dp16_args(rpc), "--enable-expert-parallel"]
    with Proc(
        [*cli("vllm"), *SERVE, str(model), "--port", str(api), *common],
        sim_env(tmp_path / "n1"),
        tmp_path / "rank0.log",
    ) as rank0:
        wait_port(rpc)
        with Proc(
            [
                *cli("vllm"),
                *SERVE,
                str(model),
                "--port",
                str(api),
                "--headless",
                "--data-parallel-start-rank",
                "8",
                *common,
            ],
            sim_env(tmp_path / "n2"),
            tmp_path / "rank1.log",
        ) as rank1:
            wait_healthy(api, rank0)
            assert "All 16 data parallel engines connected" in rank0.output()
            rank0.stop()
            assert rank1.wait(15) == 1  # a headless rank does not outlive its master
            assert "lost the connection to the data parallel master" in rank1.output()


def test_ray_cluster_then_vllm_tp8_pp2(tmp_path, model):
    ray_port, api = free_port(), free_port()
    n1, n2 = sim_env(tmp_path / "n1"), sim_env(tmp_path / "n2")
    with Proc(
        [
            *cli("ray"),
            "start",
            "--head",
            "--port",
            str(ray_port),
            "--node-ip-address",
            "127.0.0.1",
            "--block",
        ],
        n1,
        tmp_path / "head.log",
    ):
        wait_port(ray_port)
        with Proc(
            [
                *cli("ray"),
                "start",
                "--address",
                f"127.0.0.1:{ray_port}",
                "--node-ip-address",
                "127.0.0.1",
                "--block",
            ],
            n2,
            tmp_path / "worker.log",
        ) as worker:
            with Proc(
                [
                    *cli("vllm"),
                    *SERVE,
                    str(model),
                    "--port",
                    str(api),
                    "-tp",
                    "8",
                    "-pp",
                    "2",
                    "--distributed-executor-backend",
                    "ray",
                ],
                n1,
                tmp_path / "api.log",
            ) as vllm:
                wait_healthy(api, vllm)
                assert "2 node(s), 16 GPUs" in vllm.output()
            assert "Ray runtime started." in worker.output()
            status = run([*cli("ray"), "status"], n1)
            assert status.returncode == 0 and "16.0 GPU" in status.stdout


def test_ray_worker_without_head_and_vllm_without_enough_gpus(tmp_path, model):
    env = sim_env(tmp_path / "s")
    proc = run([*cli("ray"), "start", "--address", f"127.0.0.1:{free_port()}", "--block"], env)
    assert proc.returncode == 1 and "Unable to connect to GCS (ray head)" in proc.stderr
    proc = run([*cli("vllm"), *SERVE, str(model), "--port", str(free_port()), "-tp", "8", "-pp", "2"], env)
    assert (
        proc.returncode == 1
        and "World size (16) is larger than the number of available GPUs (8)" in proc.stderr
    )


def test_sglang_ranks(tmp_path, model):
    api, dist = free_port(), free_port()
    base = [
        PYTHON,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--tp",
        "16",
        "--nnodes",
        "2",
        "--dist-init-addr",
        f"127.0.0.1:{dist}",
        "--trust-remote-code",
        "--host",
        "127.0.0.1",
        "--port",
        str(api),
        "--served-model-name",
        "kimi-k2-sim",
        "--tool-call-parser",
        "kimi_k2",
    ]
    pypath = {"PYTHONPATH": str(REPO / "tests" / "enginesim")}
    alone = run([*base, "--node-rank", "1"], sim_env(tmp_path / "x", **pypath))
    assert alone.returncode == 1 and "while trying to connect to (127.0.0.1," in alone.stderr
    with Proc([*base, "--node-rank", "0"], sim_env(tmp_path / "n1", **pypath), tmp_path / "r0.log") as r0:
        with Proc([*base, "--node-rank", "1"], sim_env(tmp_path / "n2", **pypath), tmp_path / "r1.log"):
            wait_healthy(api, r0)
            assert "fired up and ready to roll" in r0.output()


def test_trtllm_needs_the_model_type_patch(tmp_path, model):
    env = sim_env(tmp_path / "s")
    extra = tmp_path / "extra.yml"
    extra.write_text("print_iter_log: true\n")
    argv = [
        *cli("trtllm-serve"),
        "serve",
        "--tp_size",
        "8",
        "--trust_remote_code",
        "--host",
        "127.0.0.1",
        "--extra_llm_api_options",
        str(extra),
    ]
    bad = run([*argv, "--port", str(free_port()), str(model)], env)
    assert bad.returncode == 1 and "model type `kimi_k2`" in bad.stderr
    patched = make_model(tmp_path / "patched", model_type="deepseek_v3")
    port = free_port()
    with Proc(
        [*cli("trtllm-llmapi-launch"), *cli("trtllm-serve"), *argv[2:], "--port", str(port), str(patched)],
        env,
        tmp_path / "t.log",
    ) as proc:
        wait_healthy(port, proc)
    click = run([*cli("trtllm-serve"), "serve", "--tp-size", "8", str(patched)], env)
    assert click.returncode == 2 and "Error: No such option: --tp-size" in click.stderr


def test_vllm_ascend_needs_the_quantization_targets_patch(tmp_path, model):
    env = sim_env(tmp_path / "s", LLMB_ENGINESIM_ENGINE="vllm-ascend", LLMB_ENGINESIM_DEVICES=16)
    bad = run([*cli("vllm"), *SERVE, str(model), "--port", str(free_port()), "-tp", "16"], env)
    assert (
        bad.returncode == 1 and 'quantization_config.config_groups.group_0.targets = ["Linear"]' in bad.stderr
    )
    good = make_model(tmp_path / "moe", quantization_config__config_groups__group_0__targets=["MoE"])
    port = free_port()
    with Proc(
        [*cli("vllm"), *SERVE, str(good), "--port", str(port), "-tp", "16"], env, tmp_path / "a.log"
    ) as proc:
        wait_healthy(port, proc)


def test_install_into_a_venv(tmp_path, model):
    venv = tmp_path / "venv"
    data = tmp_path / "data"
    (data / "engines").mkdir(parents=True)
    for f in (REPO / "data" / "engines").glob("*.yml"):
        (data / "engines" / f.name).write_text(f.read_text())
    cmd = [PYTHON, str(REPO / "tests" / "enginesim" / "install.py"), "--venv", str(venv), "--data", str(data)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and "changed" in first.stdout, first.stderr
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.stdout.strip().endswith("unchanged")
    env = sim_env(tmp_path / "s")
    env.pop("LLMB_ENGINESIM_DATA")
    assert run([str(venv / "bin" / "vllm"), "--version"], env).stdout.strip() == _newest("vllm")
    assert run([str(venv / "bin" / "ray"), "--version"], env).stdout.strip() == f"ray, version {_newest('ray')}"
    proc = run([str(venv / "bin" / "python"), "-m", "sglang.launch_server"], env)
    assert proc.returncode == 2 and "--model-path" in proc.stderr


def test_the_sim_inventory_plan_runs_on_the_double(tmp_path, model):
    """scripts/launch-plan's plan for inventories/sim, with hosts and paths mapped to localhost."""
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "launch-plan"), "-i", "inventories/sim", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    ray_port, api_port = free_port(), free_port()
    mapping = {
        "172.30.0.11": "127.0.0.1",
        "172.30.0.12": "127.0.0.1",
        "6379": str(ray_port),
        "8000": str(api_port),
        "/opt/llmb/models/kimi-k2-sim": str(model),
    }

    def local(tok):
        for old, new in mapping.items():
            tok = (
                tok.replace(old, new) if tok == old or tok.startswith(old + ":") or ":" + old in tok else tok
            )
        return tok

    def localize(argv):
        out = [local(tok) for tok in argv]
        exe = out[0].rsplit("/", 1)[-1]
        return [*cli(exe), *out[1:]]

    procs = []
    try:
        for hp in plan:
            for svc in sorted(hp["services"], key=lambda s: s["order"]):
                # all ranks start at once here: give the Ray head time to come up on a loaded machine
                env = sim_env(tmp_path / hp["host"], LLMB_ENGINESIM_CONNECT_TIMEOUT="30",
                              **{k: local(v) for k, v in svc["env"].items()})
                procs.append(
                    (svc, Proc(localize(svc["argv"]), env, tmp_path / f"{hp['host']}-{svc['name']}.log"))
                )
        procs.sort(key=lambda item: item[0]["order"])
        api = [p for s, p in procs if s.get("health")][0]
        wait_healthy(api_port, api)
        status, resp = http(
            f"http://127.0.0.1:{api_port}/v1/chat/completions",
            {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "ping"}]},
        )
        assert status == 200 and resp["choices"][0]["message"]["reasoning_content"]
    finally:
        for _, p in reversed(procs):
            p.stop()


def _newest(engine: str) -> str:
    from llmbctl.catalog import Catalog

    return Catalog(REPO / "data").newest_version(engine)
