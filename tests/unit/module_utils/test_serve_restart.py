"""llmb.serve: which units restart after containers were replaced, and the not-joined message."""

from __future__ import annotations

from llmb.serve import UNIT_KINDS, not_joined_text, replaced_containers, unit_state

API = {"name": "kimi-K2-serve", "kind": "exec", "exec_in": "kimi-K2",
       "depends_on": ["mi300x-01/kimi-K2", "mi300x-02/kimi-K2"]}


def test_replaced_containers_from_module_results():
    results = [
        {"item": "kimi-K2", "changed": True, "action": "replace"},
        {"item": "idle", "changed": False, "action": "none"},
        {"item": "fresh", "changed": True, "action": "create"},
        {"item": "stopped", "changed": True, "action": "start"},
        {"item": "gone", "changed": True, "action": "remove"},
        {"item": "skipped", "skipped": True},
    ]
    assert replaced_containers(results, "n1") == ["n1/kimi-K2", "n1/fresh", "n1/stopped"]
    assert replaced_containers(None, "n1") == []


def test_exec_unit_restarts_when_a_container_it_depends_on_was_replaced_anywhere():
    assert unit_state(API, "mi300x-01", [], []) == "started"
    assert unit_state(API, "mi300x-01", [], ["mi300x-02/kimi-K2"]) == "restarted"  # the worker's, on the other node
    assert unit_state(API, "mi300x-01", [], ["mi300x-02/other"]) == "started"
    assert unit_state(API, "mi300x-01", ["kimi-K2-serve"], []) == "restarted"  # its own unit changed
    # exec_in counts even when depends_on does not list it
    assert unit_state({**API, "depends_on": []}, "mi300x-01", [], ["mi300x-01/kimi-K2"]) == "restarted"
    # the TRT-LLM launcher: an sshd container replaced on another node, or its container's config files changed
    launcher = {"name": "llmb-trtllm-launcher", "kind": "mpirun", "exec_in": "llmb-trtllm",
                "depends_on": ["h1/llmb-trtllm", "h2/llmb-trtllm"]}
    assert unit_state(launcher, "h1", [], []) == "started"
    assert unit_state(launcher, "h1", [], ["h2/llmb-trtllm"]) == "restarted"
    assert unit_state(launcher, "h1", ["llmb-trtllm"], []) == "restarted"
    # units of other kinds restart only when their own definition changed
    ray = {"name": "llmb-vllm", "kind": "systemd", "depends_on": ["a/llmb-ray"]}
    assert unit_state(ray, "a", [], ["a/llmb-ray"]) == "started"
    assert "exec" in UNIT_KINDS


def test_not_joined_text_tells_reachable_from_unreachable():
    base = not_joined_text("ray-worker", "192.168.104.11", 6379, None, ["10.0.0.5:22"])
    assert "ray-worker holds no established TCP connection to the Ray head's GCS at 192.168.104.11:6379" in base
    assert "10.0.0.5:22" in base
    down = not_joined_text("ray-worker", "192.168.104.11", 6379, False, [])
    assert "does not accept TCP from this node" in down and "llmb_cluster_iface" in down
    up = not_joined_text("dp-headless", "h", 13345, True, [])
    assert "DP rank 0" in up and "did not join" in up


def test_exec_unit_is_ordered_after_docker():
    from llmb.serve import systemd_unit

    argv = ["/usr/bin/docker", "exec", "kimi-K2", "/bin/sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", "/tmp/p"]
    unit = systemd_unit({**API, "role": "api", "argv": argv}, "/etc/llmb")
    assert "After=network-online.target docker.service\n" in unit
    assert "After=network-online.target\n" in systemd_unit({"name": "llmb-vllm", "kind": "systemd", "argv": ["/x"]}, "/e")
