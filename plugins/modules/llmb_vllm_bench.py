#!/usr/bin/python
"""`vllm bench serve` on the node that serves the API, with the recipes' arguments; figures and gate."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_vllm_bench
short_description: Benchmark the endpoint with the engine's own `vllm bench serve` and gate on thresholds
description:
  - Runs C(vllm bench serve) of the engine the plan service runs (its venv's C(vllm), or C(docker exec)
    into its container) against the service's API with the recipes' arguments (chat endpoint, random
    dataset, fixed input and output lengths, C(--save-result)), reads vLLM's result JSON and returns its
    figures under vLLM's names plus the gate's (success_rate, output_token_throughput, latency_p99_s).
  - The API key goes to vLLM in its environment (C(OPENAI_API_KEY), which vLLM's client sends as a
    Bearer token), never in argv.
options:
  service: {description: "The plan service that serves the API (llmb_deployment.host.plan.services[]).", type: dict, required: true}
  requests: {description: Prompts (--num-prompts)., type: int, default: 32}
  concurrency: {description: Requests in flight (--max-concurrency)., type: int, default: 4}
  input_len: {description: Prompt tokens (--random-input-len)., type: int, default: 1024}
  output_len: {description: Output tokens (--random-output-len)., type: int, default: 64}
  request_rate: {description: Requests per second (--request-rate; none = inf)., type: float}
  warmup_requests: {description: Warm-up requests (--num-warmups)., type: int, default: 0}
  ignore_eos: {description: "--ignore-eos (every request runs to output_len).", type: bool, default: false}
  timeout_s: {description: Seconds the benchmark may take., type: int, default: 1800}
  min_success_rate: {description: Fraction of requests that must succeed., type: float, default: 1.0}
  min_output_tok_s: {description: Minimum output token throughput., type: float}
  max_p99_s: {description: Maximum p99 end-to-end latency in seconds., type: float}
  host: {description: Node of the endpoint (for messages)., type: str}
  api_key: {description: "Bearer token when the server requires one (llmb_api_key).", type: str, no_log: true}
  fail_on_gate: {description: Fail when a threshold is missed (false returns the misses in C(violations))., type: bool, default: true}
attributes:
  check_mode: {support: full, description: Runs nothing in check mode.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: vllm bench serve
  llmb_vllm_bench: {service: "{{ svc }}", requests: 10, concurrency: 1, input_len: 1024, output_len: 1024}
"""

RETURN = r"""
result: {description: "Figures (vLLM's key names and the gate's).", type: dict, returned: always}
argv: {description: The command run., type: list, elements: str, returned: always}
violations: {description: "The thresholds missed, as sentences (empty when the run passes).", type: list, elements: str, returned: always}
"""

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.bench import gate, vllm_bench_argv, vllm_bench_figures, vllm_bench_target  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            service=dict(type="dict", required=True), requests=dict(type="int", default=32),
            concurrency=dict(type="int", default=4), input_len=dict(type="int", default=1024),
            output_len=dict(type="int", default=64), request_rate=dict(type="float"),
            warmup_requests=dict(type="int", default=0), ignore_eos=dict(type="bool", default=False),
            timeout_s=dict(type="int", default=1800), min_success_rate=dict(type="float", default=1.0),
            min_output_tok_s=dict(type="float"), max_p99_s=dict(type="float"), host=dict(type="str"),
            api_key=dict(type="str", no_log=True), fail_on_gate=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = m.params
    svc = p["service"]
    target = vllm_bench_target(svc)
    if target is None:
        m.fail_json(msg=f"{p['host']}: service {svc.get('name')} does not run `vllm serve`: no `vllm bench serve` here")
    if m.check_mode:
        m.exit_json(changed=False, result={}, argv=[], violations=[])
    api = svc["api"]
    name = f"llmb-bench-{os.getpid()}-{int(time.time())}.json"
    local_dir = None
    if target["container"]:
        result_dir = "/tmp"
    else:
        local_dir = result_dir = tempfile.mkdtemp(prefix="llmb-bench-")
    argv = vllm_bench_argv(target["prefix"], api["base_url"], api["served_model_name"], target["model"],
                           p["requests"], p["concurrency"], p["input_len"], p["output_len"], result_dir, name,
                           request_rate=p["request_rate"], warmups=p["warmup_requests"], ignore_eos=p["ignore_eos"])
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    if p["api_key"]:
        env["OPENAI_API_KEY"] = p["api_key"]
    where = p["host"] or api["base_url"]
    try:
        try:
            proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=p["timeout_s"])
        except subprocess.TimeoutExpired:
            m.fail_json(msg=f"{where}: `vllm bench serve` did not finish within {p['timeout_s']} s", argv=argv)
        except OSError as e:
            m.fail_json(msg=f"{where}: cannot run {argv[0]}: {e.strerror}", argv=argv)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        if proc.returncode != 0:
            m.fail_json(msg=f"{where}: `vllm bench serve` exited with status {proc.returncode}:\n{tail}", argv=argv)
        path = os.path.join(result_dir, name)
        if target["container"]:
            got = subprocess.run(["docker", "exec", target["container"], "cat", path], capture_output=True, text=True)
            subprocess.run(["docker", "exec", target["container"], "rm", "-f", path], capture_output=True)
            raw, ok = got.stdout, got.returncode == 0
        else:
            try:
                with open(path) as f:
                    raw, ok = f.read(), True
            except OSError:
                raw, ok = "", False
        try:
            result = json.loads(raw) if ok else None
        except ValueError:
            result = None
        if not isinstance(result, dict):
            m.fail_json(msg=f"{where}: `vllm bench serve` wrote no result JSON at {path}:\n{tail}", argv=argv)
    finally:
        if local_dir:
            shutil.rmtree(local_dir, ignore_errors=True)
    res = vllm_bench_figures(result, p["requests"])
    bad = gate(res, p["min_success_rate"], p["min_output_tok_s"], p["max_p99_s"])
    msg = f"{where}: benchmark below thresholds: " + "; ".join(bad)
    if bad and p["fail_on_gate"]:
        m.fail_json(msg=msg, result=res, argv=argv, violations=bad)
    m.exit_json(changed=False, result=res, argv=argv, violations=[msg] if bad else [])


if __name__ == "__main__":
    main()
