"""Documentation of the llmb_accuracy action plugin (plugins/action/llmb_accuracy.py)."""

DOCUMENTATION = r"""
---
module: llmb_accuracy
short_description: Run lm-eval's gsm8k against the served endpoints and gate on the recipe's accuracy
description:
  - >-
    Runs the pinned lm-eval of the controller venv (C(python -m lm_eval run --model
    local-chat-completions ... --apply_chat_template --fewshot_as_multiturn), greedy, 5-shot) against
    each endpoint's C(/v1/chat/completions), on a local gsm8k-format JSONL (no hub). The API key goes
    to lm-eval in its environment, never in argv, and is masked in its log.
  - >-
    Writes C(<artifacts_dir>/accuracy/<host>.json) (llmbctl.results) with the flexible-extract
    exact_match, the threshold and the recipe's reference (data/accuracy.yml), lm-eval's results under
    C(<host>.lm-eval/) and its log C(<host>.lm-eval.log); then fails when the score is below the
    threshold. On the full gsm8k test split the threshold is the reference less O(tolerance); on a
    subset it is O(min_score) (required) and the result says the reference does not apply.
  - Without O(dataset) it records that the gate did not run (the report shows the note).
version_added: "0.1.0"
author: llm-bringup
options:
  endpoints: {description: "The API services of the host's plan (base_url, served_model_name).", type: list, elements: dict, required: true}
  api_key: {description: "Bearer token when the server requires one (llmb_api_key).", type: str}
  dataset: {description: gsm8k-format JSONL of the test questions on the controller (accuracy_dataset)., type: path}
  fewshot_dataset: {description: "gsm8k-format JSONL the few-shot examples are drawn from (default: dataset).", type: path}
  num_fewshot: {description: Few-shot examples per question., type: int, default: 5}
  max_gen_toks: {description: Max output tokens per answer., type: int, default: 2048}
  concurrency: {description: Requests in flight (lm-eval num_concurrent)., type: int, default: 32}
  request_timeout_s: {description: Seconds one request may take., type: int, default: 600}
  timeout_s: {description: Seconds the whole lm-eval run may take., type: int, default: 3600}
  max_retries: {description: Attempts per request., type: int, default: 3}
  tolerance: {description: Allowed drop below the recipe's reference on the full test split., type: float, default: 0.02}
  min_score: {description: Minimum flexible-extract exact_match (required on a subset)., type: float}
  model_profile: {description: The deployment's model profile (selects the reference)., type: str}
  platform: {description: The deployment's platform (selects the reference)., type: str}
  decode_context_parallel: {description: DCP size (selects the reference)., type: int, default: 1}
  artifacts_dir: {description: The run's artifacts directory (llmb_artifacts_dir)., type: path, required: true}
  host: {description: Host the result is of (default inventory_hostname)., type: str}
attributes:
  check_mode: {support: full, description: Runs nothing; records that lm-eval did not run.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: gsm8k accuracy gate
  llmb_accuracy:
    endpoints: [{base_url: "http://10.0.0.1:8000/v1", served_model_name: kimi-k2-thinking}]
    dataset: /srv/llmb/gsm8k/test-200.jsonl
    min_score: 0.85
    artifacts_dir: "{{ llmb_artifacts_dir }}"
"""

RETURN = r"""
path: {description: Path of the result file., returned: always, type: str}
accuracy: {description: The recorded result (ok, runs, thresholds, reference, note, error)., returned: always, type: dict}
"""
