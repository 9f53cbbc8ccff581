"""No secret in what a run writes (issue 27, point 7): secrets planted where they live, `llmb up`
through the console on a fresh simulated 2-node cluster, then every file the run wrote searched.

Planted:
- in the controller's environment: HF_TOKEN (the run needs it: the weights stage and the pins send
  it to the hub) and a cloud credential the run does not need (AWS_SECRET_ACCESS_KEY);
- in the vault: the API key (llmb_api_key, docs/ports.md) and the sudo password (the cluster's
  login is `--login sudo-password`: ansible_become_password vaulted in its inventory).

Searched: every file under artifacts/<run>/ (deployment.json, the stages' results, the report,
runner/: command, stdout, job_events/), the controller's fact cache of the cluster's hosts, and
for the environment's secrets the nodes' configuration and log directories. `llmb collect`
(issue 27, point 5) adds its archive to `written_files` when it exists.

Own cluster (<LLMB_E2E_CLUSTER>-secrets), as it needs its own vaulted key; about as long as one
bring-up.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import CLUSTER, ROOT, hub_for, sim_up

NAME = f"{CLUSTER}-secrets"
# where the nodes keep what the stages write (configuration, units, logs, the run's files)
NODE_DIRS = ["/etc/llmb", "/etc/systemd/system", "/opt/llmb/run", "/var/log", "/root", "/home/ops", "/tmp"]


def vault_encrypt(value: str, vault_pass: Path) -> str:
    out = subprocess.run([str(ROOT / ".venv/bin/ansible-vault"), "encrypt_string", "--vault-password-file",
                          str(vault_pass), "--stdin-name", "x"], input=value, capture_output=True, text=True,
                         check=True).stdout
    return "\n".join(line.strip() for line in out.splitlines()[1:] if line.strip())


def vault_decrypt(vaulted: str, vault_pass: Path) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    lib = VaultLib([("default", VaultSecret(vault_pass.read_text().strip().encode()))])
    return lib.decrypt(vaulted.strip().encode()).decode()


def become_password(inventory: Path, vault_pass: Path) -> str:
    """The sudo password sim-cluster vaulted into the inventory (the value to look for)."""
    lines = inventory.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "ansible_become_password: !vault" in line)
    body = []
    for line in lines[start + 1:]:
        if not line.startswith("          "):
            break
        body.append(line.strip())
    return vault_decrypt("\n".join(body), vault_pass)


@pytest.fixture(scope="module")
def planted_cluster(tmp_path_factory):
    """A fresh 2-node cluster, login sudo-password, inventories/sim's variables with the API key
    vaulted: (inventory, vault password file, hub URL, {name: planted value})."""
    inv = sim_up(NAME, "--login", "sudo-password")
    sd = inv.parent
    vault_pass = sd / "vault-pass"
    gv = sd / "group_vars"
    if gv.is_symlink() or gv.exists():
        gv.unlink() if gv.is_symlink() else shutil.rmtree(gv)
    shutil.copytree(ROOT / "inventories/sim/group_vars", gv)
    api_key = "sk-planted-" + secrets.token_urlsafe(18)
    serve = gv / "all" / "serve.yml"
    text = serve.read_text()
    assert "\nllmb_api_key: " in text
    vaulted = vault_encrypt(api_key, vault_pass).replace("\n", "\n  ")
    serve.write_text("\n".join(line for line in text.splitlines() if not line.startswith("llmb_api_key:"))
                     + f"\nllmb_api_key: !vault |\n  {vaulted}\n")
    planted = {
        "HF_TOKEN": "hf_planted" + secrets.token_urlsafe(18),
        "AWS_SECRET_ACCESS_KEY": "planted/aws+" + secrets.token_urlsafe(24),
        "llmb_api_key": api_key,
        "ansible_become_password": become_password(inv, vault_pass),
    }
    with hub_for(NAME, tmp_path_factory, "-secrets") as (_hub, url):
        # the hub asks for the planted token: a run that answers proves HF_TOKEN reached the weights stage
        req = urllib.request.Request(url + "/_test/config", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"token": planted["HF_TOKEN"]}).encode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["token_set"] is True
        yield inv, vault_pass, url, planted


def llmb(*args: str, env: dict[str, str], timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv/bin/llmb"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def written_files(run_dir: Path, since: float, hosts: list[str]) -> list[Path]:
    """Every file the run wrote on the controller: its artifacts directory, and the fact cache of
    its hosts updated during the run."""
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    cache = ROOT / ".cache" / "facts"
    files += [cache / h for h in hosts if (cache / h).is_file() and (cache / h).stat().st_mtime >= since]
    return files


def leaks(files: list[Path], planted: dict[str, str], root: Path) -> set[tuple[str, str]]:
    found = set()
    for p in files:
        data = p.read_bytes()
        for name, value in planted.items():
            if value.encode() in data:
                found.add((str(p.relative_to(root)) if p.is_relative_to(root) else str(p), name))
    return found


def planted_env(planted: dict[str, str], vault_pass: Path) -> dict[str, str]:
    """The environment of an llmb run with the planted token and cloud credential and the vault's
    password file (no run id or artifacts directory inherited: the test names its own run)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LLMB_RUN_ID", "LLMB_ARTIFACTS_DIR")}
    env.update(HF_TOKEN=planted["HF_TOKEN"], AWS_SECRET_ACCESS_KEY=planted["AWS_SECRET_ACCESS_KEY"],
               ANSIBLE_VAULT_PASSWORD_FILE=str(vault_pass), LANG="C.UTF-8", LC_ALL="C.UTF-8")
    return env


