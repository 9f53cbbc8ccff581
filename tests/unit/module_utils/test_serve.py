import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from llmb import procnet
from llmb.serve import (
    connected_to,
    container_verdict,
    established_peers,
    parse_systemctl_show,
    systemd_exec,
    unit_verdict,
)


def systemd_split(line: str) -> list[str]:
    """How systemd splits ExecStart= for our quoting subset: double quotes, \\ escapes, %% and $$."""
    words = shlex.split(line, posix=True)
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


@pytest.mark.parametrize("argv", [
    ["/opt/v/bin/vllm", "serve", "/models/K2", "--port", "8000"],
    ["/opt/v/bin/vllm", "serve", "--hf-overrides", '{"a": "b c"}', "--x", "100%"],
    ["/usr/bin/mpirun", "-x", "PATH=$PATH", "--mca", "plm_rsh_args", "-p 2233 -o BatchMode=yes"],
    ["/bin/echo", 'back\\slash "quoted"'],
])
def test_systemd_exec_round_trips(argv):
    assert systemd_split(systemd_exec(argv)) == argv


def test_systemd_exec_escapes_specifiers_and_variables():
    line = systemd_exec(["/bin/x", "100%", "$HOME"])
    assert "100%%" in line and "$$HOME" in line


def test_systemd_exec_requires_absolute_path():
    with pytest.raises(ValueError, match="absolute path"):
        systemd_exec(["vllm", "serve"])
    with pytest.raises(ValueError):
        systemd_exec([])


# docker run argv and the spec hash: tests/unit/module_utils/test_container.py


def test_unit_verdicts():
    show = "ActiveState=failed\nSubState=failed\nNRestarts=0\nExecMainStatus=2\nResult=exit-code\n"
    props = parse_systemctl_show(show)
    assert "exit status 2" in unit_verdict(props, 0)
    assert unit_verdict({"ActiveState": "active", "SubState": "running", "NRestarts": "0"}, 0) is None
    assert "restarted" in unit_verdict({"ActiveState": "activating", "SubState": "auto-restart",
                                        "NRestarts": "1", "ExecMainStatus": "1"}, 0)
    assert unit_verdict({"ActiveState": "active", "SubState": "running", "NRestarts": "3"}, 3) is None
    assert unit_verdict({"ActiveState": "inactive", "SubState": "dead"}, 0) == "unit is not running (inactive)"


def test_container_verdicts():
    assert "exit code 1" in container_verdict({"Status": "exited", "ExitCode": 1})
    assert container_verdict({"Status": "running", "Restarting": False}) is None
    assert "restarting" in container_verdict({"Status": "restarting", "Restarting": True, "ExitCode": 3})


# ------------------------------------------------------------------ "connected" readiness (/proc)


def test_hex_addresses_of_proc_net_tcp():
    assert procnet.addr("0100007F:18EB") == ("127.0.0.1", 6379)
    assert procnet.addr("0B001EAC:1F40") == ("172.30.0.11", 8000)
    assert procnet.addr("00000000000000000000000001000000:0016") == ("::1", 22)
    assert procnet.addr("0000000000000000FFFF00000B001EAC:18EB") == ("172.30.0.11", 6379)  # v4-mapped


def test_established_peers_keeps_only_established():
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0C001EAC:9C40 0B001EAC:18EB 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
        "   2: 0C001EAC:9C41 0B001EAC:18EB 06 00000000:00000000 00:00000000 00000000     0        0 333 1\n"
    )
    assert established_peers([table]) == {222: ("172.30.0.11", 6379)}


