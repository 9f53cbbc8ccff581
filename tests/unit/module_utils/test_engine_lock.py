"""The engine release in the lock (issue 24, point 5): a newer release shipped into a COPY of the
catalog changes nothing for an inventory that has a lock; disaster recovery plans the locked
release; LLMB_REPIN=1 moves it.

The inventory is inventories/h800 with llmb_engine_version removed (the default: newest shipped)
and the model commit pinned (no hub). The catalog copy gets a fake vllm release, the newest
shipped flag set with its version bumped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from llmbctl import deployment as D
from llmbctl import pins as P
from llmbctl.catalog import Catalog

REPO = Path(__file__).resolve().parents[3]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def catalog(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(REPO / "data", data)
    return data


def ship_newer(data: Path) -> str:
    """Copy the newest shipped vllm flag set as a release one minor newer; returns its version."""
    newest = Catalog(data).newest_version("vllm")
    major, minor, _ = (int(x) for x in newest.split(".")[:3])
    bumped = f"{major}.{minor + 1}.0"
    text = (data / "engines" / f"vllm-{newest}.yml").read_text()
    text = text.replace(f'"version": "{newest}"', f'"version": "{bumped}"').replace(f"vllm {newest}", f"vllm {bumped}")
    (data / "engines" / f"vllm-{bumped}.yml").write_text(text)
    assert Catalog(data).newest_version("vllm") == bumped
    return bumped


@pytest.fixture()
def inv(tmp_path: Path) -> Path:
    """inventories/h800, llmb_engine_version left unset, the model commit pinned (no hub asked)."""
    out = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "h800", out)
    llmb = out / "group_vars" / "all" / "llmb.yml"
    text = re.sub(r"(?m)^llmb_engine_version:.*\n", "", llmb.read_text())
    llmb.write_text(text + f"llmb_model_revision: {COMMIT}\n")
    return out


def load(inv: Path) -> tuple[dict, dict]:
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("llmb_launch_plan_for_lock", str(REPO / "scripts" / "launch-plan"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod.load_inventory(str(inv))


def build(inv: Path, data: Path, **kw) -> dict:
    hv, groups = load(inv)
    return D.build(hv, groups, "run", "/tmp/none", str(data), inventory_dir=str(inv), **kw)


def test_first_bring_up_records_the_release_and_a_newer_one_shipped_changes_nothing(inv, catalog):
    shipped = Catalog(catalog).newest_version("vllm")
    first = build(inv, catalog, repin=False)
    assert first["pins"]["problems"] == [] and first["engine"]["version"] == shipped
    assert first["pins"]["sources"]["engine"] == "default"
    lock = json.loads((inv / P.LOCK_NAME).read_text())
    assert lock["engine"]["name"] == "vllm" and lock["engine"]["version"] == shipped

    bumped = ship_newer(catalog)
    again = build(inv, catalog, repin=False)
    assert again["pins"]["problems"] == []
    assert again["engine"]["version"] == shipped != bumped
    assert again["engine"]["venv"].endswith(f"vllm-{shipped}")
    assert again["pins"]["sources"] == {"engine": "lock", "model": "inventory", "image": None}
    argv = [a for h in again["hosts"].values() for s in h["plan"]["services"] for a in s["argv"]]
    assert not any(bumped in a for a in argv)
    assert json.loads((inv / P.LOCK_NAME).read_text()) == lock  # not rewritten
    # the hash does not move from the first run to the second (sources are left out of it)
    assert again["hash"] == first["hash"]

    # scripts/launch-plan plans the locked release too (the plan the operator reads = the run's)
    env = dict(os.environ, LLMB_DATA_DIR=str(catalog))
    env.pop("LLMB_REPIN", None)
    out = subprocess.run([str(REPO / "scripts" / "launch-plan"), "-i", str(inv), "--check"], env=env,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0 and f"vllm {shipped}," in out.stdout, out.stdout + out.stderr
    out = subprocess.run([str(REPO / "scripts" / "launch-plan"), "-i", str(inv), "--deployment", "--pins"],
                         env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["engine"]["version"] == shipped
    assert re.search(rf"engine +vllm {re.escape(shipped)} +<- lock", out.stderr), out.stderr
    assert re.search(rf"model +\S+@{COMMIT} +<- inventory", out.stderr), out.stderr


def test_repin_moves_the_release_to_the_newest_shipped(inv, catalog):
    shipped = Catalog(catalog).newest_version("vllm")
    build(inv, catalog, repin=False)
    bumped = ship_newer(catalog)
    check = build(inv, catalog, repin=True, write=False)  # check mode: says the move, writes nothing
    assert check["engine"]["version"] == bumped and check["pins"]["sources"]["engine"] == "default"
    assert json.loads((inv / P.LOCK_NAME).read_text())["engine"]["version"] == shipped
    moved = build(inv, catalog, repin=True)
    assert moved["engine"]["version"] == bumped
    assert json.loads((inv / P.LOCK_NAME).read_text())["engine"]["version"] == bumped
    assert build(inv, catalog, repin=False)["pins"]["sources"]["engine"] == "lock"
    # LLMB_REPIN=1 in the environment (repin=None reads it) does the same
    old = os.environ.get("LLMB_REPIN")
    os.environ["LLMB_REPIN"] = "1"
    try:
        doc = build(inv, catalog)
    finally:
        os.environ.pop("LLMB_REPIN") if old is None else os.environ.__setitem__("LLMB_REPIN", old)
    assert doc["pins"]["sources"]["engine"] == "default"


def test_inventory_version_wins_and_is_recorded(inv, catalog):
    build(inv, catalog, repin=False)
    llmb = inv / "group_vars" / "all" / "llmb.yml"
    llmb.write_text(llmb.read_text() + "llmb_engine_version: 0.19.1\n")
    doc = build(inv, catalog, repin=False)
    assert doc["engine"]["version"] == "0.19.1" and doc["pins"]["sources"]["engine"] == "inventory"
    assert json.loads((inv / P.LOCK_NAME).read_text())["engine"]["version"] == "0.19.1"


def test_a_locked_release_no_longer_shipped_refuses_with_both_ways_out(inv, catalog):
    lock = {"engine": {"name": "vllm", "version": "0.1.0"}, "images": {}}
    (inv / P.LOCK_NAME).write_text(json.dumps(lock))
    doc = build(inv, catalog, repin=False)
    assert doc["pins"]["resolved"] is False
    problem = doc["pins"]["problems"][0]
    assert "vllm 0.1.0" in problem["message"] and "LLMB_REPIN=1" in problem["fix"]
    assert json.loads((inv / P.LOCK_NAME).read_text()) == lock  # a refused run writes nothing


def test_another_engine_in_the_lock_is_not_used(inv, catalog):
    (inv / P.LOCK_NAME).write_text(json.dumps({"engine": {"name": "sglang", "version": "0.5.5"}, "images": {}}))
    doc = build(inv, catalog, repin=False)
    assert doc["engine"]["version"] == Catalog(catalog).newest_version("vllm")
    assert doc["pins"]["sources"]["engine"] == "default"


def test_resolve_engine_rules():
    lock = {"engine": {"name": "vllm", "version": "0.23.0"}}
    shipped = ["0.19.1", "0.23.0", "0.32.0"]
    assert P.resolve_engine("vllm", "0.19.1", shipped, lock) == ("0.19.1", "inventory")
    assert P.resolve_engine("vllm", None, shipped, lock) == ("0.23.0", "lock")
    assert P.resolve_engine("vllm", None, shipped, lock, repin=True) == ("0.32.0", "default")
    assert P.resolve_engine("vllm", None, shipped, {}) == ("0.32.0", "default")
    assert P.resolve_engine("vllm", None, [], {}) == (None, "default")
    with pytest.raises(P.PinError):
        P.resolve_engine("vllm", None, ["0.32.0"], lock)


def test_disaster_recovery_stage_0_plans_the_locked_release(inv, catalog, tmp_path):
    """playbooks/recover.yml as run (its stage 0 on the controller only: --limit localhost, no task
    of a node selected): deployment.json names the locked release, not the newer one shipped."""
    shipped = Catalog(catalog).newest_version("vllm")
    build(inv, catalog, repin=False)
    ship_newer(catalog)
    arts = tmp_path / "arts"
    env = dict(os.environ, LLMB_DATA_DIR=str(catalog), LLMB_ARTIFACTS_DIR=str(arts), LLMB_RUN_ID="dr",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env.pop("LLMB_REPIN", None)
    hosts = list(load(inv)[1]["accel_nodes"])
    (inv / "controller.yml").write_text("all:\n  hosts:\n    localhost: {ansible_connection: local}\n")
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), str(REPO / "playbooks" / "recover.yml"), "-i", str(inv),
         "-e", f"llmb_recover_host={hosts[-1]}", "--limit", "localhost", "--tags", "llmb-stage0-only"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "not a mapping" not in out.stderr  # the lock beside the inventory is no inventory source
    doc = json.loads((arts / "deployment.json").read_text())
    assert doc["engine"]["version"] == shipped and doc["pins"]["sources"]["engine"] == "lock"
    assert doc["engine"]["venv"].endswith(f"vllm-{shipped}")