def test_llmb_up_writes_no_planted_secret(planted_cluster):
    inv, vault_pass, hub, planted = planted_cluster
    run_id = f"pins-secrets-{int(time.time())}"
    env = planted_env(planted, vault_pass)
    t0 = time.time()
    up = llmb("up", "-i", str(inv), "-e", f"weights_hf_endpoint={hub}", "--run-id", run_id, env=env)
    run_dir = ROOT / "artifacts" / run_id
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-2000:]
    assert "verdict:        OK" in up.stdout, up.stdout[-2000:]
    # the planted values are what the run used: the API is closed with the vaulted key
    assert (run_dir / "runner" / "artifacts" / run_id / "command").is_file()
    files = written_files(run_dir, t0, ["node1", "node2"])
    assert len(files) > 20, files
    found = leaks(files, planted, ROOT)
    assert found == set(), sorted(found)
    assert not any(p.name == "envvars" for p in files)
    # the token and the cloud credential are nowhere on the nodes either (the API key is, in the
    # service's 0600 EnvironmentFile, and the sudo password in the node's shadow: where they live)
    for node in ("node1", "node2"):
        for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
            res = subprocess.run(["docker", "exec", f"{NAME}-{node}", "grep", "-rlsF", planted[name], *NODE_DIRS],
                                 capture_output=True, text=True, check=False)
            assert res.stdout.strip() == "", (node, name, res.stdout)


def test_llmb_collect_archive_holds_no_planted_secret(planted_cluster, tmp_path):
    """`llmb collect` after the bring-up (issue 27, point 5): the support archive and every file the
    run wrote hold none of the planted values; the archive's verify part is what `hwfacts --bundle`
    reads, with the same verdict as the raw bundle the run collected."""
    import tarfile

    inv, vault_pass, _hub, planted = planted_cluster
    run_id = f"collect-secrets-{int(time.time())}"
    env = planted_env(planted, vault_pass)
    t0 = time.time()
    res = llmb("collect", "-i", str(inv), "--run-id", run_id, env=env, timeout=900)
    run_dir = ROOT / "artifacts" / run_id
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    archive = run_dir / f"llmb-collect-{run_id}.tar.gz"
    assert f"archive:        {archive}" in res.stdout
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    top = tmp_path / f"llmb-collect-{run_id}"
    members = [p for p in top.rglob("*") if p.is_file()]
    for node in ("node1", "node2"):
        host = top / "hosts" / node
        assert (host / "versions.json").is_file() and (host / "kernel.log").is_file(), sorted(members)
        assert any((host / "journal").glob("llmb-*.service.log")) and any((host / "units").glob("llmb-*.service"))
    assert (top / "index.html").is_file() and (top / "deployment.json").is_file()
    assert subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=top, capture_output=True).returncode == 0
    found = leaks(written_files(run_dir, t0, ["node1", "node2"]) + members, planted, ROOT)
    assert found == set(), sorted(found)
    # the verify part: hwfacts --bundle reads it and judges it as it judges the run's raw bundle
    hw = [str(ROOT / ".venv/bin/python"), str(ROOT / "scripts/hwfacts"), "--bundle"]
    got = subprocess.run([*hw, str(top / "verify"), "--platform", "h800-hgx8"], capture_output=True, text=True)
    raw = subprocess.run([*hw, str(run_dir / "bundle"), "--platform", "h800-hgx8"], capture_output=True, text=True)
    assert got.returncode in (0, 1) and got.returncode == raw.returncode, got.stderr[-2000:]
    assert json.loads(got.stdout) == json.loads(raw.stdout)
    assert sorted(r["host"] for r in json.loads(got.stdout)) == ["node1", "node2"]
