"""Closed by default, over every sample inventory's plan: no listener binds every interface apart from
the API (the two an engine binds everywhere with no option, Ray's GCS and the torch.distributed store,
are confined by the llmb-bindto preload); the API key's variable (never its value) reaches the plan;
the port check's targets are the other hosts' plan ports."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from llmb import ports
from llmbctl import deployment as D
from llmbctl import layout
from llmbctl.planner import PlanError, plan_inventory
from planner_helpers import load_inventory
from test_planner_data import SAMPLES

# the listeners an engine binds to every interface with no option: confined by the preload
PRELOADED = {p for p, rule in ports.BINDS.items() if "preload" in rule}


def test_the_engines_without_a_bind_option_are_the_ray_gcs_and_the_torch_store():
    assert PRELOADED == {"ray-gcs", "dist-init", "vllm-master"}  # the last: vLLM --master-port


@pytest.mark.parametrize("name", SAMPLES)
def test_no_listener_of_a_sample_plan_binds_every_interface_apart_from_the_api(name):
    doc = D.resolve(*load_inventory(name))
    assert doc["planned"], doc["problems"]
    found = ports.listeners(doc)
    assert found, name
    for lst in found:
        if lst["purpose"] == "api":
            continue
        assert lst["bind"] not in ports.ANY, lst
        assert lst["bind"] == lst["address"], lst  # the node's own cluster address
        if lst["purpose"] in PRELOADED:
            assert lst["how"].startswith("llmb-bindto preload"), lst


def _preloaded_services(doc):
    for host, entry in doc["hosts"].items():
        for svc in entry["plan"]["services"]:
            if any(p["purpose"] in PRELOADED for p in svc.get("ports") or []):
                yield host, entry, svc


@pytest.mark.parametrize("name", ["h800", "h200-sglang", "h200-4p12d", "mi300x-2x8"])
def test_a_preloaded_service_gets_the_library_its_address_and_only_its_unbindable_ports(name):
    doc = D.resolve(*load_inventory(name))
    found = list(_preloaded_services(doc))
    assert found, name
    for _host, entry, svc in found:
        env = svc["env"]
        assert env["LD_PRELOAD"].split()[0] == layout.BINDTO
        assert env["LLMB_BIND_ADDRESS"] == entry["address"]
        want = sorted(p["port"] for p in svc["ports"] if p["purpose"] in PRELOADED)
        assert env["LLMB_BIND_PORTS"] == ",".join(map(str, want))  # never the API's port
        if svc["kind"] == "container":
            assert f"{layout.BINDTO}:{layout.BINDTO}:ro" in svc["mounts"]
    # services with no such listener run without it (workers, headless ranks)
    others = [s for e in doc["hosts"].values() for s in e["plan"]["services"]
              if not any(p["purpose"] in PRELOADED for p in s.get("ports") or [])]
    assert others and all("LLMB_BIND_PORTS" not in (s.get("env") or {}) for s in others)


def test_the_inventory_may_leave_them_on_every_interface_and_the_plan_says_why():
    hostvars, groups = load_inventory("h800")
    for hv in hostvars.values():
        hv["llmb_confine_listeners"] = False
    doc = D.resolve(hostvars, groups)
    (gcs,) = [lst for lst in ports.listeners(doc) if lst["purpose"] == "ray-gcs"]
    assert gcs["bind"] == "0.0.0.0"
    assert "llmb_confine_listeners is off" in gcs["how"] and "no bind option" in gcs["how"]
    assert not list(svc for _, _, svc in _preloaded_services(doc) if "LLMB_BIND_PORTS" in svc["env"])


def test_an_ld_preload_of_the_inventory_stays_after_the_library():
    hostvars, groups = load_inventory("h800")
    for hv in hostvars.values():
        hv["llmb_engine_env"] = {**(hv.get("llmb_engine_env") or {}), "LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}
    doc = D.resolve(hostvars, groups)
    (_, _, svc), *_ = list(_preloaded_services(doc))
    assert svc["env"]["LD_PRELOAD"] == f"{layout.BINDTO} /usr/lib/libjemalloc.so.2"


def test_every_port_purpose_of_the_samples_is_in_the_docs():
    text = (Path(__file__).resolve().parents[4] / "docs" / "ports.md").read_text()
    purposes = {lst["purpose"] for n in SAMPLES for lst in ports.listeners(D.resolve(*load_inventory(n)))}
    assert purposes <= set(ports.BINDS)
    for purpose in ports.BINDS:
        assert f"`{purpose}`" in text, purpose


def test_a_port_purpose_nobody_classified_is_refused_by_name():
    svc = {"name": "llmb-x", "argv": ["/x"], "ports": [{"port": 1, "purpose": "mystery"}]}
    doc = {"hosts": {"a": {"address": "10.0.0.1", "plan": {"services": [svc]}}}}
    with pytest.raises(ports.PortsError, match="llmb-x.*'mystery'.*BINDS"):
        ports.listeners(doc)


def test_the_ray_dashboard_is_bound_to_the_heads_cluster_address():
    doc = D.resolve(*load_inventory("h800"))
    (dash,) = [lst for lst in ports.listeners(doc) if lst["purpose"] == "ray-dashboard"]
    head = doc["hosts"][dash["host"]]["address"]
    assert dash["bind"] == head and dash["how"] == "--dashboard-host"


def test_targets_are_the_other_hosts_ports_once_each():
    doc = D.resolve(*load_inventory("h800-dp-ep"))
    hosts = sorted(doc["hosts"])
    assert ports.targets(doc, hosts[1])  # the headless rank reaches rank 0's API and DP RPC ports
    for host in hosts:
        tg = ports.targets(doc, host)
        assert all(t["host"] != host for t in tg)
        others = {(lst["address"], lst["port"]) for lst in ports.listeners(doc) if lst["host"] != host}
        assert {(t["address"], t["port"]) for t in tg} == others
    own = ports.own_listeners(doc, hosts[0])
    assert {lst["purpose"] for lst in own} >= {"api", "dp-rpc"}


# --- the API key ---------------------------------------------------------------------------------
def _with_key(name: str, key="sk-secret-value-1"):
    hv, groups = load_inventory(name)
    for h in hv.values():
        h["llmb_api_key"] = key
    return hv, groups


def test_an_api_key_gives_the_api_its_variable_and_env_name_and_never_the_value():
    hv, groups = _with_key("h800-dp-ep")
    planned = plan_inventory(hv, groups)
    text = json.dumps(planned.to_list())
    assert "sk-secret-value-1" not in text
    apis = [s for p in planned.to_list() for s in p["services"] if s["api"]]
    assert apis and all(s["api"]["api_key"] == {"var": "llmb_api_key", "env": "VLLM_API_KEY"} for s in apis)
    assert all("--api-key" not in s["argv"] for p in planned.to_list() for s in p["services"])


def test_without_a_key_the_api_block_has_none():
    planned = plan_inventory(*load_inventory("h800-dp-ep"))
    assert all("api_key" not in (s["api"] or {}) for p in planned.to_list() for s in p["services"])


@pytest.mark.parametrize("name", ["h200-sglang", "h200-trtllm"])
def test_a_key_for_an_engine_that_cannot_read_it_from_the_environment_is_refused(name):
    with pytest.raises(PlanError) as err:
        plan_inventory(*_with_key(name))
    (problem,) = [p for p in err.value.problems if p.check == "exposure"]
    assert "llmb_api_key" in problem.message and "sk-secret" not in problem.format()


def test_the_api_key_flag_is_planner_owned():
    hv, groups = load_inventory("h100")
    for h in hv.values():
        h["llmb_engine_args"] = {"--api-key": "x"}
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups)
    assert any("--api-key" in p.message for p in err.value.problems)


# --- the check itself, on this machine's loopback ------------------------------------------------
def _lst(port, service="llmb-ray", purpose="ray-gcs", host="node1"):
    return {"host": host, "address": "127.0.0.1", "service": service, "kind": "systemd", "purpose": purpose,
            "port": port}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stand_in_listeners_answer_until_stopped(tmp_path):
    port = _free_port()
    pidfile = str(tmp_path / "pid")
    out = ports.hold_listeners([_lst(port)], 30, pidfile)
    try:
        assert [o["port"] for o in out["opened"]] == [port] and not out["taken"]
        (rec,) = ports.probe("node2", [_lst(port)], 2)
        assert rec["ok"], rec
    finally:
        assert ports.stop_listeners(pidfile)
    (rec,) = ports.probe("node2", [_lst(port)], 2)
    assert not rec["ok"]
    assert rec["message"].startswith(f"node2 -> node1 127.0.0.1:{port} (llmb-ray ray-gcs): connection refused")


def _listen_step(host: str, listeners: list, run_dir: str) -> dict:
    """llmb_port_check mode=listen as the module runs it: stop a left-over stand-in, then hold."""
    pidfile = ports.pidfile_for(host, run_dir)
    ports.stop_listeners(pidfile)
    return ports.hold_listeners(listeners, 30, pidfile)


def test_inventory_hosts_sharing_a_filesystem_keep_their_own_stand_ins(tmp_path):
    """Two emulated nodes on one machine (one /run): node 2, with no port of its own, runs its listen
    step after node 1's. With one shared pidfile it stopped node 1's stand-ins and the probe found
    node 1's ports refused (the serve stage run again on the 4x H200, faults/kill-rank/serve-again.log)."""
    port = _free_port()
    run_dir = str(tmp_path)
    assert ports.pidfile_for("node1", run_dir) != ports.pidfile_for("node2", run_dir)
    assert ports.pidfile_for("a/../b c", run_dir) == f"{run_dir}/llmb-port-check-a_.._b_c.pid"
    out = _listen_step("node1", [_lst(port)], run_dir)
    try:
        assert [o["port"] for o in out["opened"]] == [port]
        _listen_step("node2", [], run_dir)
        (rec,) = ports.probe("node2", [_lst(port)], 2)
        assert rec["ok"], rec
    finally:
        assert ports.stop_listeners(ports.pidfile_for("node1", run_dir))


