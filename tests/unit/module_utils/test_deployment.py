"""The deployment resolver (llmbctl.deployment) on the sample inventories, and the results writer."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llmbctl import deployment as D
from llmbctl import results as R

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "launch-plan"
PLANNED = ["h100", "h200", "h800", "h800-dp-ep", "a3", "a3-2x16", "mi300x", "mi300x-2x8", "h200-sglang", "h200-trtllm", "sim"]
_CACHE: dict[str, tuple[dict, dict]] = {}


def _script():
    loader = importlib.machinery.SourceFileLoader("llmb_launch_plan_for_deployment", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def inventory(name: str) -> tuple[dict, dict]:
    if name not in _CACHE:
        _CACHE[name] = _script().load_inventory(str(REPO / "inventories" / name))
    return copy.deepcopy(_CACHE[name])


def launch_plan(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("LLMB_RUN_ID", None)
    env.pop("LLMB_ARTIFACTS_DIR", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.parametrize("name", PLANNED)
def test_same_inventory_same_document_and_hash_across_runs(name):
    hv, groups = inventory(name)
    a = D.resolve(hv, groups, "run-a", "/tmp/a")
    b = D.resolve(*inventory(name), "run-b", "/tmp/b")
    assert a["planned"] is True and a["problems"] == []
    assert a["hash"] == b["hash"] == D.content_hash(a)
    assert a["run"] == {"id": "run-a", "artifacts_dir": "/tmp/a"}
    assert {k: v for k, v in a.items() if k != "run"} == {k: v for k, v in b.items() if k != "run"}
    assert D.dumps(D.resolve(*inventory(name), "run-a", "/tmp/a")) == D.dumps(a)
    assert json.loads(D.dumps(a)) == a


@pytest.mark.parametrize("name", ["h800", "a3", "h200-trtllm", "h800-dp-ep"])
def test_host_plans_are_the_launch_plan_json(name):
    out = launch_plan("-i", str(REPO / "inventories" / name), "--format", "json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    doc = D.resolve(*inventory(name))
    assert list(doc["hosts"]) == [h["host"] for h in plan]
    for entry in plan:
        mine = doc["hosts"][entry["host"]]
        assert mine["plan"] == entry
        assert (mine["address"], mine["rank"]) == (entry["address"], entry["rank"])
        assert mine["config_patches"] == entry["model"]["config_patches"]
    levels = sorted({s["order"] for h in plan for s in h["services"]})
    assert doc["start_levels"] == levels


def test_h800_host_install():
    doc = D.resolve(*inventory("h800"))
    assert doc["platform"] == {"name": "h800-hgx8", "vendor": "nvidia"}
    assert doc["engine"] == {
        "name": "vllm",
        "version": "0.19.1",
        "install": "host",
        "channel": "stable",
        "venv": "/opt/llmb/venvs/vllm-0.19.1",
        "image": None,
    }
    m = doc["model"]
    assert (m["profile"], m["repo_id"], m["dir"]) == (
        "kimi-k2-instruct",
        "moonshotai/Kimi-K2-Instruct",
        "/data/models/Kimi-K2-Instruct",
    )
    assert m["served_name"] == "moonshotai/Kimi-K2-Instruct"
    assert doc["dirs"]["etc"] == "/etc/llmb" and doc["dirs"]["opt"] == "/opt/llmb"
    assert doc["dirs"]["state"] == "/var/lib/llmb" and doc["dirs"]["run"] == "/run/llmb"
    assert doc["dirs"]["ssh_mesh"] == "/etc/llmb/ssh-mesh"
    assert doc["ports"]["api"] == 8000
    # the venv the engine stage installs is the one every service of the plan runs
    for host in doc["hosts"].values():
        for svc in host["plan"]["services"]:
            assert svc["argv"][0].startswith(doc["engine"]["venv"] + "/bin/")


def test_a3_container_image_and_pins_hook():
    doc = D.resolve(*inventory("a3"))
    assert doc["platform"]["vendor"] == "ascend"
    eng = doc["engine"]
    assert (eng["name"], eng["install"], eng["venv"], eng["channel"]) == ("vllm-ascend", "container", None, None)
    assert eng["image"] == {"ref": "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3", "digest": None, "id": None}
    assert doc["model"]["repo_id"] == "moonshotai/Kimi-K2-Thinking"
    plan_images = {s["image"] for h in doc["hosts"].values() for s in h["plan"]["services"] if s.get("image")}
    assert plan_images == {eng["image"]["ref"]}

    hv, groups = inventory("a3")
    digest, image_id = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    commit = "c" * 40
    for name in hv:
        hv[name]["engine_image_pins"] = {eng["image"]["ref"]: {"digest": digest, "id": image_id}}
        hv[name]["llmb_model_revision"] = commit
    pinned = D.resolve(hv, groups)
    assert pinned["engine"]["image"] == {"ref": eng["image"]["ref"], "digest": digest, "id": image_id}
    assert pinned["model"]["commit"] == commit
    assert pinned["hash"] != doc["hash"]


def test_h200_trtllm_mesh_dir_and_sshd_port():
    doc = D.resolve(*inventory("h200-trtllm"))
    assert doc["engine"]["name"] == "trtllm" and doc["engine"]["install"] == "container"
    assert doc["engine"]["image"]["ref"] == "nvcr.io/nvidia/tensorrt-llm/release:1.1.0"
    assert doc["ports"]["sshd"] == 2233
    mounts = [m for h in doc["hosts"].values() for s in h["plan"]["services"] for m in s.get("mounts") or []]
    assert any(doc["dirs"]["ssh_mesh"] in m for m in mounts)


def test_amd_host_install_takes_the_rocm_channel():
    hv, groups = inventory("mi300x")
    for name in hv:
        hv[name]["llmb_install"] = "host"
    doc = D.resolve(hv, groups)
    if not doc["planned"]:
        pytest.skip(f"mi300x cannot be planned as a host install: {doc['problems']}")
    assert doc["engine"]["channel"] == "rocm"


def test_venv_override_is_one_decision():
    hv, groups = inventory("h800")
    for name in hv:
        hv[name]["llmb_engine_venv"] = "/srv/venvs/vllm/"
    doc = D.resolve(hv, groups)
    assert doc["engine"]["venv"] == "/srv/venvs/vllm"
    argv0 = {s["argv"][0] for h in doc["hosts"].values() for s in h["plan"]["services"]}
    assert all(a.startswith("/srv/venvs/vllm/bin/") for a in argv0)


def test_inventory_change_changes_the_hash():
    hv, groups = inventory("h800")
    before = D.resolve(hv, groups)["hash"]
    for name in hv:
        hv[name]["llmb_api_port"] = 8001
    after = D.resolve(hv, groups)
    assert after["ports"]["api"] == 8001 and after["hash"] != before


def test_verify_only_inventory_gives_a_document_without_plan():
    doc = D.resolve(*inventory("local-h100-x1"), "x", "/tmp/x")
    assert doc["planned"] is False
    assert {p["check"] for p in doc["problems"]} == {"required"}
    assert doc["platform"]["name"] == "h100-x1"
    assert doc["hosts"] == {
        "localhost": {"address": "localhost", "rank": 0, "config_patches": [], "packages": [], "plan": None}
    }
    assert doc["engine"]["venv"] is None and doc["model"]["repo_id"] is None
    assert doc["start_levels"] == []


def test_ad_hoc_localhost_without_accel_nodes():
    hv = {"localhost": {"llmb_platform": "h100-x1"}}
    doc = D.resolve(hv, {"all": ["localhost"], "ungrouped": ["localhost"]}, "x", "/tmp/x")
    assert doc["planned"] is False and doc["problems"][0]["check"] == "hosts"
    assert doc["platform"]["name"] == "h100-x1" and doc["hosts"] == {}


def test_host_view_has_only_its_own_plan():
    doc = D.resolve(*inventory("h800"), "r", "/tmp/r")
    view = D.host_view(doc, "gpu-h800-02")
    assert "hosts" not in view
    assert view["host"]["name"] == "gpu-h800-02"
    assert view["host"]["plan"] == doc["hosts"]["gpu-h800-02"]["plan"]
    assert view["engine"] == doc["engine"] and view["hash"] == doc["hash"] and view["run"] == doc["run"]
    other = D.host_view(doc, "localhost")["host"]
    assert other == {"name": "localhost", "address": None, "rank": None, "config_patches": [], "packages": [], "plan": None}


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "a b", "x" * 129, "r;rm"])
def test_bad_run_ids_are_refused_naming_the_variable(bad):
    with pytest.raises(D.DeploymentError, match="LLMB_RUN_ID"):
        D.validate_run_id(bad)


@pytest.mark.parametrize("good", ["20251123T000000Z", "e2e-1763856000000", "real-h100-x1", "a.b_c+d:e"])
def test_good_run_ids(good):
    assert D.validate_run_id(good) == good


def test_write_is_atomic_and_idempotent(tmp_path):
    doc = D.resolve(*inventory("h200"), "w", str(tmp_path))
    path = tmp_path / "run" / "deployment.json"
    assert D.write(doc, str(path)) is True
    assert path.read_text() == D.dumps(doc)
    assert D.write(doc, str(path)) is False
    assert [p.name for p in path.parent.iterdir()] == ["deployment.json"]


def test_launch_plan_deployment_prints_the_document():
    out = launch_plan("-i", str(REPO / "inventories" / "h800"), "--deployment")
    assert out.returncode == 0, out.stderr
    assert out.stdout == D.dumps(D.resolve(*inventory("h800")))
    bad = launch_plan("-i", str(REPO / "inventories" / "local-h100-x1"), "--deployment")
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["planned"] is False
    assert "llmb_model is not set" in bad.stderr


def test_results_writer(tmp_path):
    path = R.record(str(tmp_path), "serve", "gpu-01", {"services": ["a"], "ok": False})
    assert path == str(tmp_path / "serve" / "gpu-01.json")
    data = json.loads(Path(path).read_text())
    assert data.pop("finished").endswith("Z")  # when the record was written (the report's durations)
    assert data == {"host": "gpu-01", "stage": "serve", "ok": False, "services": ["a"]}
    with pytest.raises(R.ResultError, match="host"):
        R.record(str(tmp_path), "serve", "../etc/passwd", {})
    with pytest.raises(R.ResultError, match="stage"):
        R.record(str(tmp_path), "a/b", "gpu-01", {})


def test_stage_0_refuses_unresolvable_pins_before_any_host(tmp_path):
    """No hub, no registry, nothing pinned: the document names both pins and their fixes."""
    hv, groups = inventory("a3")
    image = "127.0.0.1:9/ascend/vllm-ascend:v0.20.2rc1-a3"  # discard port: connection refused
    for name in hv:
        hv[name]["weights_hf_endpoint"] = "http://127.0.0.1:9"
        hv[name]["llmb_container_image"] = image
    doc = D.pin(D.resolve(hv, groups), hv, groups, str(tmp_path), write=True)
    assert doc["planned"] and not doc["pins"]["resolved"]
    messages = [p["message"] for p in doc["pins"]["problems"]]
    assert any("revision 'main' is a branch" in m for m in messages), messages
    assert any(f"{image} has no digest" in m for m in messages), messages
    assert not (tmp_path / "llmb.lock.json").exists()  # nothing is locked when a pin is refused


def test_stage_0_pins_what_the_inventory_states_without_network(tmp_path):
    hv, groups = inventory("a3")
    ref = "quay.io/ascend/vllm-ascend:v0.20.2rc1-a3"
    for name in hv:
        hv[name]["weights_hf_endpoint"] = "http://127.0.0.1:9"
        hv[name]["llmb_model_revision"] = "c" * 40
        hv[name]["engine_image_pins"] = {ref: {"digest": "sha256:" + "a" * 64}}
    doc = D.pin(D.resolve(hv, groups), hv, groups, str(tmp_path), write=True)
    assert doc["pins"]["resolved"] and not doc["pins"]["problems"]
    assert doc["model"]["commit"] == "c" * 40
    assert doc["engine"]["image"]["digest"] == "sha256:" + "a" * 64


def test_every_stage_playbook_imports_stage_0_first():
    """One run-id mechanism: each playbook run alone names its run from LLMB_RUN_ID through _run.yml.
    Fragments (_run.yml itself, _gates.yml) are imported by site.yml after stage 0 and never run alone."""
    import yaml

    for path in sorted((REPO / "playbooks").glob("*.yml")):
        if path.name.startswith("_"):
            continue
        plays = yaml.safe_load(path.read_text())
        first = plays[0]
        assert first.get("ansible.builtin.import_playbook") == "_run.yml", path.name


def test_llmb_run_id_names_the_run_of_verify_run_alone(tmp_path):
    """verify.yml alone (the ad-hoc localhost form): results land under artifacts/<LLMB_RUN_ID>/."""
    env = dict(os.environ, LLMB_RUN_ID="unit-run-id", LLMB_ARTIFACTS_DIR=str(tmp_path / "run"))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/verify.yml", "-i", "localhost,",
         "-c", "local", "-e", "llmb_platform=h100-x1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    result = json.loads((tmp_path / "run" / "verify" / "localhost.json").read_text())
    assert result["run_id"] == "unit-run-id", proc.stdout[-2000:]
    assert json.loads((tmp_path / "run" / "deployment.json").read_text())["run"]["id"] == "unit-run-id"


def _stage_0(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    env.pop("LLMB_RUN_ID", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/_run.yml", "-e", "llmb_run_id=unit-stage0",
         "-e", f"llmb_artifacts_dir={tmp_path / 'run'}", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


def test_stage_0_writes_the_document_then_refuses_a_stage_that_needs_the_plan(tmp_path):
    """An inventory that cannot be planned: deployment.json is still written (the report reads it), and a
    stage that needs the plan fails with the planner's report."""
    proc = _stage_0(tmp_path, "-i", "localhost,", "-c", "local", "-e", "llmb_stage_needs_plan=weights")
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "weights stage: " in proc.stdout and "a group accel_nodes" in proc.stdout, proc.stdout[-2000:]
    doc = json.loads((tmp_path / "run" / "deployment.json").read_text())
    assert doc["run"]["id"] == "unit-stage0" and doc["planned"] is False
    assert oct((tmp_path / "run").stat().st_mode & 0o777) == "0o755"
    assert "changed=0" in proc.stdout  # results of the run, not cluster state


def test_stage_0_refuses_a_stage_whose_pins_cannot_be_resolved(tmp_path):
    """A planned inventory whose model commit and image digest cannot be pinned (no hub, no registry): the
    stage fails naming both; with the gate lifted (-e llmb_stage_needs_plan=) the document is written."""
    inv = tmp_path / "inv"
    import shutil

    shutil.copytree(REPO / "inventories" / "a3", inv)
    unpinnable = ["-i", str(inv), "-e", "weights_hf_endpoint=http://127.0.0.1:9",
                  "-e", "llmb_container_image=127.0.0.1:9/ascend/vllm-ascend:v0.20.2rc1-a3"]
    proc = _stage_0(tmp_path, *unpinnable, "-e", "llmb_stage_needs_plan=serve")
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "serve stage: " in proc.stdout and "revision 'main' is a branch" in proc.stdout, proc.stdout[-2000:]
    assert "has no digest" in proc.stdout, proc.stdout[-2000:]
    lifted = _stage_0(tmp_path, *unpinnable, "-e", "llmb_stage_needs_plan=")
    assert lifted.returncode == 0, lifted.stdout[-2000:]
    assert json.loads((tmp_path / "run" / "deployment.json").read_text())["planned"] is True
