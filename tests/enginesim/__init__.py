"""Engine test double: stand-ins for `vllm`, `ray`, `trtllm-serve`, `python -m sglang.launch_server`.

Runs on the simulated nodes (Python 3.11, standard library only). It parses argv against the
same flag sets the planner uses (data/engines/*.yml), reads the model directory's config.json the
way the real engine would fail on it, honours rank and address arguments (a headless rank, Ray
worker or SGLang node rank > 0 that cannot reach its master fails), and serves the OpenAI API
with deterministic answers, reasoning_content and tool calls. See docs/launch-plan.md.
"""
