"""llmb.starthistory: a serve record's start history checked, a run's health waits added, capped per
service, and grouped by compile cache state with the median and count of each."""

from __future__ import annotations

import statistics

import pytest
from llmb.starthistory import CAP, HistoryError, check, from_run, merge, summary


def _start(service, waited_s, cache, at="2026-11-27T10:00:00Z", since_start_s=None):
    return {"service": service, "compile_cache": cache, "waited_s": waited_s, "since_start_s": since_start_s, "at": at}


def test_a_runs_health_waits_of_the_services_it_started_become_starts_with_their_cache_state():
    waits = [["llmb-ray", 2], ["llmb-vllm", 124.6], ["llmb-router", 0.1]]
    got = from_run(waits, {"llmb-vllm": "cold"}, ["llmb-ray", "llmb-vllm"], "2026-11-27T10:00:00Z")
    assert got == [_start("llmb-ray", 2.0, None), _start("llmb-vllm", 124.6, "cold")]  # the router ran already
    assert from_run(waits, {}, [], "t") == []  # nothing started: healthy at once is no start
    assert from_run([], {}, [], "t") == []  # the converged fast path: nothing health-waited, nothing added
    # the time from each service's start, where the health wait knew it
    got = from_run(waits, {"llmb-vllm": "cold"}, ["llmb-vllm"], "t", {"llmb-vllm": 190.5, "llmb-router": 3.0})
    assert got == [_start("llmb-vllm", 124.6, "cold", at="t", since_start_s=190.5)]
    with pytest.raises(HistoryError, match="since_start_s.llmb-vllm"):
        from_run(waits, {}, ["llmb-vllm"], "t", {"llmb-vllm": "long"})


@pytest.mark.parametrize(("healthy", "cache", "match"), [
    ([["llmb-vllm"]], {}, r"healthy\[0\]: expected \[service, seconds\]"),
    ([["llmb-vllm", -1]], {}, "seconds.*0 or more"),
    ([["llmb-vllm", True]], {}, "seconds"),
    ([["llmb-vllm", float("nan")]], {}, "finite"),
    ([["", 3]], {}, "service"),
    ([["llmb-vllm", 3]], {"llmb-vllm": "hot"}, "compile_cache.llmb-vllm: expected one of cold, warm, peer"),
    ({"llmb-vllm": 3}, {}, "healthy: expected a list"),
    ([], ["cold"], "compile_cache: expected a mapping"),
])
def test_a_runs_health_waits_that_are_not_the_records_are_refused(healthy, cache, match):
    with pytest.raises(HistoryError, match=match):
        from_run(healthy, cache, ["llmb-vllm"], "2026-11-27T10:00:00Z")
    with pytest.raises(HistoryError, match="started_services"):
        from_run([], {}, "llmb-vllm", "t")


def test_merge_appends_and_keeps_the_last_cap_of_each_service():
    old = [_start("llmb-vllm", float(i), "warm", at=f"v{i}") for i in range(CAP)] + [_start("llmb-ray", 1.0, None, at="r0")]
    new = [_start("llmb-vllm", 99.0, "cold", at="v-new"), _start("llmb-ray", 2.0, None, at="r1")]
    got = merge(old, new)
    vllm = [e["at"] for e in got if e["service"] == "llmb-vllm"]
    assert len(vllm) == CAP and vllm[0] == "v1" and vllm[-1] == "v-new"  # the oldest one dropped
    assert [e["at"] for e in got if e["service"] == "llmb-ray"] == ["r0", "r1"]  # below the cap: all kept
    assert merge(old, []) == old  # nothing new (the fast path): the history as it was
    assert [e["at"] for e in merge(old, new, cap=2) if e["service"] == "llmb-vllm"] == [f"v{CAP - 1}", "v-new"]


@pytest.mark.parametrize(("raw", "match"), [
    ({"service": "x"}, "starts: expected a list"),
    (["x"], r"starts\[0\]: expected a mapping"),
    ([{"service": "llmb-vllm", "compile_cache": "cold", "waited_s": "12", "at": "t"}], r"starts\[0\].waited_s"),
    ([{"service": "llmb-vllm", "compile_cache": "boiling", "waited_s": 12, "at": "t"}], r"starts\[0\].compile_cache"),
    ([{"service": "a\nb", "compile_cache": None, "waited_s": 12, "at": "t"}], r"starts\[0\].service"),
    ([{"service": "llmb-vllm", "compile_cache": None, "waited_s": 12}], r"starts\[0\].at"),
    ([{"service": "s", "compile_cache": None, "waited_s": 1, "at": "t"}] * 5000, "at most"),
])
def test_a_history_that_is_not_the_records_is_refused(raw, match):
    with pytest.raises(HistoryError, match=match):
        check(raw)


def test_summary_is_the_median_and_count_per_cache_state_in_state_order():
    cold, warm, peer = [255.0, 255.6], [160.2, 168.6, 150.0], [201.0]
    starts = ([_start("llmb-vllm", w, "warm") for w in warm] + [_start("llmb-vllm", c, "cold") for c in cold]
              + [_start("llmb-vllm", p, "peer") for p in peer] + [_start("llmb-ray", 3.0, None)])
    got = summary(check(starts))
    assert [s["service"] for s in got] == ["llmb-vllm", "llmb-ray"]  # the order first recorded
    groups = {g["compile_cache"]: g for g in got[0]["groups"]}
    assert [g["compile_cache"] for g in got[0]["groups"]] == ["cold", "warm", "peer"]
    for state, values in (("cold", cold), ("warm", warm), ("peer", peer)):
        assert groups[state]["count"] == len(values)
        assert groups[state]["median_s"] == pytest.approx(statistics.median(values))
    assert groups["cold"]["median_s"] == pytest.approx((255.0 + 255.6) / 2)  # an even count: the mean of the middle two
    assert groups["warm"]["median_s"] == 160.2  # an odd count: the middle one, not the mean
    assert got[1]["groups"] == [{"compile_cache": "unknown", "median_s": 3.0, "count": 1}]  # no state known


def test_the_time_from_the_start_wins_over_the_health_wait_where_known():
    # warm: two starts with the time since the start (the wait after the levels is shorter), one without
    starts = [_start("llmb-vllm", 10.0, "warm", since_start_s=160.0), _start("llmb-vllm", 12.0, "warm", since_start_s=170.0),
              _start("llmb-vllm", 150.0, "warm")]
    (vllm,) = summary(check(starts))
    assert vllm["groups"] == [{"compile_cache": "warm", "median_s": statistics.median([160.0, 170.0, 150.0]), "count": 3}]
    old = [{"service": "llmb-vllm", "compile_cache": "cold", "waited_s": 9.0, "at": "t"}]  # written before since_start_s
    assert check(old)[0]["since_start_s"] is None
