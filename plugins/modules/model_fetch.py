#!/usr/bin/python
"""Ansible module: get model weights onto this node, verified (llmb.weights.fetch)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.llmb.weights.fetch import FetchError, FetchParams, run

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Download model weights from the hub or copy them from a peer node, verified
description:
  - With O(manifest_only), asks the hub (through the real C(huggingface_hub) client in the tool
    venv O(python)) for the repository's file list at O(revision), with sizes and LFS SHA-256, and
    returns it filtered by O(allow_patterns) / O(ignore_patterns) as RV(manifest).
  - Otherwise makes O(dest) hold a verified copy of the manifest's files. It takes an exclusive
    lock on O(dest), verifies what is there (trusting files whose size and mtime match the record
    C(.llmb-weights.json)), checks that the missing or corrupt files fit on the filesystem
    (failing with the bytes needed and free), deletes corrupt files, fetches only the missing or
    corrupt files from the hub (C(hf_hub_download) at the pinned commit, O(max_workers) in
    parallel, resuming a dropped connection) or from a peer (O(peer_url), after the hosts in
    O(wait_for) are complete; hashed on arrival), verifies them, checks that every shard named by
    C(model.safetensors.index.json) is listed, and writes the record.
  - The hub token is read from O(token_file) (mode 0600, written and removed by the role) and given
    to the hub client in its environment only; it never appears in arguments or results.
version_added: "0.1.0"
author: llm-bringup
options:
  dest:
    description: The model directory on this node.
    type: path
    required: true
  repo_id:
    description: Repository on the hub (V(moonshotai/Kimi-K2-Thinking)); needed without O(manifest).
    type: str
  revision:
    description: Commit id (40 hex) to fetch; a branch name is resolved to its commit.
    type: str
  endpoint:
    description: Hub or mirror URL (C(HF_ENDPOINT)); default huggingface.co.
    type: str
  token_file:
    description: File holding the hub token; omit for public repositories.
    type: path
  allow_patterns:
    description: Only files matching one of these (fnmatch, as huggingface_hub).
    type: list
    elements: str
  ignore_patterns:
    description: Skip files matching one of these.
    type: list
    elements: str
  manifest:
    description: Manifest from an earlier O(manifest_only) call; the hub is then not asked for it.
    type: dict
  manifest_only:
    description: Only return the manifest.
    type: bool
    default: false
  source:
    description: Where missing files come from; V(none) fails when any is missing.
    type: str
    choices: [hub, peer, none]
    default: hub
  peer_url:
    description: Base URL of a peer serving its verified copy (O(source=peer)).
    type: str
  wait_for:
    description: Peer base URLs whose records must be complete before copying.
    type: list
    elements: str
    default: []
  wait_timeout:
    description: Seconds to wait for O(wait_for).
    type: int
    default: 3600
  python:
    description: Interpreter of the tool venv that has huggingface_hub.
    type: path
    default: /opt/llmb/tools/bin/python
  hf_home:
    description: C(HF_HOME) for the hub client (keeps its cache and any stored token out of /root).
    type: path
  max_workers:
    description: Files downloaded at once.
    type: int
    default: 8
  verify_workers:
    description: Files hashed at once (default one per CPU).
    type: int
  lock_timeout:
    description: Seconds to wait for another run's lock on O(dest).
    type: int
    default: 600
  chunk_bytes:
    description: Download chunk size of the hub client (how much a dropped connection loses); library default when unset.
    type: int
  hub_timeout:
    description: Seconds the whole hub download may take.
    type: int
    default: 86400
  mode:
    description: Mode of O(dest) when created.
    type: raw
    default: "0755"
attributes:
  check_mode: {support: full, description: Verifies what is there and checks disk space; returns RV(would_fetch) and fetches or deletes nothing.}
  diff_mode: {support: none}
"""

