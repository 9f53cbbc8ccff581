#!/usr/bin/python
"""Closed-loop chat-completion benchmark with optional thresholds."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_bench
short_description: Benchmark an OpenAI-compatible endpoint and gate on thresholds
description:
  - Sends a fixed number of chat completions with a fixed concurrency and reports latency
    percentiles and throughput; fails when a configured threshold is missed. Only reads.
options:
  base_url: {description: API base URL., type: str, required: true}
  model: {description: Served model name., type: str, required: true}
  requests: {description: Number of requests., type: int, default: 32}
  concurrency: {description: Parallel clients., type: int, default: 4}
  max_tokens: {description: Max output tokens per request., type: int, default: 64}
  warmup_requests: {description: "Requests sent first, one at a time, not counted (kernels compiled on first use stay out of the figures).", type: int, default: 0}
  min_success_rate: {description: Fraction of requests that must succeed., type: float, default: 1.0}
  min_output_tok_s: {description: Minimum output token throughput., type: float}
  max_p99_s: {description: Maximum p99 latency in seconds., type: float}
  host: {description: Node of the endpoint (for messages)., type: str}
  api_key: {description: "Bearer token when the server requires one (llmb_api_key).", type: str, no_log: true}
  fail_on_gate:
    description: >-
      Fail when a threshold is missed; false returns the misses in C(violations) instead, so the caller
      records the figures first and fails after (roles/bench).
    type: bool
    default: true
attributes:
  check_mode: {support: full, description: Only sends requests.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Benchmark
  llmb_bench: {base_url: "http://10.0.0.1:8000/v1", model: kimi-k2-thinking, requests: 64, concurrency: 8}
  delegate_to: localhost
"""

RETURN = r"""
result: {description: Benchmark figures., type: dict, returned: always}
violations: {description: "The thresholds missed, as sentences (empty when the run passes).", type: list, elements: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.bench import gate, run_bench  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True), model=dict(type="str", required=True),
            requests=dict(type="int", default=32), concurrency=dict(type="int", default=4),
            max_tokens=dict(type="int", default=64), min_success_rate=dict(type="float", default=1.0),
            warmup_requests=dict(type="int", default=0),
            min_output_tok_s=dict(type="float"), max_p99_s=dict(type="float"), host=dict(type="str"),
            api_key=dict(type="str", no_log=True), fail_on_gate=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = m.params
    res = run_bench(p["base_url"], p["model"], p["requests"], p["concurrency"], p["max_tokens"],
                    warmup=p["warmup_requests"], token=p["api_key"])
    bad = gate(res, p["min_success_rate"], p["min_output_tok_s"], p["max_p99_s"])
    msg = f"{p['host'] or p['base_url']}: benchmark below thresholds: " + "; ".join(bad)
    if bad and p["fail_on_gate"]:
        m.fail_json(msg=msg, result=res, violations=bad)
    m.exit_json(changed=False, result=res, violations=[msg] if bad else [])


if __name__ == "__main__":
    main()