def test_after_the_stand_in_a_service_binds_its_port_without_reuseaddr(tmp_path):
    """The probe connected to the stand-in; once it is stopped the service binds the port at once
    (every interface, no SO_REUSEADDR: no connection of the stand-in's left in TIME_WAIT)."""
    port = _free_port()
    pidfile = str(tmp_path / "pid")
    ports.hold_listeners([_lst(port)], 30, pidfile)
    try:
        (rec,) = ports.probe("node2", [_lst(port)], 2)
        assert rec["ok"], rec
        # a peer that lets the stand-in close first (the close order of a real probe is a race)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            try:
                assert c.recv(1) == b""
            except ConnectionResetError:
                pass
    finally:
        assert ports.stop_listeners(pidfile)
    svc = socket.socket()
    try:
        svc.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        svc.bind(("0.0.0.0", port))
        svc.listen(1)
    finally:
        svc.close()


def test_a_port_held_by_another_process_is_reported_taken(tmp_path):
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    port = squatter.getsockname()[1]
    try:
        out = ports.hold_listeners([_lst(port)], 30, str(tmp_path / "pid"))
        assert not out["opened"] and out["pid"] is None
        (taken,) = out["taken"]
        msg = ports.taken_message("node1", taken)
        assert f"node1: port {port} (llmb-ray ray-gcs) on 127.0.0.1 is taken by pid" in msg
    finally:
        squatter.close()


