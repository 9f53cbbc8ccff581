#!/usr/bin/python
"""Take a worker out of a prefill/decode router's rotation (drained) or put it back (llmb stop / start)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_router_worker
short_description: Remove a worker from a PD router (its requests in flight drained) or add it back
description:
  - "O(state=absent): the router (sglang-router's worker API) stops routing to O(url); the module waits
    until it no longer lists it, then until the worker's requests in flight finish (SGLang's /get_load,
    else O(drain_s) seconds). O(state=present): adds it back and waits until the router lists it healthy
    (llmb.router)."
options:
  router: {description: "The router's base URL (http://host:port).", type: str, required: true}
  url: {description: The worker's URL as the router knows it., type: str, required: true}
  state: {description: absent (drain and remove) or present (add back)., type: str, default: absent, choices: [absent, present]}
  worker_type: {description: "prefill or decode (state=present).", type: str, choices: [prefill, decode]}
  drain_s: {description: Longest wait for requests in flight after the removal., type: float, default: 30}
  timeout_s: {description: Longest wait for the router to take the change., type: float, default: 120}
attributes:
  check_mode: {support: full, description: Reports what it would do; changes nothing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Take the decode worker out of rotation
  llmb_router_worker: {router: "http://10.0.0.1:8000", url: "http://10.0.0.2:30000", state: absent}
"""

RETURN = r"""
load: {description: Requests the router counted on the worker when it was removed., type: int, returned: state=absent}
drained_s: {description: Seconds from the removal until the stop could go on., type: float, returned: state=absent}
how: {description: How the drain ended., type: str, returned: state=absent}
running: {description: "Requests the worker still ran when the wait ended (its /get_load; null: no such endpoint).", type: int, returned: state=absent}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.router import RouterError, add, remove, workers  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            router=dict(type="str", required=True),
            url=dict(type="str", required=True),
            state=dict(type="str", default="absent", choices=["absent", "present"]),
            worker_type=dict(type="str", choices=["prefill", "decode"]),
            drain_s=dict(type="float", default=30),
            timeout_s=dict(type="float", default=120),
        ),
        required_if=[("state", "present", ["worker_type"])],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if module.check_mode:
            listed = any(w.get("url", "").rstrip("/") == p["url"].rstrip("/") for w in workers(p["router"]))
            module.exit_json(changed=listed == (p["state"] == "absent"))
        if p["state"] == "absent":
            module.exit_json(**remove(p["router"], p["url"], p["drain_s"], p["timeout_s"]))
        module.exit_json(**add(p["router"], p["url"], p["worker_type"], p["timeout_s"]))
    except RouterError as e:
        module.fail_json(msg=f"{p['url']} at the router {p['router']}: {e}")


if __name__ == "__main__":
    main()
