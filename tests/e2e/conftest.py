"""End-to-end fixtures: one simulated 2-node H800-like cluster (real SSH, systemd, the engine
double) and the Hugging Face-compatible test server, shared by every test of the session."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from perf_common import Run, run_playbook  # noqa: E402

CLUSTER = os.environ.get("LLMB_E2E_CLUSTER", "e2e")
KEEP = os.environ.get("LLMB_E2E_KEEP") == "1"  # leave the cluster up after the session
LOGIN = os.environ.get("LLMB_E2E_LOGIN", "sudo")  # sudo (NOPASSWD) | sudo-password (vaulted) | root
NODE_OS = os.environ.get("LLMB_E2E_OS", "bookworm")  # the full suite's node OS (bookworm | trixie)
# LLMB_E2E_REUSE=1: run against the cluster already up under that name (quick loops)


class Cluster:
    def __init__(self, inventory: Path, hf_url: str, hf_root: Path):
        self.inventory = inventory
        self.hf_url = hf_url
        self.hf_root = hf_root
        info = json.loads((inventory.parent / "cluster.json").read_text())
        self.nodes = info["nodes"]
        self.login = info.get("login", "root")
        self.vault_password_file = info.get("vault_password_file")  # --login sudo-password

    def playbook(self, playbook: str, *args: str, env: dict | None = None, timeout: int = 1500) -> Run:
        vault = {"ANSIBLE_VAULT_PASSWORD_FILE": self.vault_password_file} if self.vault_password_file else {}
        return run_playbook(self.inventory, playbook, *args, "-e", f"weights_hf_endpoint={self.hf_url}",
                            run_id=f"e2e-{int(time.time() * 1000)}", log_dir=ROOT / "artifacts" / "e2e",
                            log_name=Path(playbook).stem, env={**vault, **(env or {})}, timeout=timeout)

    def node(self, name: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", f"{CLUSTER}-{name}", *cmd], capture_output=True, text=True, check=check)

    def ip(self, name: str) -> str:
        return next(n["ip"] for n in self.nodes if n["node"] == name)


def pytest_collection_modifyitems(items):
    """test_site.py first (its converge test brings the shared cluster up from a fresh, untouched
    state, with the dry run before it); the other files' tests keep their order after it."""
    items.sort(key=lambda item: 0 if item.path.name == "test_site.py" else 1)


def _gateway(network: str) -> str:
    out = subprocess.run(["docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", network],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out


def start_hub(root: Path, state: Path, gw: str) -> tuple[subprocess.Popen, str]:
    """The test hub server (tests/hfserver) on the cluster network's gateway: (process, its URL) once it
    has written its port. The caller terminates the process."""
    srv = subprocess.Popen([str(ROOT / ".venv/bin/python"), str(ROOT / "tests/hfserver/server.py"), "--root", str(root),
                            "--bind", gw, "--port", "0", "--state-dir", str(state),
                            "--generate", "llmb-test/kimi-k2-sim"])
    for _ in range(600):
        if (state / "port").exists() and (state / "port").read_text().strip():
            return srv, f"http://{gw}:{(state / 'port').read_text().strip()}"
        if srv.poll() is not None:
            raise RuntimeError("the test hub server exited at start")
        time.sleep(0.1)
    srv.terminate()
    raise RuntimeError("the test hub server wrote no port within 60 s")


SIM = str(ROOT / "scripts/sim-cluster")


def sim_up(name: str, *extra: str) -> Path:
    """`sim-cluster up` of a 2-node H800-like cluster with the engine double (``extra``: more of its
    options): the cluster's inventory."""
    subprocess.run([SIM, "up", "--name", name, "--nodes", "2", "--profile", "h800-hgx8", "--engine-double", *extra],
                   check=True)
    return sim_inventory(name)


def sim_inventory(name: str) -> Path:
    return Path(subprocess.run([SIM, "inventory", "--name", name], capture_output=True, text=True,
                               check=True).stdout.strip())


@contextlib.contextmanager
def hub_for(name: str, tmp_path_factory, tag: str = "") -> Iterator[tuple[Path, str]]:
    """The test hub on cluster ``name``'s network while the block runs: (its root, its URL). After the
    block the hub stops and the cluster goes down (unless LLMB_E2E_KEEP=1)."""
    hub = tmp_path_factory.mktemp("hub" + tag)
    state = tmp_path_factory.mktemp("hubstate" + tag)
    gw = _gateway(f"llmb-{name}")
    srv = None
    try:
        srv, url = start_hub(hub, state, gw)
        yield hub, url
    finally:
        if srv is not None:
            srv.terminate()
            srv.wait(10)
        if not KEEP:
            subprocess.run([SIM, "down", "--name", name], capture_output=True)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    reuse = os.environ.get("LLMB_E2E_REUSE") == "1" and (ROOT / ".cache/sim" / CLUSTER / "hosts.yml").exists()
    if reuse:
        inv = sim_inventory(CLUSTER)
    else:
        inv = sim_up(CLUSTER, "--vars-from", str(ROOT / "inventories/sim"), "--login", LOGIN, "--os", NODE_OS)
    with hub_for(CLUSTER, tmp_path_factory) as (hf_root, url):
        yield Cluster(inv, url, hf_root)
