"""The console's day-two commands without ansible-runner: their inputs (exit 2 naming them)."""

from __future__ import annotations

import json

import pytest
from llmbctl.console import cli, daytwo


def test_limit_is_a_host_pattern_and_keeps_the_controller():
    assert daytwo.limit_option(None) == []
    assert daytwo.limit_option("node1,node[2:3]") == ["--limit", "node1,node[2:3],localhost"]
    with pytest.raises(ValueError, match="--limit 'node1; rm -rf /'"):
        daytwo.limit_option("node1; rm -rf /")


def test_group_must_be_one_of_the_inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"children": {"accel_nodes": {"hosts": {"node1": {}, "node2": {}}},
                                                    "decode_nodes": {"hosts": {"node2": {}}}}}}))
    assert daytwo.group_option(str(inv), "decode_nodes") == ["--limit", "decode_nodes,localhost"]
    with pytest.raises(ValueError, match="--group 'prefill_nodes': no such group .*decode_nodes"):
        daytwo.group_option(str(inv), "prefill_nodes")


@pytest.mark.parametrize("argv, says", [
    (["stop", "-i", "/nope"], "-i /nope: no such inventory"),
    (["collect", "-i", ".", "--limit", "a b"], "--limit 'a b'"),
    (["start", "-i", ".", "--run-id", "../x"], "--run-id"),
])
def test_bad_inputs_exit_2(argv, says, capsys):
    assert cli.main(argv) == 2
    assert says in capsys.readouterr().err