EXAMPLES = r"""
- name: Ask the hub for the file list once
  model_fetch:
    dest: /opt/llmb/models/kimi-k2-thinking
    repo_id: moonshotai/Kimi-K2-Thinking
    revision: 0123456789abcdef0123456789abcdef01234567
    allow_patterns: ["*.safetensors", "*.json", "*.py", "*.jinja", "tiktoken.model"]
    manifest_only: true
  run_once: true
  register: __weights_manifest

- name: Download (or repair) the weights from the hub
  model_fetch:
    dest: /opt/llmb/models/kimi-k2-thinking
    manifest: "{{ __weights_manifest.manifest }}"
    repo_id: moonshotai/Kimi-K2-Thinking
    token_file: /run/llmb/weights/hf-token

- name: Copy from a node that has them
  model_fetch:
    dest: /opt/llmb/models/kimi-k2-thinking
    manifest: "{{ __weights_manifest.manifest }}"
    source: peer
    peer_url: http://10.0.0.11:18090
    wait_for: [http://10.0.0.11:18090]
"""

RETURN = r"""
manifest:
  description: The manifest (only with manifest_only).
  returned: when manifest_only
  type: dict
commit:
  description: Commit id of the weights.
  returned: always
  type: str
fetched:
  description: Files fetched by this run.
  returned: unless manifest_only
  type: list
  elements: str
refetched:
  description: Files that were present but corrupt, deleted and fetched again.
  returned: unless manifest_only
  type: list
  elements: str
fetched_bytes:
  description: Bytes fetched.
  returned: unless manifest_only
  type: int
would_fetch:
  description: In check mode, the files a run would fetch.
  returned: in check mode when files are missing
  type: list
  elements: str
disk:
  description: Bytes needed and free on the target filesystem (when something is to be fetched).
  returned: when something is to be fetched
  type: dict
verify:
  description: Files hashed, trusted from the record, missing and corrupt before fetching.
  returned: unless manifest_only
  type: dict
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "repo_id": {"type": "str"},
            "revision": {"type": "str"},
            "endpoint": {"type": "str"},
            "token_file": {"type": "path"},
            "allow_patterns": {"type": "list", "elements": "str"},
            "ignore_patterns": {"type": "list", "elements": "str"},
            "manifest": {"type": "dict"},
            "manifest_only": {"type": "bool", "default": False},
            "source": {"type": "str", "choices": ["hub", "peer", "none"], "default": "hub"},
            "peer_url": {"type": "str"},
            "wait_for": {"type": "list", "elements": "str", "default": []},
            "wait_timeout": {"type": "int", "default": 3600},
            "python": {"type": "path", "default": "/opt/llmb/tools/bin/python"},
            "hf_home": {"type": "path"},
            "max_workers": {"type": "int", "default": 8},
            "verify_workers": {"type": "int"},
            "lock_timeout": {"type": "int", "default": 600},
            "chunk_bytes": {"type": "int"},
            "hub_timeout": {"type": "int", "default": 86400},
            "mode": {"type": "raw", "default": "0755"},
        },
        required_if=[("source", "peer", ("peer_url", "manifest"))],
        required_one_of=[("manifest", "repo_id")],
        supports_check_mode=True,
    )
    p = module.params
    mode = p["mode"]
    mode = int(mode, 8) if isinstance(mode, str) else int(mode)
    params = FetchParams(
        dest=p["dest"], repo_id=p["repo_id"], revision=p["revision"], endpoint=p["endpoint"],
        token_file=p["token_file"], allow_patterns=p["allow_patterns"], ignore_patterns=p["ignore_patterns"],
        manifest=p["manifest"], manifest_only=p["manifest_only"], source=p["source"], peer_url=p["peer_url"],
        wait_for=p["wait_for"], wait_timeout=float(p["wait_timeout"]), python=p["python"], hf_home=p["hf_home"],
        max_workers=p["max_workers"], verify_workers=p["verify_workers"], lock_timeout=float(p["lock_timeout"]),
        chunk_bytes=p["chunk_bytes"], hub_timeout=float(p["hub_timeout"]), mode=mode,
    )
    try:
        res = run(params, check=module.check_mode)
    except FetchError as exc:
        module.fail_json(msg=str(exc), check=exc.check, **exc.details)
    if not p["manifest_only"]:
        res.pop("manifest", None)
    module.exit_json(**res)


if __name__ == "__main__":
    main()
