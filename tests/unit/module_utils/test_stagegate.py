"""The fast path of a converged re-run: llmb.stagegate (node side: observe, compare with the record)
and llmbctl.stagegate (controller side: the stage's inputs, their digest, what it watches)."""

from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest
from llmb import stagegate as node
from llmb.container import SPEC_LABEL
from llmbctl import stagegate as ctl

SERVICES = [
    {"name": "llmb-ray", "kind": "systemd", "env": {"LLMB_BIND_PORTS": "6379"}, "config_files": [],
     "ready": {"type": "tcp", "host": "10.0.0.1", "port": 6379}, "health": None, "api": None},
    {"name": "llmb-vllm", "kind": "systemd", "env": {}, "ready": None,
     "config_files": [{"path": "/etc/llmb/extra.yml", "content": "a: 1"}],
     "health": {"url": "http://10.0.0.1:8000/health"}, "api": {"base_url": "http://10.0.0.1:8000/v1"}},
]
DOC = {
    "schema": 1, "run": {"id": "r1", "artifacts_dir": "/a/r1"}, "hash": "sha256:1", "planned": True, "problems": [],
    "platform": {"name": "h800-hgx8", "vendor": "nvidia"},
    "engine": {"name": "vllm", "version": "0.19.1", "install": "host", "venv": "/opt/llmb/venvs/vllm-0.19.1"},
    "model": {"dir": "/opt/llmb/models/m", "commit": "c1"},
    "dirs": {"etc": "/etc/llmb", "opt": "/opt/llmb", "state": "/var/lib/llmb", "ssh_mesh": "/etc/llmb/ssh-mesh",
             "tools": "/opt/llmb/tools", "uv": "/opt/llmb/uv", "bindto": "/opt/llmb/lib/llmb-bindto.so"},
    "ports": {"api": 8000}, "start_levels": [10, 30], "pins": {"resolved": True},
    "hosts": {"n1": {"address": "10.0.0.1", "rank": 0, "packages": [], "config_patches": [],
                     "plan": {"services": SERVICES}},
              "n2": {"address": "10.0.0.2", "rank": 1, "packages": [], "config_patches": [],
                     "plan": {"services": []}}},
}
VARS = {"serve_smoke": True, "weights_strategy": "relay", "llmb_api_key": "k1", "llmb_run_id": "r1",
        "ansible_host": "10.0.0.1", "engine_host_python": "3.12", "ssh_mesh_check_pairs": "mpirun"}


def digests(doc=DOC, hostvars=VARS, host="n1"):
    return {s: ctl.digest(doc, host, s, hostvars) for s in ctl.STAGES}


def test_digest_ignores_the_run_and_the_document_hash():
    other = copy.deepcopy(DOC)
    other["run"] = {"id": "r2", "artifacts_dir": "/a/r2"}
    other["hash"] = "sha256:2"
    assert digests(other, dict(VARS, llmb_run_id="r2", llmb_stage_started="t2")) == digests()


@pytest.mark.parametrize("change, acts", [
    # one input of one stage: exactly that stage (and the stages that read the same part) acts
    (lambda d, v: v.update(weights_strategy="hub"), {"weights"}),
    (lambda d, v: v.update(serve_smoke=False), {"serve"}),
    (lambda d, v: v.update(engine_host_python="3.11"), {"engine"}),
    (lambda d, v: v.update(ssh_mesh_check_pairs="all"), {"ssh_mesh"}),
    (lambda d, v: d["model"].update(commit="c2"), {"weights", "serve"}),
    (lambda d, v: d["hosts"]["n1"]["plan"]["services"][1].update(argv=["x"]), {"serve"}),
    (lambda d, v: d["hosts"]["n2"].update(address="10.0.0.9"), {"weights", "ssh_mesh", "serve"}),
    (lambda d, v: d["engine"].update(version="0.20.0"), {"engine", "weights", "ssh_mesh", "serve"}),
    (lambda d, v: v.update(llmb_api_key="k2"), set(ctl.STAGES)),  # an llmb_* knob: every gated stage
    (lambda d, v: v.update(ansible_host="10.0.0.7"), set()),  # how the controller connects is no input
])
def test_a_changed_input_changes_exactly_the_stages_that_read_it(change, acts):
    doc, hv = copy.deepcopy(DOC), dict(VARS)
    change(doc, hv)
    before, after = digests(), digests(doc, hv)
    assert {s for s in ctl.STAGES if before[s] != after[s]} == acts


