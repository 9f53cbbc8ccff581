"""llmbctl.weights.plan: who fetches from where, per strategy; relay doubles the holders per round."""

from __future__ import annotations

import math

import pytest
from llmbctl.weights.plan import PlanError, fetch_plan, hub_fetchers, relay_servers, rounds, senders

H = [f"n{i}" for i in range(1, 17)]


def test_relay_four_nodes_from_scratch():
    p = fetch_plan("relay", H[:4])
    assert p == {
        "n1": {"action": "fetch", "source": "hub", "round": 0, "wait_for": []},
        "n2": {"action": "fetch", "source": "n1", "round": 1, "wait_for": ["n1"]},
        "n3": {"action": "fetch", "source": "n1", "round": 2, "wait_for": ["n1", "n2"]},
        "n4": {"action": "fetch", "source": "n2", "round": 2, "wait_for": ["n2"]},
    }
    assert senders(p) == ["n1", "n2"] and relay_servers(p) == ["n1", "n2"]
    three = fetch_plan("relay", H[:3])
    # n3 waits for n2 (n1's previous receiver), which sends nothing: it must answer all the same
    assert senders(three) == ["n1"] and relay_servers(three) == ["n1", "n2"]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16])
def test_relay_tree_properties(n):
    hosts = H[:n]
    p = fetch_plan("relay", hosts)
    assert hub_fetchers(p) == ["n1"]  # the hub serves the model once
    assert rounds(p) == math.ceil(math.log2(n))  # holders double every round
    have_by_round = {0: {"n1"}}
    for r in range(1, rounds(p) + 1):
        receivers = [h for h, e in p.items() if e["round"] == r]
        srcs = [p[h]["source"] for h in receivers]
        assert len(srcs) == len(set(srcs)), "a sender serves one receiver per round"
        assert set(srcs) <= have_by_round[r - 1], "senders hold the weights before the round"
        for h in receivers:
            assert p[h]["source"] in p[h]["wait_for"]
        have_by_round[r] = have_by_round[r - 1] | set(receivers)
    assert have_by_round[rounds(p)] == set(hosts)


def test_relay_rebuilt_node_takes_from_a_holder_not_the_hub():
    p = fetch_plan("relay", H[:4], complete=["n1", "n2", "n4"])
    assert hub_fetchers(p) == []
    assert p["n3"] == {"action": "fetch", "source": "n1", "round": 1, "wait_for": ["n1"]}
    assert [p[h]["action"] for h in ("n1", "n2", "n4")] == ["none"] * 3
    assert senders(p) == ["n1"]


def test_relay_everything_complete_is_a_no_op():
    p = fetch_plan("relay", H[:4], complete=H[:4])
    assert all(e["action"] == "none" for e in p.values()) and rounds(p) == 0


def test_relay_seed_choice():
    p = fetch_plan("relay", H[:3], seed="n3")
    assert hub_fetchers(p) == ["n3"]
    assert p["n1"]["source"] == "n3"


def test_each():
    p = fetch_plan("each", H[:3], complete=["n2"])
    assert [(h, e["action"], e["source"]) for h, e in p.items()] == [
        ("n1", "fetch", "hub"), ("n2", "none", None), ("n3", "fetch", "hub")]


def test_shared():
    p = fetch_plan("shared", H[:3])
    assert p["n1"] == {"action": "fetch", "source": "hub", "round": 0, "wait_for": []}
    assert p["n2"] == {"action": "verify", "source": None, "round": 1, "wait_for": ["n1"]}
    done = fetch_plan("shared", H[:3], complete=["n1"])
    assert done["n1"]["action"] == "none" and done["n3"]["action"] == "verify"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("mirror", ["n1"]), "not one of shared, each, relay"),
        (("relay", []), "no hosts"),
        (("relay", ["n1"], (), "n9"), "not one of the play's hosts"),
    ],
)
def test_errors(args, message):
    with pytest.raises(PlanError, match=message):
        fetch_plan(*args)