def test_failures_name_every_pair_and_taken_port():
    import sys
    from importlib import import_module

    sys.path.insert(0, str(Path(ports.__file__).resolve().parents[2] / "filter"))
    f = import_module("llmb_ports")
    probes = [{"results": [{"ok": True}, {"ok": False, "message": "node2 -> node1 10.0.0.1:6379 (llmb-ray ray-gcs): x"}]}]
    listens = [{"taken": [dict(_lst(8000, "llmb-vllm", "api"), error="Address in use",
                               holder={"pid": 7, "comm": "nginx", "unit": "nginx.service"})]}]
    lines = f.llmb_port_failures(probes, listens)
    assert lines == ["node1: port 8000 (llmb-vllm api) on 127.0.0.1 is taken by pid 7 (nginx, nginx.service): "
                     "Address in use; stop it or choose another port in the inventory",
                     "node2 -> node1 10.0.0.1:6379 (llmb-ray ray-gcs): x"]


def test_the_flag_value_is_the_last_given():
    assert ports.flag_value(["x", "--host", "a", "--host=b"], "--host") == "b"
    assert ports.flag_value(["x", "--hostname", "a"], "--host") is None


def test_a_port_of_a_service_running_or_starting_gets_no_stand_in_and_is_not_a_target(tmp_path):
    port = _free_port()
    out = ports.hold_listeners([_lst(port)], 30, str(tmp_path / "pid"), state=lambda name: "activating")
    assert out["starting"] and not out["opened"] and out["pid"] is None
    doc = {"hosts": {
        "node1": {"address": "10.0.0.1", "plan": {"services": [
            {"name": "llmb-ray", "kind": "systemd", "argv": ["/x"], "ports": [{"port": 6379, "purpose": "ray-gcs"}]},
            {"name": "llmb-vllm", "kind": "systemd", "argv": ["/x"], "ports": [{"port": 8000, "purpose": "api"}]}]}},
        "node2": {"address": "10.0.0.2", "plan": {"services": []}}}}
    listening = [{"host": "node1", "opened": [{"port": 6379}], "in_use": [], "starting": [{"port": 8000}]}]
    assert [t["port"] for t in ports.targets(doc, "node2", listening)] == [6379]
    assert [t["port"] for t in ports.targets(doc, "node2")] == [6379, 8000]