def test_the_toolkit_code_is_an_input(tmp_path):
    for rel in ("roles/serve/tasks", "roles/weights", "plugins/modules"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "roles/serve/tasks/main.yml").write_text("- a\n")
    (tmp_path / "roles/weights/main.yml").write_text("- w\n")
    (tmp_path / "plugins/modules/m.py").write_text("x = 1\n")
    before = {s: ctl.digest(DOC, "n1", s, VARS, root=tmp_path) for s in ctl.STAGES}
    (tmp_path / "roles/serve/tasks/main.yml").write_text("- b\n")
    after = {s: ctl.digest(DOC, "n1", s, VARS, root=tmp_path) for s in ctl.STAGES}
    assert {s for s in ctl.STAGES if before[s] != after[s]} == {"serve"}
    (tmp_path / "plugins/modules/m.py").write_text("x = 2\n")  # a module: every stage runs once in full
    again = {s: ctl.digest(DOC, "n1", s, VARS, root=tmp_path) for s in ctl.STAGES}
    assert all(again[s] != after[s] for s in ctl.STAGES)


def test_a_variable_that_cannot_be_templated_is_an_input_not_a_crash():
    class Vars(dict):
        def __getitem__(self, k):
            if k == "serve_bad":
                raise RuntimeError("undefined")
            return super().__getitem__(k)
    hv = Vars(VARS, serve_bad=None)
    assert ctl.knobs(hv, "serve")["serve_bad"].startswith("<cannot template")


def test_unknown_stage_is_refused():
    with pytest.raises(ctl.StageGateError, match="stage: expected one of engine, weights"):
        ctl.digest(DOC, "n1", "bench", VARS)


def test_watch_of_serve_names_units_files_listeners_and_health():
    w = ctl.watch(DOC, "n1", "serve")
    assert w["units"] == ["llmb-ray.service", "llmb-vllm.service"]
    assert "/etc/llmb/extra.yml" in w["hash"] and "/opt/llmb/lib/llmb-bindto.so" in w["hash"]
    assert w["tcp"] == [["10.0.0.1", 6379]] and w["http"] == ["http://10.0.0.1:8000/health"]
    assert ctl.watch(DOC, "n2", "serve").get("units") is None  # nothing planned there
    node.check_watch(w)  # what the controller asks, the node accepts


def test_watch_of_a_container_engine_asks_docker():
    doc = copy.deepcopy(DOC)
    doc["engine"].update(install="container", venv=None)
    assert ctl.watch(doc, "n1", "engine")["commands"][0][:2] == ["docker", "images"]


def test_watch_of_a_container_service_reads_its_spec_label():
    """A container started by hand under the planned name (same image, running) is not the planned one:
    the serve role's spec label is part of what the gate reads, so the stage runs and replaces it."""
    doc = copy.deepcopy(DOC)
    doc["hosts"]["n1"]["plan"]["services"] = [
        {"name": "vllm-ascend", "kind": "container", "container": {"name": "vllm-ascend"}, "env": {},
         "ready": None, "health": None, "api": None}]
    w = ctl.watch(doc, "n1", "serve")
    (argv,) = w["commands"]
    assert argv[:3] == ["docker", "inspect", "-f"] and SPEC_LABEL in argv[3] and argv[4] == "vllm-ascend"
    planned = node.observe(w, run=lambda a: (0, "true sha256:img 3f2a\n"))
    by_hand = node.observe(w, run=lambda a: (0, "true sha256:img <no value>\n"))
    assert planned["commands"] != by_hand["commands"]


