"""gsm8k-format arithmetic word problems: our own generator (test data) and the double's solver.

`problems(n, seed)` makes n questions in gsm8k's JSONL format (``question``; ``answer`` ending in
``#### N``) from a few templates of simple arithmetic word problems. The data is ours, generated
here: nothing of the real gsm8k is copied or fetched.

`answer(question)` is what the engine double (api.chat_completion) says to a gsm8k prompt: it parses
the question with the templates' patterns, computes the result and answers in gsm8k's style; for a
deterministic fraction of the questions, 1 - accuracy, it answers a wrong number. The accuracy is
read at each request: the file LLMB_ENGINESIM_GSM8K_ACCURACY_FILE (default
/etc/llmb-enginesim/gsm8k-accuracy) when present, else env LLMB_ENGINESIM_GSM8K_ACCURACY, else 1.0.
`expected_score(questions, accuracy)` is the exact_match the double then earns (the tests' oracle).

Standard library only (the double runs on the nodes' python3).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path

ACCURACY_ENV = "LLMB_ENGINESIM_GSM8K_ACCURACY"
ACCURACY_FILE_ENV = "LLMB_ENGINESIM_GSM8K_ACCURACY_FILE"
DEFAULT_ACCURACY_FILE = "/etc/llmb-enginesim/gsm8k-accuracy"

_NAMES = ["Ann", "Ben", "Carla", "Dev", "Elif", "Farid", "Grace", "Hiro", "Ines", "Jon"]
_ITEMS = ["apples", "pencils", "marbles", "stickers", "cookies", "books", "shells", "cards"]

# (pattern, how to compute) of every template; the generator below writes exactly these sentences
_PATTERNS = [
    (re.compile(r"^(\w+) has (\d+) (\w+)\. \w+ buys (\d+) more \3 and gives (\d+) \3 to a friend\. "
                r"How many \3 does \1 have now\?$"),
     lambda g: int(g[1]) + int(g[3]) - int(g[4])),
    (re.compile(r"^A box holds (\d+) (\w+)\. (\w+) buys (\d+) boxes\. How many \2 does \3 have in all\?$"),
     lambda g: int(g[0]) * int(g[3])),
    (re.compile(r"^(\w+) shares (\d+) (\w+) equally among (\d+) friends\. "
                r"How many \3 does each friend get\?$"),
     lambda g: int(g[1]) // int(g[3])),
    (re.compile(r"^(\w+) earns \$(\d+) per hour and works (\d+) hours on Monday and (\d+) hours on "
                r"Tuesday\. How many dollars does \1 earn in total\?$"),
     lambda g: int(g[1]) * (int(g[2]) + int(g[3]))),
]


def _problem(rnd: random.Random) -> tuple[str, str, int]:
    """(question, worked answer, result) of one generated problem."""
    name, item = rnd.choice(_NAMES), rnd.choice(_ITEMS)
    kind = rnd.randrange(4)
    if kind == 0:
        a, b = rnd.randint(5, 60), rnd.randint(2, 40)
        c = rnd.randint(1, a + b - 1)
        r = a + b - c
        who = "She" if name in ("Ann", "Carla", "Elif", "Grace", "Ines") else "He"
        q = (f"{name} has {a} {item}. {who} buys {b} more {item} and gives {c} {item} to a friend. "
             f"How many {item} does {name} have now?")
        work = f"{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {item}, then {a + b} - {c} = <<{a + b}-{c}={r}>>{r}."
    elif kind == 1:
        a, b = rnd.randint(2, 24), rnd.randint(2, 15)
        r = a * b
        q = f"A box holds {a} {item}. {name} buys {b} boxes. How many {item} does {name} have in all?"
        work = f"{b} boxes of {a} {item} are {b} * {a} = <<{b}*{a}={r}>>{r} {item}."
    elif kind == 2:
        r, b = rnd.randint(2, 20), rnd.randint(2, 9)
        q = f"{name} shares {r * b} {item} equally among {b} friends. How many {item} does each friend get?"
        work = f"Each friend gets {r * b} / {b} = <<{r * b}/{b}={r}>>{r} {item}."
    else:
        a, b, c = rnd.randint(8, 30), rnd.randint(1, 9), rnd.randint(1, 9)
        r = a * (b + c)
        q = (f"{name} earns ${a} per hour and works {b} hours on Monday and {c} hours on Tuesday. "
             f"How many dollars does {name} earn in total?")
        work = f"{name} works {b} + {c} = <<{b}+{c}={b + c}>>{b + c} hours and earns {a} * {b + c} = <<{a}*{b + c}={r}>>{r}."
    return q, f"{work}\n#### {r}", r


def problems(n: int, seed: int = 0) -> list[dict]:
    """n distinct gsm8k-format rows {question, answer} (answer ends in '#### N')."""
    rnd = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        q, a, _ = _problem(rnd)
        if q not in seen:
            seen.add(q)
            out.append({"question": q, "answer": a})
    return out


def write_jsonl(path, rows: list[dict]) -> Path:
    p = Path(path)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def solve(question: str) -> int | None:
    """The result of a generated problem, parsed from its text; None for any other text."""
    q = " ".join(str(question).split())
    for pattern, compute in _PATTERNS:
        m = pattern.match(q)
        if m:
            return compute(m.groups())
    return None


def accuracy() -> float:
    """The fraction of questions answered right, read at each request (file, else env, else 1.0)."""
    path = Path(os.environ.get(ACCURACY_FILE_ENV, DEFAULT_ACCURACY_FILE))
    text = None
    try:
        text = path.read_text().strip()
    except OSError:
        text = os.environ.get(ACCURACY_ENV)
    try:
        value = float(text) if text not in (None, "") else 1.0
    except ValueError:
        value = 1.0
    return min(1.0, max(0.0, value))


def answers_right(question: str, acc: float) -> bool:
    """Whether the double answers this question right at accuracy acc: a fixed draw in [0, 1) per
    question (sha256 of its text) below acc."""
    q = " ".join(str(question).split())
    draw = int(hashlib.sha256(q.encode()).hexdigest()[:12], 16) / float(16**12)
    return draw < acc


def expected_score(questions: list[str], acc: float) -> float:
    """The exact_match the double earns on these questions at accuracy acc."""
    if not questions:
        return 0.0
    return sum(answers_right(q, acc) for q in questions) / len(questions)


_PROMPT = re.compile(r"Question:\s*(.*?)\s*Answer:\s*$", re.S)


def question_of(prompt: str) -> str | None:
    """The question of a gsm8k prompt ('Question: ...\\nAnswer:'), None for other text."""
    m = _PROMPT.search(str(prompt or ""))
    return m.group(1) if m else None


def answer(prompt: str, acc: float | None = None) -> str | None:
    """The double's gsm8k-style answer to a prompt, or None when it is no generated problem."""
    q = question_of(prompt)
    if q is None:
        return None
    right = solve(q)
    if right is None:
        return None
    acc = accuracy() if acc is None else acc
    value = right if answers_right(q, acc) else right + 7
    return f"Working it out step by step, the result is {value}.\n#### {value}"
