"""The PD router on a control node: a host of the inventory outside accel_nodes that runs the router
only (llmb_disaggregation.router.host), planned from the 1P1D sample with a third host added."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from llmb import ports
from llmb.report import expected_results
from llmbctl import deployment as D
from llmbctl.planner import plan_inventory
from llmbctl.planner.model import PlanError
from planner_helpers import REPO, load_inventory, service

CTL = "ctl-01"
ROUTER = "llmb-sglang-router"


def control_inventory(address: str = "192.168.101.5", **overrides) -> tuple[dict, dict]:
    """h200-1p1d with ctl-01 in a group control_nodes (outside accel_nodes) as the router host."""
    hv, groups = load_inventory("h200-1p1d")
    shared = {k: v for k, v in hv["gpu-h200-01"].items()
              if k not in ("ansible_host", "llmb_node_ip", "llmb_ib_device", "inventory_hostname", "group_names")}
    hv[CTL] = dict(shared, ansible_host="10.0.1.5", llmb_node_ip=address)
    groups["all"] = [*groups["all"], CTL]
    groups["control_nodes"] = [CTL]
    for v in hv.values():
        v["llmb_disaggregation"] = dict(v["llmb_disaggregation"],
                                        router={**(v["llmb_disaggregation"].get("router") or {}), "host": CTL})
        v.update(overrides)
    return hv, groups


def problems_of(hv: dict, groups: dict) -> list:
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(REPO / "data"))
    return err.value.problems


def test_the_router_runs_on_the_control_node_and_the_groups_are_as_before():
    plan = {h["host"]: h for h in plan_inventory(*control_inventory(), str(REPO / "data")).to_list()}
    base = {h["host"]: h for h in plan_inventory(*load_inventory("h200-1p1d"), str(REPO / "data")).to_list()}
    assert list(plan) == ["gpu-h200-01", "gpu-h200-02", CTL]
    ctl = plan[CTL]
    assert ctl["control"] is True and ctl["rank"] == 2 and ctl["address"] == "192.168.101.5"
    assert [s["name"] for s in ctl["services"]] == [ROUTER]
    assert "control" not in plan["gpu-h200-01"] and "control" not in plan["gpu-h200-02"]
    # the router moved: the prefill node runs its engine only, everything else of the groups is unchanged
    assert [s["name"] for s in plan["gpu-h200-01"]["services"]] == ["llmb-sglang-prefill"]
    before = dict(base["gpu-h200-01"], services=[s for s in base["gpu-h200-01"]["services"] if s["name"] != ROUTER])
    assert plan["gpu-h200-01"] == before and plan["gpu-h200-02"] == base["gpu-h200-02"]
    router, was = service(ctl, ROUTER), service(base["gpu-h200-01"], ROUTER)
    assert router["argv"] == was["argv"]  # the same instances, bootstrap port and bind address
    assert router["health"]["url"] == "http://192.168.101.5:8000/health"
    assert router["api"]["base_url"] == "http://192.168.101.5:8000/v1"
    assert router["ports"] == [{"port": 8000, "purpose": "api"}]
    assert [h["node"] for h in router["after_healthy"]] == ["gpu-h200-01", "gpu-h200-02"]


def test_the_deployment_marks_the_control_node_and_gives_it_the_routers_package_alone():
    doc = D.resolve(*control_inventory())
    assert doc["planned"], doc["problems"]
    hosts = doc["hosts"]
    assert hosts[CTL]["control"] is True and "control" not in hosts["gpu-h200-01"]
    assert hosts[CTL]["packages"] == ["sglang-router==0.3.2"]
    assert "sglang-router==0.3.2" not in hosts["gpu-h200-01"]["packages"]
    assert D.host_view(doc, CTL)["host"]["control"] is True
    # the serve role's port check: the router's listener is on the control node's address
    own = ports.own_listeners(doc, CTL)
    assert [(x["address"], x["port"], x["service"]) for x in own] == [("192.168.101.5", 8000, ROUTER)]
    # the control node reaches the prefill node's API and bootstrap ports and the decode node's API
    reach = {(t["host"], t["port"]) for t in ports.targets(doc, CTL)}
    assert {("gpu-h200-01", 30000), ("gpu-h200-01", 8998), ("gpu-h200-02", 30000)} <= reach


def test_the_report_expects_of_the_control_node_what_runs_there():
    doc = D.resolve(*control_inventory())
    stages = ["verify", "engine", "weights", "ssh_mesh", "serve", "bench", "accuracy"]
    got = expected_results(doc, stages, {})
    assert sorted(s for s, h in got if h == CTL) == ["accuracy", "bench", "engine", "serve"]
    assert sorted(s for s, h in got if h == "gpu-h200-01") == ["engine", "serve", "ssh_mesh", "verify", "weights"]
    # the bench and accuracy plays' hosts (stage 0's group llmb_api_hosts) are the ones the report expects
    from llmb.report import api_hosts

    assert api_hosts(doc) == [CTL] == sorted({h for s, h in got if s in ("bench", "accuracy")})


@pytest.mark.parametrize("change,check,needle", [
    ({"host": "nowhere"}, "disaggregation", "llmb_disaggregation.router.host names 'nowhere'"),
    ({"llmb_install": "container"}, "disaggregation", "planned for llmb_install: host only"),
    ({"address": "127.0.0.1"}, "addresses", "has no address the groups' nodes can reach"),
    ({"address": "192.168.101.12"}, "addresses", "and gpu-h200-02 have the same address"),
])
def test_a_control_node_the_plan_cannot_use_is_refused(change, check, needle):
    change = dict(change)
    hv, groups = control_inventory(change.pop("address", "192.168.101.5"))
    for v in hv.values():
        if "host" in change:
            v["llmb_disaggregation"]["router"]["host"] = change["host"]
        if "llmb_install" in change:
            v["llmb_install"] = change["llmb_install"]
    problems = [p for p in problems_of(hv, groups) if needle in p.message]
    assert [p.check for p in problems] == [check], [p.format() for p in problems_of(hv, groups)]
    text = problems[0].format()
    assert "llmb_disaggregation.router.host" in text
    if change.get("host") == "nowhere":  # the valid set: the nodes and the control node
        assert CTL in str(problems[0].expected) and "gpu-h200-01" in str(problems[0].expected)


def test_the_stages_that_run_on_the_control_node_target_the_deployments_hosts():
    """engine, serve and preflight's node play run on llmb_hosts (stage 0 adds every host of the deployment
    to it), bench and accuracy on llmb_api_hosts (the hosts whose plan serves an API: a control node's
    router, for one); verify, weights, ssh_mesh and collect stay on accel_nodes."""
    run = yaml.safe_load((REPO / "playbooks/_run.yml").read_text())
    add = [t for t in run[0]["tasks"] if "ansible.builtin.add_host" in t]
    assert [t["ansible.builtin.add_host"]["groups"] for t in add] == ["llmb_hosts", "llmb_api_hosts"]
    assert "llmb_deployment_doc.hosts" in add[0]["loop"]
    assert add[1]["loop"] == "{{ llmb_deployment_doc | llmb_api_hosts }}"
    targets: dict[str, set] = {}
    for pb in Path(REPO / "playbooks").glob("*.yml"):
        for play in yaml.safe_load(pb.read_text()) or []:
            if isinstance(play, dict) and "hosts" in play:
                targets.setdefault(pb.name, set()).add(play["hosts"])
    for name in ("engine.yml", "serve.yml"):
        assert targets[name] == {"llmb_hosts"}, name
    for name in ("bench.yml", "accuracy.yml"):
        assert targets[name] == {"llmb_api_hosts"}, name
    assert "llmb_hosts" in targets["preflight.yml"]
    for name in ("verify.yml", "weights.yml", "ssh_mesh.yml", "collect.yml"):
        assert "llmb_hosts" not in targets[name] and "accel_nodes" in targets[name], name


def test_the_engine_stage_installs_the_packages_alone_on_a_control_node():
    text = (REPO / "roles/engine_host/vars/main.yml").read_text()
    spec = yaml.safe_load(text)
    assert "llmb_deployment.host.control" in spec["_engine_host_control"]
    assert "[] if _engine_host_control" in spec["_engine_host_engine_requirements"]
    assert "_engine_host_engine_requirements + engine_host_packages" in spec["_engine_host_install_argv"]


def test_a_site_run_with_the_control_node_is_ok_and_the_report_names_it(tmp_path):
    """Every stage's result on the accelerator nodes, engine / serve / bench / accuracy on the control
    node (verify, weights and ssh_mesh do not run there): the verdict is OK, the control node's column
    says what it is, and its router is in the serve start order."""
    import json

    from llmb.report import PIPELINE_STAGES, write_report

    doc = D.resolve(*control_inventory())
    run = tmp_path / "run"
    run.mkdir()
    (run / "deployment.json").write_text(json.dumps(doc))
    for stage in PIPELINE_STAGES:
        hosts = [CTL] if stage in ("bench", "accuracy") else ["gpu-h200-01", "gpu-h200-02"]
        hosts += [CTL] if stage in ("engine", "serve") else []
        for host in hosts:
            (run / stage).mkdir(exist_ok=True)
            (run / stage / f"{host}.json").write_text(json.dumps({"host": host, "stage": stage, "ok": True}))
    rep = write_report(str(run), PIPELINE_STAGES)
    assert rep["verdict"] == "OK", rep["failed"]
    assert rep["control"] == [CTL]
    assert {"host": CTL, "service": ROUTER, "order": 40, "kind": "systemd"} in rep["serve"]["start_order"]
    html = (run / "report.html").read_text()
    assert f"<th>{CTL} (control node: router)</th>" in html
    assert f"| {CTL} (control node: router) |" in (run / "report.md").read_text()
    (run / "verify" / "gpu-h200-02.json").unlink()  # an accelerator node's verify is still expected
    assert write_report(str(run), PIPELINE_STAGES)["failed"][0]["host"] == "gpu-h200-02"


def test_launch_plan_reads_a_control_node_from_the_inventory_files(tmp_path):
    """Through scripts/launch-plan on a copy of the 1P1D sample with a group control_nodes in hosts.yml
    (the way an operator writes it): planned, and the text form says what the control node is."""
    import shutil
    import subprocess
    import sys

    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "h200-1p1d", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["control_nodes"] = {"hosts": {CTL: {"ansible_host": "10.0.1.5",
                                                                 "llmb_node_ip": "192.168.101.5"}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    serve = inv / "group_vars" / "all" / "serve.yml"
    doc = yaml.safe_load(serve.read_text())
    doc["llmb_disaggregation"]["router"]["host"] = CTL
    serve.write_text(yaml.safe_dump(doc, sort_keys=False))
    script = [sys.executable, str(REPO / "scripts" / "launch-plan"), "-i", str(inv)]
    text = subprocess.run(script, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert text.returncode == 0, text.stdout + text.stderr
    assert f"== {CTL} (192.168.101.5), rank 2\n   control node (outside accel_nodes): the router only" in text.stdout
    js = subprocess.run([*script, "--format", "json"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert [(h["host"], h.get("control")) for h in yaml.safe_load(js.stdout)] == [
        ("gpu-h200-01", None), ("gpu-h200-02", None), (CTL, True)]
