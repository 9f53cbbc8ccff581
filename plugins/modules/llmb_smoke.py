#!/usr/bin/python
"""OpenAI smoke tests of a served endpoint."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_smoke
short_description: Smoke-test an OpenAI-compatible endpoint (served name, chat, reasoning, tool call, image)
description:
  - Runs from wherever it is delegated (the controller, as a client would); only reads.
  - Checks that /v1/models lists the served name, a chat completion answers 200 with content,
    reasoning_content is present when a reasoning parser is on, a tool call comes back when tool
    calling is on, and an unknown model name answers 404.
options:
  base_url: {description: "API base, e.g. http://10.0.0.1:8000/v1.", type: str, required: true}
  model: {description: Served model name., type: str, required: true}
  reasoning: {description: Expect reasoning_content., type: bool, default: false}
  tool_calls: {description: Expect a tool call., type: bool, default: false}
  tool_choice: {description: "auto (the model decides) or named (the request names the function: forced, for random weights).", type: str, default: auto, choices: [auto, named]}
  image: {description: "Send a chat request with an image (an image_url content part, a PNG data URL): the plan's api.vision.", type: bool, default: false}
  timeout_s: {description: Per-request timeout., type: int, default: 120}
  host: {description: Node the endpoint runs on (for messages)., type: str}
  api_key: {description: Bearer token when the server requires one., type: str, no_log: true}
attributes:
  check_mode: {support: full, description: Only sends requests.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Smoke-test the endpoint
  llmb_smoke: {base_url: "http://10.0.0.1:8000/v1", model: kimi-k2-thinking, reasoning: true, tool_calls: true}
  delegate_to: localhost
"""

RETURN = r"""
transcript: {description: One record per check (check, ok, request, status, found, expected)., type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.smoke import failures_text, run_smoke  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            model=dict(type="str", required=True),
            reasoning=dict(type="bool", default=False),
            tool_calls=dict(type="bool", default=False),
            tool_choice=dict(type="str", default="auto", choices=["auto", "named"]),
            image=dict(type="bool", default=False),
            timeout_s=dict(type="int", default=120),
            host=dict(type="str"),
            api_key=dict(type="str", no_log=True),
        ),
        supports_check_mode=True,
    )
    p = m.params
    checks = run_smoke(p["base_url"], p["model"], p["reasoning"], p["tool_calls"], p["timeout_s"], p["api_key"],
                       p["tool_choice"], p["image"])
    if all(c["ok"] for c in checks):
        m.exit_json(changed=False, transcript=checks)
    m.fail_json(msg=failures_text(p["host"] or p["base_url"], checks), transcript=checks)


if __name__ == "__main__":
    main()