def _tree(tmp_path):
    (tmp_path / "units").mkdir()
    (tmp_path / "units/llmb-a.service").write_text("[Unit]\n")
    (tmp_path / "units/llmb-b.service").write_text("[Unit]\nB\n")
    (tmp_path / "w").mkdir()
    (tmp_path / "w/shard-1.safetensors").write_bytes(b"x" * 100)
    return {"hash": [f"{tmp_path}/units/llmb-*"], "stat": [f"{tmp_path}/w/*"], "names": [f"{tmp_path}/v/*.dist-info"],
            "units": ["llmb-a.service"]}


def fake_run(active="active"):
    def run(argv):
        assert argv[:2] == ["systemctl", "show"]
        return 0, "".join(f"Id={u}\nActiveState={active}\nUnitFileState=enabled\n\n" for u in argv[argv.index("--") + 1:])
    return run


def test_record_then_check_converges_and_names_every_drift(tmp_path):
    w = _tree(tmp_path)
    seen = node.observe(w, run=fake_run())
    rec = json.loads(json.dumps(node.make_record("serve", "sha256:d1", seen)))  # as written and read back
    assert node.differences(rec, "sha256:d1", node.observe(w, run=fake_run())) == []
    # another digest: the inputs changed
    assert "inputs changed" in node.differences(rec, "sha256:d2", seen)[0]
    # a unit file edited, a shard grown, a unit stopped: each named
    (tmp_path / "units/llmb-b.service").write_text("[Unit]\nedited\n")
    (tmp_path / "w/shard-1.safetensors").write_bytes(b"x" * 101)
    why = node.differences(rec, "sha256:d1", node.observe(w, run=fake_run("failed")))
    assert "unit llmb-a.service is failed" in why
    assert any("llmb-b.service" in d and d.startswith("hash ") for d in why), why
    assert any("shard-1.safetensors" in d and d.startswith("stat ") for d in why), why
    # a file removed
    os.unlink(tmp_path / "units/llmb-a.service")
    assert any("gone" in d and "llmb-a.service" in d for d in node.differences(rec, "sha256:d1", node.observe(w, run=fake_run())))


def test_no_record_or_another_schema_is_never_converged(tmp_path):
    w = _tree(tmp_path)
    seen = node.observe(w, run=fake_run())
    assert node.differences(None, "d", seen) == ["no record of a converged run of this stage on the node"]
    assert node.differences({"schema": 0, "digest": "d", "seen": seen}, "d", seen)


def test_an_unhealthy_service_is_never_converged_even_if_recorded_so(tmp_path):
    w = {"tcp": [["127.0.0.1", 1]], "http": ["http://127.0.0.1:1/health"]}
    seen = node.observe(w, tcp=lambda h, p: False, http=lambda u: 503)
    rec = node.make_record("serve", "d", seen)
    assert node.differences(rec, "d", seen) == ["nothing listens on 127.0.0.1:1",
                                                "http://127.0.0.1:1/health answers 503, not 200"]


def test_real_tcp_and_http_probes(tmp_path):
    import http.server
    import threading

    srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        seen = node.observe({"tcp": [["127.0.0.1", port]], "http": [f"http://127.0.0.1:{port}/nothing-here"]})
        assert seen["tcp"] == {f"127.0.0.1:{port}": True}
        assert seen["http"] == {f"http://127.0.0.1:{port}/nothing-here": 404}
    finally:
        srv.shutdown()