@pytest.mark.parametrize("cgroup, unit", [
    # docker's systemd cgroup driver
    ("0::/system.slice/docker-" + "a" * 64 + ".scope\n", "docker-" + "a" * 64 + ".scope"),
    # docker's cgroupfs driver (v1 lines), and a --cgroup-parent (the simulated nodes' nested dockerd)
    ("12:perf_event:/docker/" + "b" * 64 + "\n1:cpu:/docker/" + "b" * 64 + "\n", "docker-" + "b" * 64 + ".scope"),
    ("0::/llmb-sim-nested/" + "c" * 64 + "\n", "docker-" + "c" * 64 + ".scope"),
    ("0::/system.slice/llmb-ray.service\n", "llmb-ray.service"),
    ("0::/user.slice/user-0.slice/session-3.scope\n", "session-3.scope"),
    ("0::/\n", None),
])
def test_the_unit_of_a_port_holder_names_containers_of_every_cgroup_layout(tmp_path, cgroup, unit):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(cgroup)
    assert ports._unit(str(tmp_path), 42) == unit
    container = {"service": "vllm-ascend", "kind": "container"}
    assert ports.owned_by(container, {"pid": 42, "unit": unit}) is bool(unit and unit.startswith("docker-"))


@pytest.mark.parametrize("status, where", [("restarting", "starting"), ("running", "in_use"), ("", "taken"),
                                           ("exited", "taken")])