def test_connected_to_sees_a_real_connection_of_a_child_process():
    """A child process connects to a listener here; connected_to finds it from the parent's pid."""

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    child = subprocess.Popen(
        [sys.executable, "-c",
         f"import socket,time; s=socket.create_connection(('127.0.0.1',{port})); print('up', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout.readline().strip() == "up"
        conn, _ = srv.accept()
        ok, held = connected_to("/proc", [os.getpid()], "127.0.0.1", port)
        assert ok and f"127.0.0.1:{port}" in held
        ok, _ = connected_to("/proc", [os.getpid()], "127.0.0.1", other.getsockname()[1])
        assert not ok  # nothing connects there
        ok, held = connected_to("/proc", [child.pid + 10_000_000], "127.0.0.1", port)
        assert not ok and held == []  # a pid that does not exist holds nothing
        conn.close()
    finally:
        child.kill()
        child.wait()
        srv.close()
        other.close()


def test_ray_worker_waits_until_joined_the_head():
    """The worker's readiness is its connection to the head's GCS port (not just 'started')."""

    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, str(root / "scripts/launch-plan"), "-i", "inventories/sim", "--format", "json"],
                         capture_output=True, text=True, cwd=root, check=True)
    plan = {hp["host"]: hp for hp in json.loads(out.stdout)}
    (worker,) = [s for s in plan["node2"]["services"] if s["role"] == "ray-worker"]
    assert worker["ready"]["type"] == "connected"
    assert (worker["ready"]["host"], worker["ready"]["port"]) == (plan["node1"]["address"], 6379)


def test_engine_error_line_picks_the_engines_own_error():
    from llmb.serve import engine_error_line

    # the engine double's start-up failures (tests/enginesim), as the runner's log keeps them
    double = (
        "INFO 11-23 23:36:04 [api_server.py:1885] vLLM API server version 0.19.1 (vllm, enginesim)\n"
        "ERROR 11-23 23:36:04 [parallel.py:1] ValueError: World size (2) is larger than the number of "
        "available GPUs (1) in this node.\n"
        "INFO 11-23 23:36:05 [launcher.py:1] vllm serve: shutting down\n"
    )
    assert engine_error_line(double) == ("ValueError: World size (2) is larger than the number of available "
                                         "GPUs (1) in this node.")
    usage = "usage: vllm serve [model_tag] [options]\nvllm: error: unrecognized arguments: --max-num-seqz\n"
    assert engine_error_line(usage) == "vllm: error: unrecognized arguments: --max-num-seqz"
    # a traceback: its last exception line wins, not the lines that only mention an exception
    tb = (
        "(EngineCore_DP0 pid=77) ValueError: No available memory for the cache blocks.\n"
        "Traceback (most recent call last):\n"
        '  File "/x/vllm/engine/core.py", line 1, in run\n'
        "    raise RuntimeError('Engine core initialization failed. See root cause above.')\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
        "INFO no Exception handler installed\n"
    )
    assert engine_error_line(tb) == "ValueError: No available memory for the cache blocks."
    assert engine_error_line(tb.split("\n", 1)[1]) == (
        "RuntimeError: Engine core initialization failed. See root cause above.")
    assert engine_error_line("INFO all good\nINFO Started server process\n") is None


def test_engine_error_line_on_real_vllm_0_23_start_failures():
    """The last lines of vLLM 0.23.0's own log on the lent H100 (docs/examples/serve-real-h100/faults/)."""
    from llmb.serve import engine_error_line

    wrong_tp = (
        "(APIServer pid=2669)     s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)\n"
        "(APIServer pid=2669) pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\n"
        "(APIServer pid=2669)   Value error, World size (2) is larger than the number of available GPUs (1) in "
        "this node. If this is intentional and you are using:\n"
        "(APIServer pid=2669) - ray, set '--distributed-executor-backend ray'.\n"
        "(APIServer pid=2669) - multiprocessing, set '--nnodes' appropriately. [type=value_error, input_value="
        "ArgsKwargs((), {'pipeline...'numa_bind_cpus': None}), input_type=ArgsKwargs]\n"
        "(APIServer pid=2669)     For further information visit https://errors.pydantic.dev/2.14/v/value_error\n"
    )
    assert engine_error_line(wrong_tp) == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig: World size (2) is "
        "larger than the number of available GPUs (1) in this node. If this is intentional and you are using:")
    wrong_flag = (
        "usage: vllm [-h] [-v]\n"
        "            {chat,complete,serve,launch,bench,collect-env,run-batch} ...\n"
        "vllm: error: unrecognized arguments: --max-num-seqz 64\n"
    )
    assert engine_error_line(wrong_flag) == "vllm: error: unrecognized arguments: --max-num-seqz 64"