@pytest.mark.parametrize("bad, msg", [
    ([], "watch: expected a mapping"),
    ({"files": []}, "unknown key(s) files"),
    ({"hash": "x"}, "watch.hash: expected a list"),
    ({"tcp": [["h", "22"]]}, "watch.tcp: bad entry"),
    ({"commands": [[]]}, "watch.commands: bad entry"),
])
def test_bad_watch_is_refused_with_its_key(bad, msg):
    with pytest.raises(node.GateError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        node.check_watch(bad)


def test_record_path_refuses_a_path_in_the_stage_name():
    assert node.record_path("/var/lib/llmb", "ssh_mesh") == "/var/lib/llmb/stages/ssh_mesh.json"
    with pytest.raises(node.GateError, match="stage"):
        node.record_path("/var/lib/llmb", "../etc")


def test_parse_units_of_systemctl_show():
    out = "Id=a.service\nActiveState=active\nUnitFileState=enabled\n\nId=b.service\nActiveState=inactive\nUnitFileState=\n"
    assert node.parse_units(out) == {"a.service": ["active", "enabled"], "b.service": ["inactive", ""]}


def test_the_benchmarks_shell_reader_reads_the_same_files(tmp_path):
    w = _tree(tmp_path)
    out = subprocess.run(["sh", "-c", ctl.shell_reader({k: w[k] for k in ("hash", "stat", "names")})],
                         capture_output=True, text=True, check=True).stdout
    assert "llmb-a.service" in out and "llmb-b.service" in out and "shard-1.safetensors" in out


# -- site.yml's one call per host for every gated stage (check_all) and which verdicts a stage may reuse


def test_check_all_says_what_each_single_check_says(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/a").write_text("a\n")
    state = str(tmp_path / "state")
    w = {"hash": [f"{tmp_path}/etc/*"]}
    os.makedirs(os.path.dirname(node.record_path(state, "engine")))
    with open(node.record_path(state, "engine"), "w") as fh:
        json.dump(node.make_record("engine", "sha256:e", node.observe(w)), fh)
    specs = {"engine": {"digest": "sha256:e", "watch": w}, "serve": {"digest": "sha256:s", "watch": w}}
    got = node.check_all(state, specs)
    assert got["engine"] == {"converged": True, "differs": [], "record": node.record_path(state, "engine"),
                             "digest": "sha256:e"}
    assert got["serve"]["converged"] is False and got["serve"]["digest"] == "sha256:s"
    assert got["serve"]["differs"] == node.differences(None, "sha256:s", node.observe(w))
    (tmp_path / "etc/a").write_text("edited\n")
    again = node.check_all(state, specs)["engine"]
    assert again["converged"] is False and any("etc/a" in d for d in again["differs"]), again


@pytest.mark.parametrize("specs, msg", [
    ({}, "stages: expected a mapping"),
    ({"engine": {"watch": {}}}, "stages.engine: expected {digest"),
    ({"engine": {"digest": "sha256:e", "watch": {"files": []}}}, "watch: unknown key(s) files"),
    ({"../x": {"digest": "sha256:e", "watch": {}}}, "stage: expected a stage name"),
])
def test_check_all_refuses_a_bad_spec(tmp_path, specs, msg):
    with pytest.raises(node.GateError, match=None) as err:
        node.check_all(str(tmp_path), specs)
    assert msg in str(err.value)


def test_specs_are_each_stages_digest_and_watch():
    hv = {"llmb_x": 1}
    got = ctl.specs(DOC, "n1", hv)
    assert sorted(got) == sorted(ctl.STAGES)
    for s in ctl.STAGES:
        assert got[s] == {"digest": ctl.digest(DOC, "n1", s, hv), "watch": ctl.watch(DOC, "n1", s)}


def _gates(**converged):
    return {"changed": False, "verdicts": {s: {"converged": c, "differs": [] if c else ["x"], "record": f"/r/{s}",
                                                "digest": f"sha256:{s}"} for s, c in converged.items()}}


ALL = dict(engine=True, weights=True, ssh_mesh=True, serve=True)


def test_prefetched_verdict_is_used_while_no_earlier_stage_acted():
    g = _gates(**{**ALL, "weights": False})
    for s in ctl.STAGES:
        v = ctl.prefetched(g, s, [], f"sha256:{s}")
        assert v["prefetched"] is True and v["converged"] is (s != "weights") and v["record"] == f"/r/{s}"


@pytest.mark.parametrize("acted, stage, fresh", [
    (["engine"], "engine", True),        # a stage's own run does not stale its own verdict
    (["engine"], "weights", False),      # the engine reinstalled: every later stage asks the node
    (["engine"], "serve", False),
    (["weights"], "engine", True),       # a later stage acting says nothing of an earlier one
    (["weights"], "ssh_mesh", False),
    (["ssh_mesh"], "serve", False),
    (["weights", "ssh_mesh"], "serve", False),
    ([], "serve", True),
])
def test_an_earlier_stage_that_acted_stales_every_later_verdict(acted, stage, fresh):
    v = ctl.prefetched(_gates(**ALL), stage, acted, f"sha256:{stage}")
    assert bool(v) is fresh


def test_another_digest_now_asks_the_node_again():
    assert ctl.prefetched(_gates(**ALL), "serve", [], "sha256:other") == {}


@pytest.mark.parametrize("gates", [
    None, {}, {"skipped": True, "changed": False}, {"failed": True, "verdicts": _gates(**ALL)["verdicts"]},
    {"verdicts": {}}, {"verdicts": {"serve": {"converged": "yes", "differs": [], "digest": "sha256:serve"}}},
    {"verdicts": {"serve": {"converged": True, "digest": "sha256:serve"}}}, {"verdicts": ["serve"]},
])
def test_no_usable_verdict_asks_the_node(gates):
    assert ctl.prefetched(gates, "serve", [], "sha256:serve") == {}


def test_prefetched_refuses_unknown_stages():
    with pytest.raises(ctl.StageGateError, match="stage: expected one of"):
        ctl.prefetched(_gates(**ALL), "bench", [], "sha256:bench")
    with pytest.raises(ctl.StageGateError, match="acted: unknown stage"):
        ctl.prefetched(_gates(**ALL), "serve", ["verify"], "sha256:serve")
    with pytest.raises(ctl.StageGateError, match="acted: expected the list"):
        ctl.prefetched(_gates(**ALL), "serve", "engine", "sha256:serve")


def test_digests_are_each_hosts_own_digest():
    hv = {"n1": dict(VARS), "n2": {**VARS, "serve_smoke": False}}
    got = ctl.digests(DOC, ["n1", "n2"], "serve", hv)
    assert got == {h: ctl.digest(DOC, h, "serve", hv[h]) for h in ("n1", "n2")} and got["n1"] != got["n2"]


def _all(stage="serve", hosts=("n1", "n2"), gates=None, acted=None, digest=None):
    gates = gates if gates is not None else {h: _gates(**ALL) for h in hosts}
    return ctl.prefetched_all(stage, list(hosts), gates, acted or {}, digest or {h: f"sha256:{stage}" for h in hosts})


def test_prefetched_all_converges_only_where_every_host_has_a_holding_converged_verdict():
    got = _all()
    assert got["converged"] is True and got["differs"] == [] and sorted(got["hosts"]) == ["n1", "n2"]
    assert got["hosts"]["n1"] == ctl.prefetched(_gates(**ALL), "serve", [], "sha256:serve")
    # one host's verdict differs: not converged, the reason named with its host
    got = _all(gates={"n1": _gates(**ALL), "n2": _gates(**{**ALL, "serve": False})})
    assert got["converged"] is False and got["differs"] == ["n2: x"]
    # one host without a verdict that holds (no check_all, an earlier stage acted, another digest): asked per host
    for more in ({"gates": {"n1": _gates(**ALL)}}, {"acted": {"n2": ["engine"]}},
                 {"digest": {"n1": "sha256:serve", "n2": "sha256:other"}}):
        got = _all(**more)
        assert got["converged"] is False and got["differs"] == ["n2: no verdict of this run's check_all holds (the node is asked)"]
    assert _all(hosts=())["converged"] is False  # no host: nothing to conclude


def test_prefetched_all_refuses_malformed_arguments():
    with pytest.raises(ctl.StageGateError, match="hosts: expected a list"):
        ctl.prefetched_all("serve", "n1", {}, {}, {})
    with pytest.raises(ctl.StageGateError, match="acted: expected"):
        ctl.prefetched_all("serve", ["n1"], {}, ["engine"], {})
    with pytest.raises(ctl.StageGateError, match="acted: unknown stage"):
        ctl.prefetched_all("serve", ["n1"], {}, {"n1": ["verify"]}, {})
