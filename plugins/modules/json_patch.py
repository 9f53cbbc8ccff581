#!/usr/bin/python
"""Ansible module: set values at dotted paths of a JSON file, guarded, atomically (llmb.jsonpatch)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.llmb.jsonpatch import JsonPatchError, patch_file

DOCUMENTATION = r"""
---
module: json_patch
short_description: Set values at dotted paths of a JSON file (config.json), keeping the original once
description:
  - Applies a list of patches to a JSON file. Each patch sets O(patches[].value) at
    O(patches[].path) (keys separated by dots, canonical digits index lists), optionally only when
    the path holds O(patches[].expect) first. A path that already holds the value is left alone, so
    a second run changes nothing.
  - Only the patched values' text changes; every other byte of the file stays as it was
    (whitespace, key order, number spellings such as C(1.0e-6), escapes such as C(\u00e9), a final
    newline or its absence). A created key is appended to its object with its siblings' indentation.
  - Refused with the file, the key and the line and column, nothing written, also in check mode -
    invalid JSON; a duplicate key anywhere in the document; a file that is not a regular file (a
    FIFO, directory or device is detected with lstat before any open, so nothing blocks); a
    symbolic link (not followed on purpose - replace it by a copy of its target).
  - Before the first change the file's content is saved once as C(<path>.orig) (never overwritten
    by later runs), with the original's mode, owner and mtime. An existing C(.orig) must be a
    regular file holding valid JSON that can be an earlier copy of the file (same top-level keys in
    the same order, keys added later only at the end); a link (dangling or not), a directory or
    another document fails the task instead of patching without a backup.
  - The file is written through a temporary file in the same directory (fsync) and renamed over
    the old one, keeping mode and owner, so a crash never leaves half a file. A path that does not
    exist or an unexpected old value fail the task and leave the file untouched.
  - Logic in C(module_utils/llmb/jsonpatch.py); this module only validates arguments and reports.
version_added: "0.1.0"
author: llm-bringup
options:
  path:
    description: JSON file to patch.
    type: path
    required: true
  patches:
    description: Patches in order; all apply or none does.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - Dotted path (V(quantization_config.config_groups.group_0.targets), V(quantization_config.ignore.0)),
            C(\.) for a dot inside a key; or a list of keys and list indexes.
        type: raw
        required: true
      value:
        description: Value to set (any JSON value).
        type: raw
        required: true
      expect:
        description: Value the path must hold before the change; omit for no guard.
        type: raw
      create:
        description: Allow adding a missing last key to an existing object.
        type: bool
        default: false
      key:
        description: Where the patch came from (engine or platform key of the model profile); informational.
        type: str
  keep_orig:
    description: Save the first content as C(<path><orig_suffix>) before the first change.
    type: bool
    default: true
  orig_suffix:
    description: Suffix of the saved original.
    type: str
    default: .orig
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Quantization targets Linear -> MoE for vllm-ascend
  json_patch:
    path: /opt/llmb/models/kimi-k2-thinking/config.json
    patches:
      - path: quantization_config.config_groups.group_0.targets
        value: [MoE]
        expect: [Linear]

- name: Load Kimi-K2 as DeepSeek-V3 on an engine without kimi_k2
  json_patch:
    path: /opt/llmb/models/kimi-k2-thinking/config.json
    patches: [{path: model_type, value: deepseek_v3, expect: kimi_k2}]
"""

RETURN = r"""
changes:
  description: One entry per patch, with the value found and set, and whether it changed.
  returned: always
  type: list
  elements: dict
  sample: [{path: model_type, before: kimi_k2, after: deepseek_v3, changed: true}]
orig:
  description: Path of the saved original (null with keep_orig false).
  returned: always
  type: str
orig_saved:
  description: Whether this run saved (or in check mode would save) the original.
  returned: always
  type: bool
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "patches": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "path": {"type": "raw", "required": True},
                    "value": {"type": "raw", "required": True},
                    "expect": {"type": "raw"},
                    "create": {"type": "bool", "default": False},
                    "key": {"type": "str"},
                },
            },
            "keep_orig": {"type": "bool", "default": True},
            "orig_suffix": {"type": "str", "default": ".orig"},
        },
        supports_check_mode=True,
    )
    p = module.params
    patches = []
    for patch in p["patches"]:
        item = {"path": patch["path"], "value": patch["value"]}
        if patch.get("expect") is not None:
            item["expect"] = patch["expect"]
        if patch.get("create"):
            item["create"] = True
        patches.append(item)
    try:
        res = patch_file(p["path"], patches, check=module.check_mode, keep_orig=p["keep_orig"],
                         orig_suffix=p["orig_suffix"])
    except JsonPatchError as exc:
        module.fail_json(msg=f"json_patch {p['path']}: {exc}; the file was left untouched", path=p["path"])
    out = {
        "changed": res["changed"],
        "path": p["path"],
        "changes": res["changes"],
        "orig": res["orig"],
        "orig_saved": res["orig_saved"],
    }
    if module._diff and res["changed"]:
        out["diff"] = {"before": res["before"], "after": res["after"],
                       "before_header": p["path"], "after_header": p["path"] + " (patched)"}
    module.exit_json(**out)


if __name__ == "__main__":
    main()
