"""A console run keeps only the environment it needs and writes no secret (issue 27, point 7):
llmb.console.runenv on its own, then a real ansible-runner run of a one-task playbook on localhost
through llmb.console.cli.run_playbook, its artifacts searched for every planted value."""

from __future__ import annotations

import hashlib
import shutil

from llmbctl.console import cli, runenv

PLANTED = {
    "HF_TOKEN": "hf_plantedTokenValue0001",
    "AWS_SECRET_ACCESS_KEY": "plantedAwsSecret0002",
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED0003",
    "https_proxy": "http://ops:plantedProxyPass0004@proxy.example:3128",
    "LLMB_TEST_API_KEY": "plantedLlmbKey0005",
}


API_KEY = "plantedExtraVarKey0006"  # given as -e llmb_api_key=...


def test_split_keeps_what_a_run_needs_and_separates_the_secrets():
    env = dict(PLANTED, PATH="/usr/bin", HOME="/root", LLMB_RUN_ID="r1", ANSIBLE_CONFIG="/x/ansible.cfg",
               HF_ENDPOINT="http://hub:8080", EDITOR="vi", KUBECONFIG="/k", LC_ALL="C.UTF-8",
               no_proxy="localhost", **{runenv.FIFO_VAR: "/old/fifo"})
    plain, secret = runenv.split(env)
    assert plain == {"PATH": "/usr/bin", "HOME": "/root", "LLMB_RUN_ID": "r1", "ANSIBLE_CONFIG": "/x/ansible.cfg",
                     "HF_ENDPOINT": "http://hub:8080", "LC_ALL": "C.UTF-8", "no_proxy": "localhost"}
    assert secret == {"HF_TOKEN": PLANTED["HF_TOKEN"], "https_proxy": PLANTED["https_proxy"],
                      "LLMB_TEST_API_KEY": PLANTED["LLMB_TEST_API_KEY"]}
    # AWS_*, EDITOR, KUBECONFIG: not needed, in neither


def test_runner_env_drops_the_inherited_but_keeps_what_the_runner_added():
    environ = {"PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "s", "HF_TOKEN": "t", "PYTHONPATH": "/mine"}
    seeded = dict(environ, ANSIBLE_CALLBACK_PLUGINS="/runner/cb", PYTHONPATH="/runner:/mine", LLMB_RUN_ID="r")
    plain, _ = runenv.split(environ)
    out = runenv.runner_env(seeded, environ, plain, {"LLMB_RUN_ID": "r"})
    assert out == {"PATH": "/usr/bin", "ANSIBLE_CALLBACK_PLUGINS": "/runner/cb", "PYTHONPATH": "/runner:/mine",
                   "LLMB_RUN_ID": "r"}


def test_channel_hands_the_secrets_over_once_and_leaves_nothing(tmp_path):
    ch = runenv.SecretChannel({"HF_TOKEN": "x1"}, {"llmb_api_key": "k1"})
    env = dict(ch.env)
    assert runenv.read_channel(env) == ({"HF_TOKEN": "x1"}, {"llmb_api_key": "k1"}) and runenv.FIFO_VAR not in env
    ch.close()
    assert not ch.dir.exists()
    unread = runenv.SecretChannel({"HF_TOKEN": "x2"})  # a run that never started: close() does not hang
    unread.close()
    assert not unread.dir.exists()


def test_split_extra_takes_the_secret_names_out():
    assert runenv.split_extra(["a=1", "llmb_api_key=k", "@vars.yml", "weights_hf_token=t=x", "b"]) == (
        ["a=1", "@vars.yml", "b"], {"llmb_api_key": "k", "weights_hf_token": "t=x"})


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  connection: local
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: What the run sees (digests only)
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ lookup('env', 'HF_TOKEN') | hash('sha256') }} [{{ lookup('env', 'AWS_SECRET_ACCESS_KEY') }}] {{ llmb_api_key | hash('sha256') }}"
"""


def test_a_console_run_gets_hf_token_and_writes_no_secret(tmp_path, monkeypatch):
    for k, v in PLANTED.items():
        monkeypatch.setenv(k, v)
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    seen = tmp_path / "seen.txt"
    run_id = f"pins-runenv-{tmp_path.name}"
    run_dir = cli.ROOT / "artifacts" / run_id
    try:
        cli.run_playbook(str(pb), "localhost,", [f"out={seen}", f"llmb_api_key={API_KEY}"], run_id, None, "test")
        # the token and the -e key reached the playbook; the credential the run does not need did not
        sha = [hashlib.sha256(v.encode()).hexdigest() for v in (PLANTED["HF_TOKEN"], API_KEY)]
        assert seen.read_text() == f"{sha[0]} [] {sha[1]}"
        files = [p for p in run_dir.rglob("*") if p.is_file()]
        assert any(p.name == "command" for p in files) and any(p.parent.name == "job_events" for p in files)
        leaks = {(str(p.relative_to(run_dir)), k) for p in files for k, v in dict(PLANTED, api_key=API_KEY).items()
                 if v.encode() in p.read_bytes()}
        assert leaks == set()
        assert not (run_dir / "runner" / "env" / "envvars").exists()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
