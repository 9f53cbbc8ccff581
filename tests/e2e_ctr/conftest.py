"""Container serve path end to end: ONE simulated 2-node cluster whose nodes run their own dockerd
(`scripts/sim-cluster up --container-runtime`, tests/sim/ctr), a local registry with the engine-double
images tagged like the real ones, and the Hugging Face-compatible test server. The three container
recipes (a3 vllm-ascend, mi300x 2x8 ROCm over Ray, h200 TensorRT-LLM over mpirun) run on it in turn:
switching recipe re-installs the simulator profile and the device nodes and removes the previous
recipe's containers and units, which is much cheaper than a cluster per recipe.

Each recipe's inventory is the sample inventory's group_vars (what the sample plans) with only what
a simulated site must differ in, in group_vars/all/zz-sim.yml: the tiny model, its directory, the
cluster NIC, the registry mirror and the pinned digests of the images pushed in this session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from perf_common import Run, run_playbook  # noqa: E402

CLUSTER = os.environ.get("LLMB_CTR_CLUSTER", "ctr")
KEEP = os.environ.get("LLMB_CTR_KEEP") == "1"  # leave the cluster (and registry) up after the session
REUSE = os.environ.get("LLMB_CTR_REUSE") == "1"  # use the cluster already up under that name
SIM = ROOT / "scripts" / "sim-cluster"
CTR = ROOT / "tests" / "sim" / "ctr"
PLAYBOOK = Path(__file__).resolve().parent / "containers.yml"
NODES = ("node1", "node2")
MODEL_DIR = "/opt/llmb/models/kimi-k2-sim"


@dataclass(frozen=True)
class Recipe:
    name: str
    sample: str  # inventories/<sample>: its group_vars are what the scenario runs
    profile: str  # simulator profile (tests/sim/accelsim/profiles)
    engine_key: str  # tests/sim/ctr/build engines
    overrides: dict = field(default_factory=dict)


RECIPES = {
    "a3": Recipe("a3", "a3", "a3-16npu", "vllm-ascend", {"llmb_data_parallel": 2}),
    "mi300x": Recipe("mi300x", "mi300x-2x8", "mi300x-8", "vllm-rocm"),
    "trtllm": Recipe("trtllm", "h200-trtllm", "h200-hgx8", "trtllm", {"llmb_container_nvidia_gpus": "devices"}),
}


def sh(*argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])}: rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def plan_images(inventory: Path) -> set[str]:
    doc = json.loads(sh(str(ROOT / ".venv/bin/python"), str(ROOT / "scripts/launch-plan"), "-i", str(inventory),
                        "--format", "json").stdout)
    images: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("image"), str) and x["image"]:
                images.add(x["image"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return images


class Ctr:
    def __init__(self, state: Path, hf_url: str):
        self.state = state
        self.hf_url = hf_url
        self.sd = ROOT / ".cache" / "sim" / CLUSTER
        self.nodes = json.loads((self.sd / "cluster.json").read_text())["nodes"]
        self.profile = json.loads((self.sd / "cluster.json").read_text())["profile"]
        self.fixture: dict = {}
        self.current: str | None = None
        self.timings: dict[str, float] = {}

    # ---------------------------------------------------------------- nodes
    def node(self, name: str, *cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return sh("docker", "exec", f"{CLUSTER}-{name}", *cmd, check=check, timeout=timeout)

    def ip(self, name: str) -> str:
        return next(n["ip"] for n in self.nodes if n["node"] == name)

    def reset_nodes(self) -> None:
        """The previous recipe's units and containers go (a recipe switch on the shared cluster)."""
        script = ("for u in $(systemctl list-units --plain --no-legend 'llmb-*' 'kimi*' | awk '{print $1}'); do "
                  "systemctl stop \"$u\"; done; ids=$(docker ps -aq); [ -z \"$ids\" ] || docker rm -f $ids >/dev/null; "
                  "rm -f /etc/systemd/system/llmb-*.service /etc/systemd/system/kimi*.service; systemctl daemon-reload")
        for n in NODES:
            self.node(n, "sh", "-c", script)

    def use_profile(self, profile: str) -> None:
        if profile == self.profile:
            return
        doc = json.loads((ROOT / "tests/sim/accelsim/profiles" / f"{profile}.json").read_text())
        vendor = doc["vendor"]
        count = sum(len(c["chips"]) for c in doc["cards"]) if vendor == "ascend" else len(doc["gpus"])
        for n in NODES:
            self.node(n, "bash", "/opt/accelsim-src/install-accelsim.sh", profile)
            self.node(n, "llmb-sim-devices", "init", vendor, str(count))
        self.profile = profile

    # ---------------------------------------------------------------- inventories
    def inventory_dir(self, recipe: Recipe) -> Path:
        return self.sd / "recipes" / recipe.name

    def write_inventory(self, recipe: Recipe, pins: dict | None = None) -> Path:
        d = self.inventory_dir(recipe)
        gv = d / "group_vars" / "all"
        if gv.exists():
            shutil.rmtree(gv)
        gv.mkdir(parents=True)
        shutil.copy(self.sd / "hosts.yml", d / "hosts.yml")
        for f in sorted((ROOT / "inventories" / recipe.sample / "group_vars" / "all").glob("*.yml")):
            shutil.copy(f, gv / f.name)
        sim = {
            "llmb_model": "kimi-k2-sim",
            "llmb_model_dir": MODEL_DIR,
            "llmb_cluster_iface": "eth0",
            "ssh_mesh_key_dir": str(self.sd / "mesh-key"),
            **recipe.overrides,
        }
        if self.fixture:
            sim["engine_image_mirror"] = self.fixture["mirror"]
        if pins:
            sim["engine_image_pins"] = pins
        (gv / "zz-sim.yml").write_text("# the simulated site's differences from the sample (tests/e2e_ctr)\n"
                                       + yaml.safe_dump(sim, sort_keys=True))
        return d

    serve_playbook = ROOT / "playbooks" / "serve.yml"

    def registry(self, *args: str) -> str:
        return sh(str(CTR / "registry"), args[0], self.fixture["state"], *args[1:]).stdout.strip()

    def pins_for(self, recipe: Recipe) -> dict:
        img = self.fixture["images"][recipe.name]
        return {img["image"]: {"digest": img["digest"]}}

    # ---------------------------------------------------------------- runs
    def playbook(self, recipe: Recipe, *args: str, playbook: Path = PLAYBOOK, timeout: int = 900) -> Run:
        return run_playbook(self.inventory_dir(recipe) / "hosts.yml", str(playbook), *args,
                            "-e", f"weights_hf_endpoint={self.hf_url}", run_id=f"ctr-{recipe.name}-{int(time.time() * 1000)}",
                            log_dir=ROOT / "artifacts" / "e2e_ctr", log_name=recipe.name, timeout=timeout)

    def switch(self, recipe: Recipe) -> Path:
        if self.current != recipe.name:
            self.reset_nodes()
            self.use_profile(recipe.profile)
            self.current = recipe.name
        return self.write_inventory(recipe, self.pins_for(recipe))

    def containers(self, node: str) -> dict[str, dict]:
        """name -> {id, image, status, started} of the node's containers."""
        out = self.node(node, "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()
        res = {}
        for name in out:
            info = json.loads(self.node(node, "docker", "inspect", name).stdout)[0]
            res[name] = {"id": info["Id"], "image": info["Image"], "status": info["State"]["Status"],
                         "started": info["State"]["StartedAt"], "args": info["Args"],
                         "env": info["Config"]["Env"], "devices": info["HostConfig"]["Devices"] or []}
        return res


def _gateway(network: str) -> str:
    return sh("docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", network).stdout.strip()


@pytest.fixture(scope="session")
def ctr():
    t0 = time.monotonic()
    if not (REUSE and (ROOT / ".cache/sim" / CLUSTER / "hosts.yml").exists()):
        sh(str(SIM), "up", "--name", CLUSTER, "--nodes", "2", "--profile", RECIPES["a3"].profile,
           "--container-runtime", timeout=900)
    t_up = time.monotonic() - t0
    # not under pytest's shared temp root: a concurrent pytest session may prune it while this one runs
    state = ROOT / ".cache" / "e2e_ctr" / CLUSTER
    if state.exists():
        subprocess.run([str(CTR / "registry"), "down", str(state / "registry")], capture_output=True)
        shutil.rmtree(state)
    state.mkdir(parents=True)
    gw = _gateway(f"llmb-{CLUSTER}")
    hub_root, hub_state = state / "hub", state / "hubstate"
    hub_root.mkdir()
    hub_state.mkdir()
    srv = subprocess.Popen([str(ROOT / ".venv/bin/python"), str(ROOT / "tests/hfserver/server.py"), "--root",
                            str(hub_root), "--bind", gw, "--port", "0", "--state-dir", str(hub_state),
                            "--generate", "llmb-test/kimi-k2-sim"])
    reg = state / "registry"
    try:
        c = Ctr(state, "")
        # the image each recipe's sample plans, pushed under its own path and tag
        images = []
        for r in RECIPES.values():
            inv = c.write_inventory(r)
            refs = plan_images(inv / "hosts.yml")
            assert len(refs) == 1, f"{r.sample}: expected one engine image in the plan, found {refs}"
            images.append(f"{r.engine_key}={refs.pop()}")
        t1 = time.monotonic()
        sh(str(CTR / "registry"), "up", str(reg), gw, *images, timeout=900)
        fixture = json.loads((reg / "fixture.json").read_text())
        # registry.images is keyed by engine key; the recipes' view is keyed by recipe name
        c.fixture = {"mirror": fixture["mirror"],
                     "images": {r.name: fixture["images"][r.engine_key] for r in RECIPES.values()},
                     "state": str(reg)}
        t_reg = time.monotonic() - t1
        for _ in range(600):
            if (hub_state / "port").exists() and (hub_state / "port").read_text().strip():
                break
            if srv.poll() is not None:
                raise RuntimeError("the test hub server exited at start")
            time.sleep(0.1)
        c.hf_url = f"http://{gw}:{(hub_state / 'port').read_text().strip()}"
        c.timings.update({"cluster_up_s": round(t_up, 1), "registry_and_images_s": round(t_reg, 1)})
        yield c
    finally:
        srv.terminate()
        srv.wait(10)
        if not KEEP:
            subprocess.run([str(CTR / "registry"), "down", str(reg)], capture_output=True)
            subprocess.run([str(SIM), "down", "--name", CLUSTER], capture_output=True)
        print(f"\ne2e_ctr timings: {json.dumps(c.timings) if 'c' in dir() else '{}'} total {time.monotonic() - t0:.0f}s")