MULTINODE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "serve-real-multinode"


def test_engine_error_line_finds_the_root_cause_above_vllm_0_26s_wrapper():
    """vLLM 0.26.0 on the lent 4x H200 (docs/examples/serve-real-multinode/): the API process ends with
    "See root cause above."; the cause is the engine core's "EngineCore failed to start." traceback."""
    from llmb.serve import engine_error_line, is_wrapper

    # fault wrong-master: rank 0 cannot bind its message queue to the planted address
    wrong_master = (MULTINODE / "faults/wrong-master/engine-node1-llmb-vllm.log").read_text()
    assert engine_error_line(wrong_master) == (
        "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.99.0.9:41811')")
    # the last 40 lines (what the readiness wait shows) hold only the wrapper
    tail = "\n".join(wrong_master.splitlines()[-40:])
    assert is_wrapper(engine_error_line(tail))
    # shape b, first attempt: the custom all-reduce's IndexError on the Ray worker, then pages of Ray
    # actor clean-up errors (ActorHandleNotFoundError) between it and the wrapper
    ray = (MULTINODE / "nodes-b-first/engine-node1-llmb-vllm.log").read_text()
    assert "ActorHandleNotFoundError" in ray
    assert engine_error_line(ray) == (
        "IndexError: device_id 2 is out of range for assigned_physical_gpu_ids [2, 3] (2 devices assigned)")
    # a healthy start has none
    assert engine_error_line((MULTINODE / "nodes-a/engine-node1-llmb-vllm.log").read_text()) is None


def test_readiness_reads_further_back_when_the_tail_holds_only_the_wrapper():
    """llmb_service_ready's failure message: the 40-line tail as before, the engine error from further back."""
    from llmb.ready import Watch

    log = (MULTINODE / "faults/wrong-master/engine-node1-llmb-vllm.log").read_text().splitlines()
    asked = []

    def run(argv):
        if argv[0] == "journalctl":
            n = int(argv[argv.index("-n") + 1])
            asked.append(n)
            return 0, "\n".join(log[-n:]) + "\n", ""
        return 0, "ActiveState=failed\nSubState=failed\nNRestarts=0\nExecMainStatus=1\nResult=exit-code\n", ""

    nr = Watch(run, "llmb-vllm", "systemd").not_ready("unit failed", 51.0, "exited")
    assert nr.engine_error == "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.99.0.9:41811')"
    assert len(nr.logs.splitlines()) == 40 and asked == [40, Watch.CAUSE_LINES]
    # a tail that names the error itself: no second read
    asked.clear()
    log = ["INFO starting", "ERROR x [core.py:1] ValueError: bad value"]
    assert Watch(run, "llmb-vllm", "systemd").not_ready("unit failed", 1.0, "exited").engine_error == (
        "ValueError: bad value")
    assert asked == [40]


def _unit_run(states: dict, logs: dict):
    """A `run` answering systemctl show / journalctl -u per unit from states / logs (the node's view)."""

    def run(argv):
        name = argv[2] if argv[:2] == ["systemctl", "show"] else argv[argv.index("-u") + 1]
        if argv[0] == "journalctl":
            n = int(argv[argv.index("-n") + 1])
            return 0, "\n".join(logs.get(name, [])[-n:]) + "\n", ""
        return 0, states[name], ""

    return run


RUNNING = "ActiveState=active\nSubState=running\nNRestarts=0\nExecMainStatus=0\nResult=success\nMainPID=17110\n"
KILLED = "ActiveState=failed\nSubState=failed\nNRestarts=0\nExecMainStatus=137\nResult=signal\nMainPID=0\n"


