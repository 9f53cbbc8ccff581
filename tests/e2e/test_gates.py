"""The bench and accuracy gates end to end on the converged simulated cluster (after test_site.py in
file order; run alone, the `converged` fixture runs site.yml once): each gate passing and failing,
the figures in report.json next to their thresholds, the verdict FAILED on a missed gate (the figures
are recorded before the stage fails).

The accuracy questions are our own: arithmetic word problems in gsm8k's format generated here
(tests/enginesim/gsm8k.py), which the engine double answers right for the fraction written to
/etc/llmb-enginesim/gsm8k-accuracy on the node. Kept small (8 questions, 4 bench requests).

Run alone: LLMB_E2E_CLUSTER=<name> pytest tests/e2e/test_gates.py
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from enginesim import gsm8k

ACC_FILE = "/etc/llmb-enginesim/gsm8k-accuracy"
QUESTIONS = 8


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def converged(cluster):
    """The shared converged cluster; converged here once when this file runs alone."""
    health = f"http://{cluster.ip('node1')}:8000/health"
    if not _healthy(health):
        run = cluster.playbook("site.yml")
        assert run.rc == 0, "site.yml did not converge the cluster:\n" + run.out[-5000:]
        deadline = time.monotonic() + 60
        while not _healthy(health):
            assert time.monotonic() < deadline, "the API does not answer /health after site.yml"
            time.sleep(2)
    yield cluster
    cluster.node("node1", "rm", "-f", ACC_FILE, check=False)


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> tuple[str, list[str]]:
    rows = gsm8k.problems(QUESTIONS, 2026)
    path = gsm8k.write_jsonl(tmp_path_factory.mktemp("gsm8k") / "test.jsonl", rows)
    return str(path), [r["question"] for r in rows]


def _report(run) -> dict:
    m = re.search(r"report\.html: (\S+?)/report\.html", run.out)
    assert m, "no report.html line in the output:\n" + run.out[-3000:]
    return json.loads((Path(m.group(1)) / "report.json").read_text())


def _stage_then_report(cluster, playbook: str, *args: str):
    """The stage run, then report.yml on the same run (ansible-playbook stops after a playbook that
    failed a host, as a site.yml run would not: its report play runs on the controller)."""
    rid = f"e2e-gate-{int(time.time() * 1000)}"
    run = cluster.playbook(playbook, *args, env={"LLMB_RUN_ID": rid})
    rep = cluster.playbook("playbooks/report.yml", env={"LLMB_RUN_ID": rid})
    assert rep.rc == 0, rep.out[-3000:]
    return run, _report(rep)


def _accuracy(cluster, acc: float):
    cluster.node("node1", "sh", "-c", f"mkdir -p /etc/llmb-enginesim && echo {acc} > {ACC_FILE}")


BENCH_SMALL = ("-e", "bench_requests=4", "-e", "bench_concurrency=2", "-e", "bench_warmup_requests=0",
               "-e", "bench_input_len=32", "-e", "bench_max_tokens=16")


def _acc_vars(path: str, min_score: float) -> tuple[str, ...]:
    return ("-e", f"accuracy_dataset={path}", "-e", f"accuracy_min_score={min_score}",
            "-e", "accuracy_concurrency=4", "-e", "accuracy_request_timeout_s=30", "-e", "accuracy_max_retries=1")


def test_bench_and_accuracy_gates_pass_with_figures_in_the_report(converged, questions):
    path, qs = questions
    _accuracy(converged, 1.0)
    run = converged.playbook("playbooks/bench.yml", "playbooks/accuracy.yml", "playbooks/report.yml",
                             *BENCH_SMALL, "-e", "bench_min_output_tok_s=0.01", *_acc_vars(path, 0.75))
    assert run.rc == 0, run.out[-6000:]
    rep = _report(run)
    assert rep["verdict"] == "OK", rep["failed"]
    bench = rep["bench"][0]
    assert bench["host"] == "node1" and bench["succeeded"] == 4 and bench["output_token_throughput"] > 0.01
    # vllm serve runs here: the recipes' `vllm bench serve` (the double's), its figures under vLLM's names
    assert bench["tool"] == "vllm bench serve" and bench["completed"] == 4 and bench["mean_ttft_ms"] > 0
    assert bench["num_prompts"] == 4 and bench["max_concurrency"] == 2
    assert bench["thresholds"]["output_token_throughput"] == ">= 0.01"
    acc = rep["accuracy"][0]
    assert acc["host"] == "node1" and acc["questions"] == QUESTIONS
    assert acc["exact_match_flexible"] == gsm8k.expected_score(qs, 1.0) == 1.0
    assert acc["thresholds"]["exact_match_flexible"] == ">= 0.75"
    assert f"{QUESTIONS} of 1319 questions" in acc["note"]  # a subset: the reference does not apply
    assert "sim-e2e-api-key-not-secret" not in run.out


def test_bench_gate_miss_records_the_figures_and_fails_the_report(converged):
    run, rep = _stage_then_report(converged, "playbooks/bench.yml", *BENCH_SMALL,
                                  "-e", "bench_min_output_tok_s=1000000000")
    assert run.rc != 0
    assert "node1: benchmark below thresholds: output throughput" in run.out
    assert rep["verdict"] == "FAILED"
    assert [(f["stage"], f["host"]) for f in rep["failed"]] == [("bench", "node1")]
    assert "below thresholds" in rep["failed"][0]["why"]
    bench = rep["bench"][0]
    assert bench["succeeded"] == 4 and bench["output_token_throughput"] > 0  # recorded, then failed
    assert bench["tool"] == "vllm bench serve" and bench["completed"] == 4
    assert bench["thresholds"]["output_token_throughput"] == ">= 1000000000"


def test_accuracy_gate_miss_records_the_score_and_fails_the_report(converged, questions):
    path, qs = questions
    _accuracy(converged, 0.25)
    want = gsm8k.expected_score(qs, 0.25)
    assert want < 0.75
    run, rep = _stage_then_report(converged, "playbooks/accuracy.yml", *_acc_vars(path, 0.75))
    assert run.rc != 0
    assert f"node1: accuracy gate: gsm8k flexible-extract exact_match {want:.4f} < 0.75" in run.out
    assert rep["verdict"] == "FAILED"
    assert [(f["stage"], f["host"]) for f in rep["failed"]] == [("accuracy", "node1")]
    acc = rep["accuracy"][0]
    assert acc["exact_match_flexible"] == pytest.approx(want, abs=1e-4) and acc["questions"] == QUESTIONS
    assert acc["thresholds"]["exact_match_flexible"] == ">= 0.75"
    assert "sim-e2e-api-key-not-secret" not in run.out
