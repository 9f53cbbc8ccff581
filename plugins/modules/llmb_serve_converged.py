"""Documentation of the llmb_serve_converged action plugin (plugins/action/llmb_serve_converged.py)."""

DOCUMENTATION = r"""
---
module: llmb_serve_converged
short_description: Smoke-test every endpoint and write every host's serve result in one task (converged re-run)
description:
  - >-
    Where serve's fast path found the stage converged on every host (nothing of the role runs), smoke-tests
    each planned API endpoint from the controller, as a client would (the checks of llmb_smoke: the served
    name, a chat completion with content, reasoning, a tool call, an image, an unknown model's 404), and
    writes every host's serve result (C(<artifacts_dir>/serve/<host>.json): services, restarted [], smoke,
    healthy [], compile_cache {}, and starts: the start history of the host's previous record, carried over
    unchanged), in one task run once instead of two rounds per host.
  - >-
    Where an endpoint fails a check, nothing is written and C(recorded) is false (the per-host tasks then
    smoke-test and record as ever, naming the failure on its host). In check mode, or with O(smoke) false, no
    request is sent and each API service's transcript is empty, as the skipped per-host task records.
version_added: "0.1.0"
author: llm-bringup
options:
  artifacts_dir: {description: The run's artifacts directory (llmb_artifacts_dir)., type: path, required: true}
  hosts: {description: The play's hosts (every host's result is written)., type: list, elements: str, required: true}
  document_hosts: {description: "The deployment document's hosts (each host's plan.services, their api).", type: dict, required: true}
  smoke: {description: Smoke-test the endpoints (serve_smoke)., type: bool, default: true}
  tool_choice: {description: "auto or named (serve_smoke_tool_choice).", type: str, default: auto, choices: [auto, named]}
  timeout_s: {description: Per-request timeout (serve_smoke_timeout_s)., type: int, default: 120}
attributes:
  check_mode: {support: full, description: Sends no request in check mode; writes the controller-side results.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Smoke-test every endpoint and record every host's result
  llmb_serve_converged:
    artifacts_dir: "{{ llmb_artifacts_dir }}"
    hosts: "{{ ansible_play_hosts }}"
    document_hosts: "{{ hostvars.localhost.llmb_deployment_doc.hosts }}"
  run_once: true
"""

RETURN = r"""
recorded: {description: Every endpoint passed (or none was tested) and every host's result is written., returned: always, type: bool}
paths: {description: The result files, one per host., returned: when recorded, type: list}
failures: {description: Each failing endpoint's checks (host, check, request, expected, found)., returned: when not recorded, type: list}
smoked: {description: How many endpoints were smoke-tested., returned: when recorded, type: int}
"""