def test_group_check_sees_the_lost_node_that_rank_0s_health_does_not():
    """The real kill-rank run (vLLM 0.26.0, TP 4 over 2 nodes): node 2's engine killed, node 1's API
    still logging /health 200. One look at every member: node 1 alive, node 2 lost; the verdict
    names node 2 and the service, and is not whole although rank 0 answers."""
    from llmb.ready import Watch, alive
    from llmb.serve import group_verdict

    kr = MULTINODE / "faults/kill-rank"
    node1_log = (kr / "killed-node1-llmb-vllm.log").read_text().splitlines()
    node2_log = (kr / "killed-node2-llmb-vllm.log").read_text().splitlines()
    assert '"GET /health HTTP/1.1" 200 OK' in node1_log[-1]  # what rank 0's API said after the kill
    looks = {
        "node1": alive(Watch(_unit_run({"llmb-vllm": RUNNING}, {"llmb-vllm": node1_log}), "llmb-vllm", "systemd")),
        "node2": alive(Watch(_unit_run({"llmb-vllm": KILLED}, {"llmb-vllm": node2_log}), "llmb-vllm", "systemd")),
    }
    assert looks["node1"] == {"alive": True, "why": None, "cause": None, "engine_error": None}
    assert looks["node2"]["alive"] is False and looks["node2"]["cause"] == "exited"
    assert looks["node2"]["why"] == "unit failed (exit status 137, signal)"
    members = [{"host": h, "name": "llmb-vllm", "role": "vllm" if h == "node1" else "vllm-headless", **look}
               for h, look in looks.items()]
    v = group_verdict(members)
    assert v["whole"] is False and v["services"] == 2 and [m["host"] for m in v["lost"]] == ["node2"]
    assert v["msg"].startswith("the serving group is not whole: 1 of 2 services lost - node2: llmb-vllm "
                               "(vllm-headless): unit failed (exit status 137, signal)")
    # the same group with node 2 running is whole; no member looked at is never whole
    members[1].update(alive=True, why=None)
    assert group_verdict(members) == {"whole": True, "services": 2, "lost": [],
                                      "msg": "the serving group is whole: 2 services running on 2 nodes"}
    assert group_verdict([])["whole"] is False


def test_group_check_names_a_restarting_member_and_its_engine_error():
    """A member systemd is restarting (Restart=) is lost for the group as well, with its engine's error."""
    from llmb.ready import Watch, alive

    restarting = "ActiveState=activating\nSubState=auto-restart\nNRestarts=3\nExecMainStatus=1\nResult=exit-code\n"
    log = ["INFO starting", "ERROR 11-27 [core.py:1] torch.distributed.DistNetworkError: connect to 10.99.0.1:29600 failed"]
    look = alive(Watch(_unit_run({"llmb-vllm": restarting}, {"llmb-vllm": log}), "llmb-vllm", "systemd"))
    assert look["alive"] is False and look["cause"] == "restarting"
    assert look["engine_error"] == "torch.distributed.DistNetworkError: connect to 10.99.0.1:29600 failed"


