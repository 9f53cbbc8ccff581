#!/usr/bin/python
"""What runs on this node against the plan and the lock (llmb status): one call per host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_status
short_description: State, health, release, model commit, image and drift of this host's planned services
description:
  - For every service of the host's part of the launch plan, reads its state, since when, restarts,
    one probe of the health (or readiness) the plan defines, the release the API server reports, the
    unit file on disk against the one the plan renders; for the host, the engine release installed,
    the model commit of the weights record and the devices' memory in use (nvidia-smi --query-gpu).
  - Names every drift (llmb.status.judge) as service, check, expected, found. Only reads; never fails
    on drift (the caller records it and decides).
options:
  services:
    description: "The host's planned services, each {name, kind, role, health, ready, api, container, unit (the text the plan renders, units only)}."
    type: list
    elements: dict
    required: true
  engine: {description: "{name, version, install, version_command, image: {ref, digest, id}} from the deployment.", type: dict, default: {}}
  model: {description: "{dir, commit} from the deployment.", type: dict, default: {}}
  gpus: {description: Query the devices' memory in use with nvidia-smi., type: bool, default: true}
  api_key: {description: Bearer token for /v1/models and /version when the server requires one., type: str, no_log: true}
attributes:
  check_mode: {support: full, description: Only reads.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Status of this host's services
  llmb_status:
    services: "{{ llmb_deployment.host.plan.services }}"
    engine: {version: 0.19.1, install: host, version_command: [/opt/llmb/venvs/vllm-0.19.1/bin/vllm, --version]}
    model: {dir: /opt/llmb/models/kimi-k2-sim, commit: d2299b8682de002b5b9603f1a35969b7a57cca49}
"""

RETURN = r"""
services: {description: "Per service: name, state, sub, since, restarts, pid, health {ok, detail}, release, image_id.", type: list, returned: always}
installed_release: {description: The engine release the engine's version command prints (host install)., type: str, returned: always}
model_commit: {description: The commit of the weights record in the model directory., type: str, returned: always}
gpu: {description: "{gpus: [{index, used_mib, total_mib}], error}.", type: dict, returned: always}
drift: {description: "[{service, check, expected, found}]; empty when all runs as planned.", type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb.status import judge, observe  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            services=dict(type="list", elements="dict", required=True),
            engine=dict(type="dict", default={}),
            model=dict(type="dict", default={}),
            gpus=dict(type="bool", default=True),
            api_key=dict(type="str", no_log=True),
        ),
        supports_check_mode=True,
    )
    p = module.params

    def run(argv):
        try:
            return module.run_command(argv, handle_exceptions=False)
        except OSError as e:  # not there, not executable: a finding, not a module failure
            return 127, "", f"{argv[0]}: {e}"

    observed = observe(run, p["services"], p["engine"], p["model"], p.get("api_key"), p["gpus"])
    drift = judge(p["services"], observed, p["engine"], p["model"])
    for s in observed["services"]:
        s.pop("unit_text", None)  # compared, not returned
    module.exit_json(changed=False, drift=drift, **observed)


if __name__ == "__main__":
    main()
