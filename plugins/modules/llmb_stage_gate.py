#!/usr/bin/python
"""The fast path of a converged re-run: has this stage anything to do on this node? (llmb.stagegate)"""

from __future__ import annotations

DOCUMENTATION = r"""
module: llmb_stage_gate
short_description: Compare a stage's inputs and the node's recorded state in one call, or record them
description:
  - C(check) reads the node's record of the stage's last converged run (I(state_dir)/stages/I(stage).json)
    and what the node shows now of the watched state (I(watch)), and returns C(converged) with the
    reasons when not (C(differs)). Changes nothing.
  - C(record) writes the record after the stage converged (I(digest) and what is observed now). The
    record is the toolkit's own bookkeeping, never reported as a change; nothing is written in check mode.
options:
  action:
    description: >-
      check, record, check_all (several stages' checks in one call: I(stages)), or prefetched_all (run once on the
      controller: the stage's verdict for every host of I(hosts) from this run's check_all results, I(gates), never asking a node).
    type: str
    required: true
    choices: [check, record, check_all, prefetched_all]
  stage: {description: The stage's name (engine, weights, ssh_mesh, serve); check and record., type: str}
  digest: {description: Digest of the stage's inputs for this host (llmb_stage_digest); check and record., type: str}
  watch: {description: "What to observe (llmb_stage_watch): hash, stat, names (glob patterns), units, tcp, http, commands; check and record.", type: dict}
  stages: {description: "check_all: {stage: {digest, watch}} (llmb_stage_specs).", type: dict}
  gates: {description: "check: this run's check_all result on the host (site.yml); the action plugin returns the stage's verdict from it without asking the node while it holds (llmbctl.stagegate.prefetched). prefetched_all: {host: that result}.", type: dict}
  acted: {description: "check, with gates: the gated stages that ran in full on the host in this run.", type: list, elements: str}
  hosts: {description: "prefetched_all: the play's hosts.", type: list, elements: str}
  acted_by_host: {description: "prefetched_all: {host: the gated stages that ran in full on it in this run}.", type: dict}
  digests: {description: "prefetched_all: {host: the stage's digest} (llmb_stage_digests).", type: dict}
  state_dir: {description: "The toolkit's state directory on the node (the document's dirs.state); all but prefetched_all.", type: path}
attributes:
  check_mode: {support: full, description: check reads only; record writes nothing in check mode.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Anything to do?
  llmb_stage_gate:
    action: check
    stage: serve
    digest: "{{ llmb_deployment_doc | llmb_stage_digest(inventory_hostname, 'serve', hostvars[inventory_hostname]) }}"
    watch: "{{ llmb_deployment | llmb_stage_watch('serve') }}"
    state_dir: "{{ llmb_deployment.dirs.state }}"
"""

RETURN = r"""
converged: {description: The digest and the observed state are those recorded (check)., type: bool, returned: check}
differs: {description: Why the stage has something to do (check)., type: list, returned: check}
verdicts: {description: "{stage: {converged, differs, record, digest}} (check_all).", type: dict, returned: check_all}
prefetched: {description: The verdict came from this run's check_all (gates) and the node was not asked again., type: bool, returned: check with gates}
hosts: {description: "{host: its verdict} (prefetched_all; {} for a host whose check_all verdict does not hold).", type: dict, returned: prefetched_all}
record: {description: The record's path on the node., type: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.llmb import fsutil, stagegate  # noqa: E402


def main():
    m = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", required=True, choices=["check", "record", "check_all"]),  # prefetched_all: the action plugin
            stage=dict(type="str"),
            digest=dict(type="str", no_log=False),
            watch=dict(type="dict"),
            stages=dict(type="dict"),
            state_dir=dict(type="path", required=True),  # required on the node (not for prefetched_all, the action plugin's)
        ),
        required_if=[("action", "check", ("stage", "digest", "watch")), ("action", "record", ("stage", "digest", "watch")),
                     ("action", "check_all", ("stages",))],
        supports_check_mode=True,
    )
    p = m.params
    if p["action"] == "check_all":
        try:
            verdicts = stagegate.check_all(p["state_dir"], p["stages"])
        except stagegate.GateError as err:
            m.fail_json(msg=f"llmb_stage_gate check_all: {err}")
        m.exit_json(changed=False, verdicts=verdicts)
    try:
        path = stagegate.record_path(p["state_dir"], p["stage"])
        seen = stagegate.observe(p["watch"])
    except stagegate.GateError as err:
        m.fail_json(msg=f"llmb_stage_gate {p['stage']}: {err}")
    if p["action"] == "check":
        differs = stagegate.differences(stagegate.load(path), p["digest"], seen)
        m.exit_json(changed=False, converged=not differs, differs=differs, record=path)
    if not m.check_mode:
        import json

        fsutil.atomic_write_text(path, json.dumps(stagegate.make_record(p["stage"], p["digest"], seen),
                                                  sort_keys=True, indent=1) + "\n", mode=0o600)
    m.exit_json(changed=False, record=path)


if __name__ == "__main__":
    main()
