"""llmbctl.accuracy: inputs named by their variable, the recipe's references, the gate, the lm-eval
command line, the key kept out of argv and logs; and one real lm-eval run against the engine double
(our own generated gsm8k-format problems, no hub) whose score is the double's oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from enginesim import gsm8k
from enginesim.api import ApiConfig, ApiServer
from enginesim.runtime import Log
from llmb.report import write_report
from llmbctl import accuracy as A
from llmbctl.results import record

KEY = "sk-accuracy-test-7f3c"


def _jsonl(tmp_path: Path, rows, name="test.jsonl") -> str:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(p)


def _settings(tmp_path, n=12, **kw) -> A.Settings:
    path = str(gsm8k.write_jsonl(tmp_path / "t.jsonl", gsm8k.problems(n, 7)))
    return A.settings_from({"dataset": path, **kw})


# ---- inputs ---------------------------------------------------------------------------------


def test_dataset_in_gsm8k_format_is_counted_and_hashed(tmp_path):
    path = str(gsm8k.write_jsonl(tmp_path / "t.jsonl", gsm8k.problems(5, 1)))
    info = A.read_dataset(path)
    assert info["questions"] == 5 and len(info["sha256"]) == 64 and info["path"] == path


@pytest.mark.parametrize("rows, words", [
    (["{half"], "line 1 is not JSON"),
    ([{"question": "q", "answer": "no final number"}], "does not end in '#### N'"),
    ([{"question": "", "answer": "#### 3"}], "line 1 has no question"),
    ([["a"]], "not an object"),
    ([], "holds no question"),
])
def test_bad_dataset_names_the_variable_and_the_line(tmp_path, rows, words):
    path = _jsonl(tmp_path, rows)
    with pytest.raises(A.AccuracyError) as e:
        A.read_dataset(path, "accuracy_fewshot_dataset")
    assert str(e.value).startswith("accuracy_fewshot_dataset: ") and words in str(e.value)


@pytest.mark.parametrize("args, words", [
    ({"dataset": "relative/test.jsonl"}, "accuracy_dataset must be an absolute path"),
    ({"dataset": "/nonexistent/test.jsonl"}, "accuracy_dataset: no file /nonexistent/test.jsonl"),
    ({"min_score": 1.5}, "accuracy_min_score is 1.5, expected a number in [0, 1]"),
    ({"tolerance": "x"}, "accuracy_tolerance must be a number"),
    ({"concurrency": 0}, "accuracy_concurrency is 0"),
    ({"num_fewshot": True}, "accuracy_num_fewshot must be an integer"),
    ({"timeout_s": "ten"}, "accuracy_timeout_s must be an integer"),
    ({"fewshot_dataset": "/nonexistent/train.jsonl"}, "accuracy_fewshot_dataset: no file"),
])
def test_bad_settings_name_the_variable(tmp_path, args, words):
    full = {"dataset": str(gsm8k.write_jsonl(tmp_path / "t.jsonl", gsm8k.problems(3))), **args}
    with pytest.raises(A.AccuracyError) as e:
        A.settings_from(full)
    assert words in str(e.value)


def test_settings_default_to_the_recipe(tmp_path):
    s = _settings(tmp_path)
    assert (s.num_fewshot, s.max_gen_toks, s.temperature, s.top_p) == (5, 2048, 0.0, 1.0)
    assert s.min_score is None and s.fewshot_dataset is None


# ---- references and the gate ----------------------------------------------------------------


def test_references_are_the_recipes():
    doc = A.load_references()
    assert doc["full_test_questions"] == 1319
    a3 = A.find_reference(doc, "kimi-k2-thinking", "a3-16npu")
    assert a3["exact_match_flexible"] == 0.8992 and a3["source"].startswith("001_")
    h200 = A.find_reference(doc, "kimi-k2-thinking", "h200-hgx8")
    assert h200["exact_match_flexible"] == 0.9416 and h200["source"].startswith("003_")
    assert A.find_reference(doc, "kimi-k2-thinking", "h200-hgx8", 8)["exact_match_flexible"] == 0.9386
    assert A.find_reference(doc, "kimi-k2-sim", "h800-hgx8") is None


def test_full_split_is_gated_on_the_reference_less_the_tolerance(tmp_path):
    s = _settings(tmp_path, tolerance=0.03)
    plan = A.plan_gate(s, {"questions": 1319}, A.load_references(), "kimi-k2-thinking", "a3-16npu")
    assert plan["full"] is True and plan["minimum"] == pytest.approx(0.8692) and plan["note"] is None
    assert plan["thresholds"] == {"exact_match_flexible": ">= 0.8692"}
    assert "0.8992" in plan["reference"]["exact_match_flexible"] and "001_" in plan["reference"]["exact_match_flexible"]
    assert A.gate({"exact_match_flexible": 0.87}, plan) == []
    bad = A.gate({"exact_match_flexible": 0.86}, plan)
    assert bad and "0.8600 < 0.8692" in bad[0] and "reference 0.8992" in bad[0]


def test_subset_is_gated_on_the_minimum_and_says_the_reference_does_not_apply(tmp_path):
    s = _settings(tmp_path, min_score=0.5)
    plan = A.plan_gate(s, {"questions": 200}, A.load_references(), "kimi-k2-thinking", "h200-hgx8")
    assert plan["full"] is False and plan["minimum"] == 0.5
    assert "200 of 1319" in plan["note"] and "full test split" in plan["note"]
    assert "not comparable" in plan["reference"]["exact_match_flexible"]
    assert A.gate({"exact_match_flexible": 0.5}, plan) == []
    assert A.gate({"exact_match_flexible": 0.49}, plan)


def test_subset_without_a_minimum_is_refused_before_any_run(tmp_path):
    s = _settings(tmp_path)
    with pytest.raises(A.AccuracyError) as e:
        A.plan_gate(s, {"questions": 200}, A.load_references(), "kimi-k2-thinking", "a3-16npu")
    assert str(e.value).startswith("accuracy_min_score: required") and "200 of 1319" in str(e.value)
    assert "0.8992" in str(e.value)


def test_full_split_without_reference_needs_a_minimum(tmp_path):
    with pytest.raises(A.AccuracyError, match="accuracy_min_score: data/accuracy.yml has no gsm8k reference"):
        A.plan_gate(_settings(tmp_path), {"questions": 1319}, A.load_references(), "kimi-k2-sim", "h800-hgx8")


def test_no_score_fails_the_gate():
    assert A.gate({}, {"minimum": 0.1, "basis": "x"}) == ["no flexible-extract exact_match in lm-eval's results"]


# ---- lm-eval command line, environment, redaction -------------------------------------------


def test_argv_is_the_recipes_command_and_carries_no_key(tmp_path):
    s = _settings(tmp_path, concurrency=32)
    argv = A.lm_eval_argv("/venv/bin/python", "http://10.0.0.1:8000/v1/", "kimi-k2-thinking", "/t", "/o", s)
    assert argv[:4] == ["/venv/bin/python", "-m", "lm_eval", "run"]
    joined = " ".join(argv)
    for part in ("--model local-chat-completions", "--tasks llmb_gsm8k", "--num_fewshot 5", "--apply_chat_template",
                 "--fewshot_as_multiturn", "--batch_size 1",
                 "--gen_kwargs temperature=0.0,top_p=1.0,max_gen_toks=2048"):
        assert part in joined, part
    margs = argv[argv.index("--model_args") + 1]
    assert "base_url=http://10.0.0.1:8000/v1/chat/completions" in margs and "num_concurrent=32" in margs
    env = A.lm_eval_env({"PATH": "/bin", "OPENAI_API_KEY": "stale"}, KEY, "/c")
    assert env["OPENAI_API_KEY"] == KEY and KEY not in joined
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_DATASETS_OFFLINE"] == "1"
    assert A.lm_eval_env({"OPENAI_API_KEY": "stale"}, None, "/c")["OPENAI_API_KEY"] == ""


@pytest.mark.parametrize("model, url", [("a,b", "http://h:1/v1"), ("m", "http://h:1/v1,x=1"), ("m", "ftp://h/v1")])
def test_values_lm_eval_cannot_take_are_refused(tmp_path, model, url):
    with pytest.raises(A.AccuracyError):
        A.lm_eval_argv("py", url, model, "/t", "/o", _settings(tmp_path))


def test_redact_masks_the_key_and_any_bearer_token():
    text = f"headers=<'Authorization': 'Bearer {KEY}', 'Accept'> key {KEY} and Bearer other-token."
    out = A.redact(text, [KEY])
    assert KEY not in out and "other-token" not in out and "Bearer ********" in out


def test_task_config_is_lm_evals_gsm8k_with_local_files():
    base = A.base_task()
    assert base["metadata"]["version"] == 3.0 and base["num_fewshot"] == 5  # the recipe's task version
    cfg = A.task_config(base, "/d/test.jsonl")
    assert cfg["task"] == "llmb_gsm8k" and cfg["dataset_path"] == "json" and "dataset_name" not in cfg
    assert cfg["dataset_kwargs"] == {"data_files": {"test": "/d/test.jsonl"}}
    assert cfg["fewshot_split"] == "test" and cfg["filter_list"] == base["filter_list"]
    cfg = A.task_config(base, "/d/test.jsonl", "/d/train.jsonl")
    assert cfg["dataset_kwargs"]["data_files"]["train"] == "/d/train.jsonl" and cfg["fewshot_split"] == "train"


def test_record_of_a_failed_gate_has_the_figures_and_the_error(tmp_path):
    s = _settings(tmp_path, min_score=0.9)
    plan = A.plan_gate(s, {"questions": 12}, A.load_references(), "kimi-k2-sim", "h800-hgx8")
    row = {"endpoint": "http://h/v1", "model": "m", "exact_match_flexible": 0.5, "violations": ["low"]}
    data = A.record([row], plan, {"questions": 12}, s)
    assert data["ok"] is False and data["runs"][0]["exact_match_flexible"] == 0.5 and "violations" not in data["runs"][0]
    assert data["error"] == "accuracy gate: low" and data["thresholds"] == {"exact_match_flexible": ">= 0.9"}
    assert data["settings"]["fewshot_as_multiturn"] is True and "12 of 1319" in data["note"]
    skipped = A.record([], None, None, None, skipped="not run: accuracy_dataset is not set")
    assert skipped == {"ok": True, "skipped": "not run: accuracy_dataset is not set", "runs": [],
                       "note": "not run: accuracy_dataset is not set"}


def test_report_shows_the_accuracy_figures_threshold_reference_and_note(tmp_path):
    run = tmp_path / "r"
    s = _settings(tmp_path, min_score=0.9)
    plan = A.plan_gate(s, {"questions": 12}, A.load_references(), "kimi-k2-thinking", "a3-16npu")
    row = {"endpoint": "http://h/v1", "model": "m", "exact_match_flexible": 0.5, "questions": 12,
           "violations": ["gsm8k flexible-extract exact_match 0.5000 < 0.9"]}
    record(str(run), "accuracy", "node1", A.record([row], plan, {"questions": 12}, s))
    rep = write_report(str(run))
    assert rep["verdict"] == "FAILED" and rep["failed"][0]["stage"] == "accuracy"
    assert "0.5000 < 0.9" in rep["failed"][0]["why"]
    acc = rep["accuracy"][0]
    assert acc["exact_match_flexible"] == 0.5 and acc["thresholds"]["exact_match_flexible"] == ">= 0.9"
    assert "0.8992" in acc["reference"]["exact_match_flexible"] and "12 of 1319" in acc["note"]
    md = (run / "report.md").read_text()
    assert "| node1 | exact_match_flexible | 0.5 | >= 0.9 | 0.8992" in md and "accuracy note (node1): subset" in md
    page = (run / "report.html").read_text()
    assert 'id="accuracy"' in page and "applies to the full test split" in page


# ---- the real lm-eval against the double ------------------------------------------------------


@pytest.fixture()
def double(monkeypatch, tmp_path):
    monkeypatch.setenv(gsm8k.ACCURACY_FILE_ENV, str(tmp_path / "acc"))
    (tmp_path / "acc").write_text("0.5\n")
    cfg = ApiConfig(engine="vllm", version="0.19.1", served_names=["kimi-k2-sim"], model_path="/m",
                    api_keys=[KEY], reasoning_parser="kimi_k2")
    srv = ApiServer(cfg, "127.0.0.1", 0, Log())
    srv.ready.set()
    yield f"http://127.0.0.1:{srv.port}/v1"
    srv.httpd.shutdown()
    srv.httpd.server_close()


def test_real_lm_eval_scores_the_double_as_its_oracle_says(double, tmp_path):
    rows = gsm8k.problems(16, 11)
    path = str(gsm8k.write_jsonl(tmp_path / "test.jsonl", rows))
    s = A.settings_from({"dataset": path, "min_score": 0.9, "concurrency": 4, "max_retries": 1,
                         "request_timeout_s": 30, "timeout_s": 300})
    plan = A.plan_gate(s, A.read_dataset(path), A.load_references(), "kimi-k2-sim", "h800-hgx8")
    out = tmp_path / "out"
    row = A.run(double, "kimi-k2-sim", s, plan, api_key=KEY, out_dir=str(out), log_path=str(tmp_path / "lm.log"))
    assert "error" not in row, row.get("error")
    want = gsm8k.expected_score([r["question"] for r in rows], 0.5)
    assert 0 < want < 0.9
    assert row["exact_match_flexible"] == pytest.approx(want, abs=1e-4)
    assert row["questions"] == 16 and row["task_version"] in (3, 3.0, "3.0") and row["lm_eval_version"] == "0.4.13"
    assert row["violations"] and "< 0.9" in row["violations"][0]
    assert KEY not in (tmp_path / "lm.log").read_text()
    assert not any(KEY in p.read_text() for p in out.rglob("*.json"))


def test_subset_note_without_a_reference_says_there_is_none(tmp_path):
    plan = A.plan_gate(_settings(tmp_path, min_score=0.5), {"questions": 8}, A.load_references(), "kimi-k2-sim",
                       "h800-hgx8")
    assert "8 of 1319" in plan["note"] and "no recipe reference for model kimi-k2-sim" in plan["note"]
    assert "shown for information" not in plan["note"] and plan["reference"] == {}


def test_preflight_problems_name_the_variable_before_any_host(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "llmb_accuracy_filter", Path(__file__).resolve().parents[3] / "plugins/filter/llmb_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    check = mod.FilterModule().filters()["llmb_accuracy_problems"]
    path = str(gsm8k.write_jsonl(tmp_path / "t.jsonl", gsm8k.problems(4)))
    assert check({"dataset": None}) == []  # not configured: the gate does not run
    assert check({"dataset": path, "min_score": 0.8}, "kimi-k2-thinking", "a3-16npu") == []
    out = check({"dataset": path}, "kimi-k2-thinking", "a3-16npu")
    assert len(out) == 1 and out[0].startswith("accuracy_min_score: required") and "4 of 1319" in out[0]
    assert check({"dataset": "/nope.jsonl", "min_score": 0.8})[0].startswith("accuracy_dataset: no file /nope.jsonl")