def test_a_port_whose_container_is_live_and_holder_unseen_is_its_own(tmp_path, monkeypatch, status, where):
    """The plan's container in docker's restart loop holds its port between two starts; /proc shows no
    holder. Running: the service's own port (probed); restarting: not probed (it comes and goes until
    the serve stage replaces the container); no such container: taken."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    port = squatter.getsockname()[1]
    monkeypatch.setattr(ports, "holder", lambda port: {"pid": None, "comm": None, "unit": None})
    lst = dict(_lst(port, service="vllm-ascend", purpose="api"), kind="container")
    try:
        out = ports.hold_listeners([lst], 30, str(tmp_path / "pid"), ctr_state=lambda name: status)
    finally:
        squatter.close()
    assert [r["port"] for r in out[where]] == [port], out
    assert sum(len(out[k]) for k in ("opened", "in_use", "taken", "starting")) == 1, out
    # a holder that can be seen and is not the container stays taken whatever the container does
    assert not ports.owned_by(lst, {"pid": 7, "comm": "nginx", "unit": "nginx.service"})


def test_a_free_port_of_a_live_container_gets_no_stand_in(tmp_path):
    port = _free_port()
    lst = dict(_lst(port, service="vllm-ascend", purpose="api"), kind="container")
    out = ports.hold_listeners([lst], 30, str(tmp_path / "pid"), ctr_state=lambda name: "running")
    assert out["starting"] == [lst] and not out["opened"] and out["pid"] is None


def test_a_connection_reset_after_it_opened_is_reachable(monkeypatch):
    def reset(*_a, **_k):
        raise ConnectionResetError(104, "Connection reset by peer")
    monkeypatch.setattr(ports.socket, "create_connection", reset)
    assert ports.connect("10.0.0.1", 13345, 1) is None


def test_the_port_of_an_exec_unit_is_held_by_a_process_of_its_container():
    """vllm serve runs in the Ray head's container through a unit of kind exec (docker exec): its API
    port's holder is in the container's scope, not in the unit's cgroup."""
    svc = {"service": "kimi-K2-serve", "kind": "exec"}
    assert ports.owned_by(svc, {"pid": 4217, "comm": "vllm", "unit": "docker-" + "5" * 64 + ".scope"})
    assert not ports.owned_by(svc, {"pid": 7, "comm": "nginx", "unit": "nginx.service"})
    assert ports.live_state(dict(svc, port=8000), state=lambda name: "active") == "up"


def test_a_port_with_only_time_wait_connections_gets_a_stand_in(tmp_path):
    """The service's earlier connections (health checks, clients) in TIME_WAIT on its port: nothing
    listens, so the port is free for the check (it was reported taken by a holder nobody could see)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    conn.close()  # the server side closes first: TIME_WAIT on 127.0.0.1:port
    cli.recv(1)
    cli.close()
    srv.close()
    pidfile = str(tmp_path / "pid")
    out = ports.hold_listeners([_lst(port)], 30, pidfile)
    try:
        assert [o["port"] for o in out["opened"]] == [port] and not out["taken"], out
    finally:
        ports.stop_listeners(pidfile)


def test_a_connection_reset_after_the_handshake_counts_as_reached(monkeypatch):
    """The stand-in resets what it accepts; on a loaded node the reset can reach the prober before its
    connect() returns (ECONNRESET): the port answered. A refusal (RST to the SYN) stays a failure."""
    def reset(*_a, **_k):
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(ports.socket, "create_connection", reset)
    assert ports.connect("192.0.2.1", 8000, 1) is None

    def refused(*_a, **_k):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(ports.socket, "create_connection", refused)
    assert ports.connect("192.0.2.1", 8000, 1).startswith("connection refused")


def test_time_wait_left_by_the_services_own_connections_is_not_a_taken_port(tmp_path):
    """A served port keeps closed connections in TIME_WAIT for a minute (an HTTP server closes first);
    a later run whose service is down (restarting) must still get its stand-in there, as the service
    itself would bind it (SO_REUSEADDR), not report the port taken by 'a process this check cannot see'."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        conn, _ = srv.accept()
        conn.close()  # the server side closes first: its end goes to TIME_WAIT
        assert c.recv(1) == b""
    srv.close()
    pidfile = str(tmp_path / "pid")
    out = ports.hold_listeners([_lst(port)], 30, pidfile)
    try:
        assert not out["taken"], out["taken"]
        assert [o["port"] for o in out["opened"]] == [port]
    finally:
        ports.stop_listeners(pidfile)