def test_group_members_filter_reads_every_hosts_look():
    """The role's run_once verdict gathers each host's registered looks (a skipped item adds none)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "plugins" / "filter"))
    from llmb_serve import FilterModule

    f = FilterModule().filters()
    hv = {"node1": {"__serve_alive": {"results": [{"item": {"name": "llmb-vllm", "role": "vllm"}, "alive": True}]}},
          "node2": {"__serve_alive": {"results": [
              {"item": {"name": "llmb-vllm", "role": "vllm-headless"}, "alive": False,
               "why": "unit failed (exit status 137, signal)", "engine_error": None},
              {"item": {"name": "other"}, "skipped": True}]}}}
    members = f["llmb_group_members"](hv, ["node1", "node2", "node3"])
    assert [(m["host"], m["name"], m["alive"]) for m in members] == [("node1", "llmb-vllm", True),
                                                                     ("node2", "llmb-vllm", False)]
    v = f["llmb_group_verdict"](members)
    assert not v["whole"] and "node2: llmb-vllm (vllm-headless): unit failed" in v["msg"]


@pytest.mark.parametrize("kind,answer,expect", [
    # systemd: the unit's main process started 250 s ago on CLOCK_MONOTONIC (microseconds)
    ("systemd", lambda now_mono, now_wall: str(int((now_mono - 250.0) * 1e6)), 250.0),
    # a container: Docker's StartedAt, RFC 3339 with nanoseconds, 90.5 s ago
    ("container", lambda now_mono, now_wall: __import__("datetime").datetime.fromtimestamp(
        now_wall - 90.5, __import__("datetime").timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z", 90.5),
    ("systemd", lambda now_mono, now_wall: "0", None),  # never started: systemd says 0
    ("container", lambda now_mono, now_wall: "0001-01-01T00:00:00Z", None),  # Docker's zero time
    ("systemd", lambda now_mono, now_wall: "n/a", None),
])
def test_healthy_says_the_time_since_the_services_start_not_only_the_wait(kind, answer, expect):
    """A group's rank 0 is started first and its API is waited for last (after every level): the wait alone
    left out the first node's lead (75-114 s of the 255 s cold start on 2x H200, vLLM 0.26.0). The result
    carries the time since the unit's (or container's) start beside the wait."""
    import time as _t

    from enginesim.api import ApiConfig, serving
    from llmb.ready import Watch, wait

    with serving(ApiConfig(engine="vllm", version="0.26.0", served_names=["kimi-k2"], model_path="/m")) as v1:
        stamp = answer(_t.monotonic(), _t.time())

        def run(argv):
            if argv[:2] == ["systemctl", "show"] and "ExecMainStartTimestampMonotonic" in argv:
                return 0, stamp + "\n", ""
            if argv[:2] == ["docker", "inspect"] and "{{.State.StartedAt}}" in argv:
                return 0, stamp + "\n", ""
            if argv[:2] == ["docker", "inspect"]:
                return 0, "true running 0 0\n", ""
            return 0, RUNNING, ""

        w = Watch(run, "llmb-vllm", kind)
        w.dead = lambda: None
        url = v1.removesuffix("/v1") + "/health"
        got = wait(w, None, {"url": url, "expect_model": "kimi-k2"}, timeout_s=5, interval_s=1)
    assert got["models"] == ["kimi-k2"] and got["waited_s"] < 5
    if expect is None:
        assert "since_start_s" not in got
    else:
        assert expect <= got["since_start_s"] < expect + 5


def test_an_exec_service_has_no_start_of_its_own():
    from llmb.ready import Watch

    def run(argv):
        raise AssertionError(f"asked {argv}: an exec service runs inside another's container")

    w = Watch.__new__(Watch)
    w.run, w.name, w.kind, w.exec_in, w.log_lines = run, "sglang-router", "exec", "llmb-sglang", 40
    assert w.started_s_ago() is None


def test_the_device_runners_systemctl_answers_the_start_on_the_monotonic_clock(tmp_path):
    """tests/device/engine-runner stands in for systemd on the GPU machine: its `show` gives the same
    property, from the time it wrote at the start."""
    import time as _t

    runner = Path(__file__).resolve().parents[3] / "tests/device/engine-runner"
    (tmp_path / "llmb-vllm.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "llmb-vllm.started").write_text(f"{_t.time() - 42.0}\n")
    out = subprocess.run([sys.executable, str(runner), "show", "llmb-vllm", "-p", "ExecMainStartTimestampMonotonic",
                          "--value", "--state", str(tmp_path)], capture_output=True, text=True, check=True).stdout
    assert 42.0 <= _t.monotonic() - int(out) / 1e6 < 47.0
