"""Upgrade as a plan diff, group by group, and rollback through the lock history (issue 27, points 2-3):
llmbctl.upgrade (diff, groups), llmbctl.lockhistory, stage 0's llmb_rollback_to
(llmbctl.deployment.build) and the console's staged apply (llmbctl.console.upgrade) with the
playbook runs faked. Documents come from the sample inventories through the planner itself."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import re
import shutil
import types
from pathlib import Path

import pytest
from llmbctl import deployment as D
from llmbctl import lockhistory as H
from llmbctl import pins as P
from llmbctl import upgrade as U
from llmbctl.console import cli
from llmbctl.console import upgrade as CU

REPO = Path(__file__).resolve().parents[3]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "89abcdef0123456789abcdef0123456789abcdef"


def _launch_plan():
    loader = importlib.machinery.SourceFileLoader("llmb_launch_plan_for_upgrade", str(REPO / "scripts" / "launch-plan"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


LP = _launch_plan()


def copy_inv(tmp_path: Path, name: str, **knobs) -> Path:
    """A copy of inventories/<name> with knobs of group_vars/all/llmb.yml replaced (never appended twice)."""
    out = tmp_path / f"inv-{name}-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(REPO / "inventories" / name, out)
    files = sorted((out / "group_vars" / "all").glob("*.yml"))
    for key, value in {"llmb_model_revision": COMMIT, **knobs}.items():
        for f in files:
            f.write_text(re.sub(rf"(?m)^{key}:.*\n", "", f.read_text()))
        llmb = out / "group_vars" / "all" / "llmb.yml"
        llmb.write_text(llmb.read_text() + f"{key}: {value}\n")
    return out


def doc_of(inv: Path, **kw) -> dict:
    hv, groups = LP.load_inventory(str(inv))
    doc = D.build(hv, groups, "run-x", "/tmp/none", None, inventory_dir=str(inv), **kw)
    assert doc["planned"] and doc["pins"]["problems"] == [], doc["problems"] or doc["pins"]["problems"]
    return doc


def by_what(d: dict) -> dict[tuple, dict]:
    return {(c["host"], c["service"], c["what"]): c for c in d["changes"]}


# ----------------------------------------------------------------------------- diff


def test_an_engine_upgrade_shows_engine_argv_and_unit_per_host_and_nothing_else(tmp_path):
    old = doc_of(copy_inv(tmp_path, "h800-dp-ep", llmb_engine_version="0.19.1"))
    new = doc_of(copy_inv(tmp_path, "h800-dp-ep", llmb_engine_version="0.26.0"))
    d = U.diff(old, new)
    assert d["changed"] and d["old_hash"] == old["hash"] and d["new_hash"] == new["hash"]
    keys = set(by_what(d))
    hosts = list(new["hosts"])
    assert keys == {(h, None, "engine") for h in hosts} | {(h, "llmb-vllm", w) for h in hosts for w in ("argv", "unit")}
    c = by_what(d)[(hosts[1], "llmb-vllm", "argv")]
    assert c["old"][0] == "/opt/llmb/venvs/vllm-0.19.1/bin/vllm" and c["new"][0] == "/opt/llmb/venvs/vllm-0.26.0/bin/vllm"
    assert c["old"][1:] == c["new"][1:] and "--headless" in c["new"]
    assert c["lines"] == ["- /opt/llmb/venvs/vllm-0.19.1/bin/vllm", "+ /opt/llmb/venvs/vllm-0.26.0/bin/vllm"]
    unit = by_what(d)[(hosts[0], "llmb-vllm", "unit")]
    assert unit["lines"] == ["  ExecStart=: the argv above"]  # the unit's other lines stay
    assert [x for x in unit["new"].splitlines() if x.startswith("ExecStart=/opt/llmb/venvs/vllm-0.26.0/bin/vllm serve ")]
    text = "\n".join(U.render(d, "applied lock 1"))
    assert "- vllm 0.19.1 (host: /opt/llmb/venvs/vllm-0.19.1)" in text and "+ vllm 0.26.0" in text
    assert f"group 1: {hosts[0]}, {hosts[1]}" in text
    same = U.diff(new, json.loads(json.dumps(new)))
    assert same["changed"] is False and same["changes"] == []
    assert U.render(same)[0].startswith("no change")


def test_a_knob_changes_what_it_moves_only_and_a_revision_names_the_weights_to_fetch(tmp_path):
    old = doc_of(copy_inv(tmp_path, "h800-dp-ep"))
    knob = doc_of(copy_inv(tmp_path, "h800-dp-ep", llmb_engine_env='{"NCCL_DEBUG": "INFO"}'))
    d = U.diff(old, knob)
    assert {c["what"] for c in d["changes"]} == {"env"}  # the environment file, not the unit
    assert [c["lines"] for c in d["changes"]] == [["+ NCCL_DEBUG=INFO"]] * len(old["hosts"])
    args = doc_of(copy_inv(tmp_path, "h800-dp-ep", llmb_served_model_name="kimi-next"))
    c = by_what(U.diff(old, args))[(next(iter(old["hosts"])), "llmb-vllm", "argv")]
    i = c["new"].index("--served-model-name")
    assert c["new"][i + 1] == "kimi-next" and c["old"][i + 1] == "kimi-k2"
    rev = doc_of(copy_inv(tmp_path, "h800-dp-ep", llmb_model_revision=OTHER))
    w = [c for c in U.diff(old, rev)["changes"] if c["what"] == "weights"]
    assert [c["host"] for c in w] == list(old["hosts"])
    assert w[0]["old"]["commit"] == COMMIT and w[0]["new"]["commit"] == OTHER
    assert OTHER in w[0]["lines"][-1] and "to fetch and verify" in w[0]["lines"][-1]


def test_nothing_applied_yet_lists_every_service_as_new(tmp_path):
    new = doc_of(copy_inv(tmp_path, "sim"))
    d = U.diff(None, new)
    assert {(c["what"], c["old"]) for c in d["changes"] if c["what"] in ("host", "service")} == {("host", None), ("service", None)}
    assert sum(c["what"] == "service" for c in d["changes"]) == 3  # ray head, ray worker, api


def test_an_env_change_is_listed_key_by_key():
    old = {"k": "1", "gone": "x"}
    assert U._env_lines(old, {"k": "2", "new": "y"}) == ["- gone=x", "- k=1", "+ k=2", "+ new=y"]


# ----------------------------------------------------------------------------- groups


def test_groups_follow_the_plan_a_dp_group_is_one_and_prefill_decode_are_two(tmp_path):
    dp = doc_of(copy_inv(tmp_path, "h800-dp-ep"))
    assert [g["hosts"] for g in U.groups(dp)] == [list(dp["hosts"])]
    ray = doc_of(copy_inv(tmp_path, "sim"))
    assert [g["hosts"] for g in U.groups(ray)] == [["node1", "node2"]]
    pd = doc_of(copy_inv(tmp_path, "h200-4p12d"))
    got = U.groups(pd)
    prefill = [h for h in pd["hosts"] if "-p" in h]
    decode = [h for h in pd["hosts"] if "-d" in h]
    assert [g["hosts"] for g in got] == [prefill, decode]  # the router on p00 joins nothing
    assert [g["n"] for g in got] == [1, 2]
    assert "h200-p00/llmb-sglang-router" in got[0]["services"]


def test_hosts_without_a_link_are_groups_of_their_own_in_start_order():
    def svc(name, order, deps=()):
        return {"name": name, "order": order, "depends_on": list(deps), "role": "api", "kind": "systemd"}

    doc = {"hosts": {
        "b": {"rank": 1, "plan": {"services": [svc("s", 10)]}},
        "a": {"rank": 0, "plan": {"services": [svc("s", 20)]}},
        "c": {"rank": 2, "plan": {"services": [svc("s", 30, ["b/s"])]}},
        "idle": {"rank": 3, "plan": {"services": []}},
    }}
    assert [g["hosts"] for g in U.groups(doc)] == [["b", "c"], ["a"]]


# ----------------------------------------------------------------------------- lock history


def _doc(h: str) -> dict:
    return {"schema": 1, "run": {"id": "r"}, "hosts": {"n1": {}}, "hash": h, "engine": {"name": "vllm", "version": h}}


def test_history_numbers_every_applied_lock_once_and_never_overwrites(tmp_path, monkeypatch):
    (tmp_path / P.LOCK_NAME).write_text(json.dumps({"engine": {"name": "vllm", "version": "a"}}))
    assert H.record(tmp_path, _doc("a"), "r1") == (1, True)
    assert H.record(tmp_path, _doc("a"), "r2") == (1, False)  # the same document and lock: no entry
    (tmp_path / P.LOCK_NAME).write_text(json.dumps({"engine": {"name": "vllm", "version": "b"}}))
    assert H.record(tmp_path, _doc("b"), "r3") == (2, True)
    e = H.load(tmp_path, 2)
    assert e["lock"]["engine"]["version"] == "b" and e["deployment"]["hash"] == "b" and "run" not in e["deployment"]
    # a number taken meanwhile by another writer (this one listed the directory before) is skipped
    H.entry_path(tmp_path, 3).write_text('{"n": 3}')
    monkeypatch.setattr(H, "numbers", lambda d: [1, 2])
    assert H.record(tmp_path, _doc("c"), "r4", lock={"x": 1}) == (4, True)
    monkeypatch.undo()
    assert H.entry_path(tmp_path, 3).read_text() == '{"n": 3}' and H.load(tmp_path, 4)["lock"] == {"x": 1}
    assert [p.name for p in H.history_dir(tmp_path).iterdir() if p.name.startswith(".")] == []
    with pytest.raises(H.HistoryError, match=r"no applied lock 9 .*entries: 1, 2, 3, 4"):
        H.load(tmp_path, 9)
    with pytest.raises(H.HistoryError, match="not a lock history entry"):
        H.load(tmp_path, 3)


def test_rollback_goes_back_to_the_last_good_entry_by_default(tmp_path):
    with pytest.raises(H.HistoryError, match="nothing to roll back to"):
        H.default_target(tmp_path)
    H.record(tmp_path, _doc("a"), "r1", lock={})
    H.record(tmp_path, _doc("b"), "r2", lock={"b": 1})
    H.write_attempt(tmp_path, "r2", "b", True, "upgrade")
    assert H.default_target(tmp_path) == 1  # after a good upgrade: the one before it
    H.write_attempt(tmp_path, "r3", "c", False, "upgrade", failed_group=1)
    assert H.default_target(tmp_path) == 2  # after a failed one: the last good one
    (H.history_dir(tmp_path) / H.ATTEMPT).unlink()
    assert H.default_target(tmp_path) == 1


# ----------------------------------------------------------------------------- stage 0 rollback


def test_stage_0_reapplies_an_entry_byte_for_byte_and_restores_its_lock(tmp_path):
    inv = copy_inv(tmp_path, "h800-dp-ep", llmb_engine_version="0.19.1")
    old = doc_of(inv)
    old_lock = (inv / P.LOCK_NAME).read_text()
    assert H.record(inv, old, "r1") == (1, True)
    llmb = inv / "group_vars" / "all" / "llmb.yml"
    llmb.write_text(llmb.read_text().replace("llmb_engine_version: 0.19.1", "llmb_engine_version: 0.26.0"))
    new = doc_of(inv)
    assert new["engine"]["version"] == "0.26.0" and (inv / P.LOCK_NAME).read_text() != old_lock
    llmb.write_text(llmb.read_text() + "llmb_rollback_to: 1\n")
    back = doc_of(inv)
    assert back["hash"] == old["hash"] and back["run"] == {"id": "run-x", "artifacts_dir": "/tmp/none"}
    assert D.canonical(back) == D.canonical(old)
    assert back["hosts"] == old["hosts"] and back["pins"]["sources"]["rollback"] == 1
    assert H.record(inv, back, "r3") == (1, False)  # back to the newest entry: nothing new to record
    assert (inv / P.LOCK_NAME).read_text() == json.dumps(json.loads(old_lock), indent=2, sort_keys=True) + "\n"


def test_stage_0_refuses_a_missing_entry_or_one_of_other_hosts(tmp_path):
    inv = copy_inv(tmp_path, "h800-dp-ep")
    llmb = inv / "group_vars" / "all" / "llmb.yml"
    llmb.write_text(llmb.read_text() + "llmb_rollback_to: 3\n")
    hv, groups = LP.load_inventory(str(inv))
    doc = D.build(hv, groups, "r", "/tmp/none", None, inventory_dir=str(inv))
    [p] = doc["pins"]["problems"]
    assert p["check"] == "rollback" and "no applied lock 3" in p["message"]
    other = doc_of(copy_inv(tmp_path, "sim"))
    H.record(inv, other, "r0", lock={})
    llmb.write_text(llmb.read_text().replace("llmb_rollback_to: 3", "llmb_rollback_to: 1"))
    hv, groups = LP.load_inventory(str(inv))
    doc = D.build(hv, groups, "r", "/tmp/none", None, inventory_dir=str(inv))
    [p] = doc["pins"]["problems"]
    assert "applied to other hosts" in p["message"] and p["expected"] == "node1, node2"


# ----------------------------------------------------------------------------- console, playbooks faked


class FakeRuns:
    """run_playbook stand-in: stage 0 writes ``doc`` as deployment.json; serve writes its results;
    ``unhealthy``: the group numbers whose serve run fails."""

    def __init__(self, root: Path, doc: dict, unhealthy=()):
        self.root, self.doc, self.unhealthy, self.calls = root, doc, set(unhealthy), []

    def __call__(self, playbook, inventory, extra, run_id, expect, title, quiet=False, options=None, ident=None,
                 report=True):
        self.calls.append((playbook, list(options or []), ident, list(extra)))
        rd = self.root / "artifacts" / run_id
        rd.mkdir(parents=True, exist_ok=True)
        books = [playbook] if isinstance(playbook, str) else playbook
        if any(b.endswith(("preflight.yml", "site.yml")) for b in books):
            (rd / "deployment.json").write_text(json.dumps(self.doc))
        if playbook == "playbooks/serve.yml" or "site.yml" in books:
            n = int(ident.rsplit("-g", 1)[1]) if ident and "-g" in ident else 0
            hosts = options[1].split(",")[:-1] if options else list(self.doc["hosts"])
            (rd / "serve").mkdir(exist_ok=True)
            for h in hosts:
                (rd / "serve" / f"{h}.json").write_text(json.dumps({"ok": n not in self.unhealthy}))
            return 1 if n in self.unhealthy else 0
        return 0


def test_up_applies_group_by_group_and_stops_at_an_unhealthy_one_with_the_rollback_command(tmp_path, capsys):
    inv = copy_inv(tmp_path, "h200-4p12d", llmb_served_model_name="kimi-k2")
    first = doc_of(inv)
    root = tmp_path / "root"
    runs = FakeRuns(root, first)
    assert CU.up(runs, str(inv), [], "r1", root, "llmb up r1", False) == 0
    assert [c[0] for c in runs.calls] == ["site.yml"] and H.numbers(inv) == [1]  # first bring-up: one run
    llmb = inv / "group_vars" / "all" / "llmb.yml"
    llmb.write_text(llmb.read_text().replace("llmb_served_model_name: kimi-k2", "llmb_served_model_name: kimi-next"))
    new = doc_of(inv)
    runs = FakeRuns(root, new, unhealthy={2})
    assert CU.up(runs, str(inv), [], "r2", root, "llmb up r2", False) == 1
    serve = [c for c in runs.calls if c[0] == "playbooks/serve.yml"]
    prefill = ",".join([h for h in new["hosts"] if "-p" in h] + ["localhost"])
    decode = ",".join([h for h in new["hosts"] if "-d" in h] + ["localhost"])
    assert [(c[1], c[2]) for c in serve] == [(["--limit", prefill], "r2-serve-g1"), (["--limit", decode], "r2-serve-g2")]
    assert runs.calls[0][0] == CU.BEFORE_SERVE and runs.calls[0][2] is None
    assert not any(c[0] == CU.AFTER_SERVE for c in runs.calls)  # stopped: no bench after an unhealthy group
    out = capsys.readouterr().out
    assert f"Roll back: llmb rollback -i {inv} --to 1" in out and "stopped at group 2" in out
    assert "--served-model-name kimi-next" in out
    rec = json.loads((root / "artifacts" / "r2" / "upgrade.json").read_text())
    assert [g.get("status") for g in rec["groups"]] == ["healthy", "NOT HEALTHY"]
    rep = json.loads((root / "artifacts" / "r2" / "report.json").read_text())
    assert rep["upgrade"]["message"] == rec["message"] and "Plan diff and groups" in (
        root / "artifacts" / "r2" / "report.md").read_text()
    assert H.numbers(inv) == [1] and H.default_target(inv) == 1
    # the rollback: the same staged path with the entry's number for stage 0
    ns = types.SimpleNamespace(list=False, to=None, check=False)
    runs = FakeRuns(root, first)
    assert CU.rollback(runs, ns, str(inv), [], "r3", root) == 0
    assert all("llmb_rollback_to=1" in c[3] for c in runs.calls)
    assert runs.calls[-1][0] == CU.AFTER_SERVE and H.numbers(inv) == [1]  # the same document: no new entry
    assert "no change" in capsys.readouterr().out


def test_up_check_runs_site_in_check_mode_and_prints_the_diff(tmp_path, capsys):
    inv = copy_inv(tmp_path, "h800-dp-ep", llmb_engine_version="0.19.1")
    H.record(inv, doc_of(inv), "r1")
    new = doc_of(copy_inv(tmp_path, "h800-dp-ep", llmb_engine_version="0.26.0"))
    root = tmp_path / "root"
    runs = FakeRuns(root, new)
    assert CU.up(runs, str(inv), [], "c1", root, "llmb up c1", True) == 0
    assert runs.calls[0][:2] == ("site.yml", ["--check", "--diff"])
    out = capsys.readouterr().out
    assert "plan diff: applied lock 1" in out and "+ vllm 0.26.0" in out
    md = (root / "artifacts" / "c1" / "upgrade.md").read_text()
    assert "+ /opt/llmb/venvs/vllm-0.26.0/bin/vllm" in md and "group 1 (gpu-h800-01, gpu-h800-02): check mode" in md


def test_rollback_bad_inputs_exit_2_naming_them(tmp_path, capsys):
    assert cli.main(["rollback", "-i", str(tmp_path)]) == 2
    assert "nothing to roll back to" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse's own usage error, exit 2
        cli.main(["rollback", "-i", str(tmp_path), "--to", "x"])
    assert exc.value.code == 2
    assert "--to: invalid int value" in capsys.readouterr().err
    assert cli.main(["rollback", "-i", str(tmp_path), "--to", "0"]) == 2
    assert "--to 0: an entry number is 1 or more" in capsys.readouterr().err
    assert cli.main(["rollback", "-i", str(tmp_path), "--to", "4"]) == 2
    assert "no applied lock 4" in capsys.readouterr().err
    assert cli.main(["rollback", "-i", str(tmp_path), "--list"]) == 0
    assert "no applied lock" in capsys.readouterr().out
