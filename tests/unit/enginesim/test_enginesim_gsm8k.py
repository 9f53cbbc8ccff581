"""The double answers our generated gsm8k-format problems: right for the configured fraction
(LLMB_ENGINESIM_GSM8K_ACCURACY, or the file that overrides it at run time), wrong for the rest,
the same way every time; other prompts keep their deterministic answer."""

from __future__ import annotations

import json
import re

import pytest
from enginesim import gsm8k
from enginesim.api import ApiConfig, chat_completion


def test_generated_rows_are_gsm8k_format_and_solvable():
    rows = gsm8k.problems(300, 5)
    assert len({r["question"] for r in rows}) == 300
    for r in rows:
        assert set(r) == {"question", "answer"}
        m = re.search(r"\n#### (-?\d+)$", r["answer"])
        assert m, r
        assert gsm8k.solve(r["question"]) == int(m.group(1)) >= 0
    assert gsm8k.problems(10, 5) == rows[:10]  # deterministic per seed
    assert gsm8k.solve("What is the capital of France?") is None


@pytest.mark.parametrize("acc", [0.0, 0.3, 0.8, 1.0])
def test_fraction_answered_right_follows_the_accuracy(acc):
    qs = [r["question"] for r in gsm8k.problems(400, 9)]
    score = gsm8k.expected_score(qs, acc)
    assert abs(score - acc) <= 0.06
    right = [gsm8k.answer(f"Question: {q}\nAnswer:", acc).endswith(f"#### {gsm8k.solve(q)}") for q in qs]
    assert sum(right) / len(qs) == score


def test_accuracy_from_env_and_the_file_overrides_it(monkeypatch, tmp_path):
    monkeypatch.setenv(gsm8k.ACCURACY_FILE_ENV, str(tmp_path / "absent"))
    monkeypatch.delenv(gsm8k.ACCURACY_ENV, raising=False)
    assert gsm8k.accuracy() == 1.0
    monkeypatch.setenv(gsm8k.ACCURACY_ENV, "0.8")
    assert gsm8k.accuracy() == 0.8
    (tmp_path / "acc").write_text("0.25\n")
    monkeypatch.setenv(gsm8k.ACCURACY_FILE_ENV, str(tmp_path / "acc"))
    assert gsm8k.accuracy() == 0.25
    (tmp_path / "acc").write_text("7")
    assert gsm8k.accuracy() == 1.0  # clamped to [0, 1]


def test_chat_answers_the_last_question_of_a_multiturn_fewshot_prompt(monkeypatch, tmp_path):
    monkeypatch.setenv(gsm8k.ACCURACY_FILE_ENV, str(tmp_path / "absent"))
    monkeypatch.setenv(gsm8k.ACCURACY_ENV, "1.0")
    shots, ask = gsm8k.problems(6, 2)[:5], gsm8k.problems(6, 2)[5]
    messages = []
    for r in shots:  # lm-eval --apply_chat_template --fewshot_as_multiturn
        messages += [{"role": "user", "content": f"Question: {r['question']}\nAnswer:"},
                     {"role": "assistant", "content": r["answer"]}]
    messages.append({"role": "user", "content": f"Question: {ask['question']}\nAnswer:"})
    cfg = ApiConfig(engine="vllm", version="0.19.1", served_names=["m"], model_path="/m", reasoning_parser="kimi_k2")
    out = chat_completion(cfg, {"model": "m", "messages": messages})
    content = out["choices"][0]["message"]["content"]
    assert content.endswith("#### " + ask["answer"].rsplit("#### ", 1)[1])
    assert out["choices"][0]["message"]["reasoning_content"]
    monkeypatch.setenv(gsm8k.ACCURACY_ENV, "0.0")
    wrong = chat_completion(cfg, {"model": "m", "messages": messages})["choices"][0]["message"]["content"]
    assert wrong != content and wrong.endswith(f"#### {gsm8k.solve(ask['question']) + 7}")


def test_other_prompts_keep_the_deterministic_answer():
    cfg = ApiConfig(engine="vllm", version="0.19.1", served_names=["m"], model_path="/m")
    out = chat_completion(cfg, {"model": "m", "messages": [{"role": "user", "content": "Say hi"}]})
    assert "deterministic answer" in out["choices"][0]["message"]["content"]
    assert json.dumps(out)
