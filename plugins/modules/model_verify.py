#!/usr/bin/python
"""Ansible module: verify a model directory against a manifest (llmb.weights.verify)."""

from __future__ import annotations

import os
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.llmb.weights import manifest as mf
from ansible.module_utils.llmb.weights import verify as vf

DOCUMENTATION = r"""
---
module: model_verify
short_description: Verify model weights against the hub's sizes and hashes, re-hashing only what changed
description:
  - Checks that every file of O(manifest) is present under O(dest) with the hub's size and hash
    (SHA-256 for LFS files, the git blob id for the others), hashing files in parallel.
  - Reads the verification record C(.llmb-weights.json) beside the weights and trusts files whose
    size and mtime match their record entry, so a verified copy costs only a directory scan.
  - A file patched in place by M(json_patch) is verified through its saved C(.orig).
  - Never fetches anything (M(model_fetch) does); writes the record only with O(update_record).
version_added: "0.1.0"
author: llm-bringup
options:
  dest:
    description: The model directory.
    type: path
    required: true
  manifest:
    description: The manifest (as returned by M(model_fetch) with O(model_fetch#module:manifest_only)).
    type: dict
    required: true
  workers:
    description: Files hashed at once (default one per CPU, at least 2, at most 32).
    type: int
  update_record:
    description: Write the record when the result differs from it (reports changed).
    type: bool
    default: false
  require_complete:
    description: Fail when a file is missing or corrupt; otherwise report it in RV(complete).
    type: bool
    default: true
  full:
    description: Ignore the record and hash every file.
    type: bool
    default: false
attributes:
  check_mode: {support: full, description: Verifies and reports; the record O(update_record) would rewrite is left alone.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Check the copy on the shared filesystem (record written by the node that downloaded it)
  model_verify:
    dest: /shared/models/kimi-k2-thinking
    manifest: "{{ __weights_manifest.manifest }}"

- name: Probe whether this node holds a verified copy
  model_verify:
    dest: /opt/llmb/models/kimi-k2-thinking
    manifest: "{{ __weights_manifest.manifest }}"
    require_complete: false
  register: __weights_have
"""

RETURN = r"""
complete:
  description: Every file present and matching.
  returned: always
  type: bool
missing:
  description: Files absent.
  returned: always
  type: list
  elements: str
bad:
  description: Files whose size or hash differs, with expected and found.
  returned: always
  type: list
  elements: dict
hashed:
  description: Files hashed by this run (the others were trusted from the record).
  returned: always
  type: list
  elements: str
hashed_bytes:
  description: Bytes read for hashing.
  returned: always
  type: int
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "manifest": {"type": "dict", "required": True},
            "workers": {"type": "int"},
            "update_record": {"type": "bool", "default": False},
            "require_complete": {"type": "bool", "default": True},
            "full": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    host = socket.gethostname()
    try:
        m = mf.validate(p["manifest"])
    except mf.ManifestError as exc:
        module.fail_json(msg=f"{host}: verify: manifest: {exc}")
    record = None if p["full"] else vf.load_record(p["dest"])
    if os.path.isdir(p["dest"]):
        v = vf.verify_dir(p["dest"], m, record, workers=p["workers"])
    else:
        v = {"complete": False, "ok": [], "trusted": [], "hashed": [], "hashed_bytes": 0,
             "missing": [f["path"] for f in m["files"]], "bad": [], "record": None, "seconds": 0}
    changed = False
    if p["update_record"] and v["record"] is not None and vf.record_differs(vf.load_record(p["dest"]), v["record"]):
        changed = True
        if not module.check_mode:
            vf.save_record(p["dest"], v["record"])
    out = {
        "changed": changed,
        "dest": p["dest"],
        "complete": v["complete"],
        "missing": v["missing"],
        "bad": v["bad"],
        "hashed": v["hashed"],
        "hashed_bytes": v["hashed_bytes"],
        "trusted": len(v["trusted"]),
        "seconds": v["seconds"],
        "commit": m["commit"],
    }
    if p["require_complete"] and not v["complete"]:
        bad = "; ".join(f"{b['path']}: expected {b['expected']}, found {b['found']}" for b in v["bad"][:5])
        module.fail_json(
            msg=(f"{host}: verify: {p['dest']} does not hold a verified copy of {m['repo_id']}@{m['commit'][:12]}: "
                 f"{len(v['missing'])} missing ({', '.join(v['missing'][:5])}), {len(v['bad'])} corrupt"
                 + (f" ({bad})" if bad else "") + "; run the weights stage to fetch them"),
            **{key: val for key, val in out.items() if key != "changed"},
        )
    module.exit_json(**out)


if __name__ == "__main__":
    main()
