"""The accuracy gate: lm-eval's gsm8k against the served endpoint, scored against the recipe.

What the recipes ran (seed 001, "Reference configuration"; seed 003's tables): lm-eval, gsm8k,
5-shot, chat template applied, few-shot examples as a multi-turn chat, greedy decoding
(temperature 0.0, top_p 1.0), up to 2048 output tokens, batch size 1; the figure is
flexible-extract exact_match. This module runs the real lm-eval (``python -m lm_eval``, the pinned
``lm-eval[api]`` of the controller venv) with those settings against an OpenAI-compatible
``/v1/chat/completions`` (model ``local-chat-completions``), the API key in its environment
(OPENAI_API_KEY, never in argv or a log), on a local gsm8k-format JSONL instead of the hub: the task
is lm-eval's own gsm8k.yaml (read from the installed package) with only the dataset replaced
(``dataset_path: json``). The hub is never asked (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE).

The gate: on the full gsm8k test split (1319 questions) the score must reach the recipe's reference
for the deployment's model and platform (data/accuracy.yml) less ``accuracy_tolerance``; on a subset
the reference does not apply (the report says so) and the score must reach ``accuracy_min_score``.

Controller side (the accuracy action plugin); PyYAML for the task file.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog import default_data_dir

TASK = "llmb_gsm8k"
FLEX = "exact_match,flexible-extract"
STRICT = "exact_match,strict-match"
FIGURE = "exact_match_flexible"  # the gated figure's name in results and the report
MASK = "********"
_ANSWER = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)\s*$")


class AccuracyError(ValueError):
    """Bad input or a run that gave no score; the message names the variable or says what failed."""


# ---------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class Settings:
    dataset: str
    fewshot_dataset: str | None = None
    num_fewshot: int = 5
    max_gen_toks: int = 2048
    concurrency: int = 32
    request_timeout_s: int = 600
    timeout_s: int = 3600
    max_retries: int = 3
    tolerance: float = 0.02
    min_score: float | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 1234


def _int(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        else:
            raise AccuracyError(f"{name} must be an integer, found {value!r} ({type(value).__name__})")
    if value < lo or (hi is not None and value > hi):
        raise AccuracyError(f"{name} is {value}, expected {lo}..{hi}" if hi is not None
                            else f"{name} is {value}, expected at least {lo}")
    return value


def _fraction(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise AccuracyError(f"{name} must be a number in [0, 1], found {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise AccuracyError(f"{name} must be a number in [0, 1], found {value!r}") from None
    if not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise AccuracyError(f"{name} is {value!r}, expected a number in [0, 1]")
    return v


def _path(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise AccuracyError(f"{name} must be the path of a gsm8k-format JSONL file on the controller, "
                            f"found {value!r}")
    if any(ord(c) < 32 for c in value):
        raise AccuracyError(f"{name} contains a control character: {value!r}")
    if not os.path.isabs(value):
        raise AccuracyError(f"{name} must be an absolute path, found {value!r}")
    if not os.path.isfile(value):
        raise AccuracyError(f"{name}: no file {value} on the controller (make it once: docs/accuracy.md)")
    return os.path.normpath(value)


def settings_from(args: dict) -> Settings:
    """Settings from the role's variables (names as accuracy_*; a bad value's message names it)."""
    def get(key, default=None):
        v = args.get(key)
        return default if v is None else v

    min_score = args.get("min_score")
    return Settings(
        dataset=_path("accuracy_dataset", args.get("dataset")),
        fewshot_dataset=_path("accuracy_fewshot_dataset", args["fewshot_dataset"])
        if args.get("fewshot_dataset") not in (None, "") else None,
        num_fewshot=_int("accuracy_num_fewshot", get("num_fewshot", 5), 0, 64),
        max_gen_toks=_int("accuracy_max_gen_toks", get("max_gen_toks", 2048), 1, 1 << 20),
        concurrency=_int("accuracy_concurrency", get("concurrency", 32), 1, 4096),
        request_timeout_s=_int("accuracy_request_timeout_s", get("request_timeout_s", 600), 1),
        timeout_s=_int("accuracy_timeout_s", get("timeout_s", 3600), 1),
        max_retries=_int("accuracy_max_retries", get("max_retries", 3), 1, 100),
        tolerance=_fraction("accuracy_tolerance", get("tolerance", 0.02)),
        min_score=None if min_score in (None, "") else _fraction("accuracy_min_score", min_score),
    )


def read_dataset(path: str, var: str = "accuracy_dataset") -> dict:
    """{path, questions, sha256} of a gsm8k-format JSONL (one object a line: question, answer ending
    in '#### N'); AccuracyError naming the variable and the line otherwise."""
    h = hashlib.sha256()
    n = 0
    try:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                h.update(raw)
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except ValueError as e:
                    raise AccuracyError(f"{var}: {path} line {lineno} is not JSON ({e})") from None
                if not isinstance(row, dict):
                    raise AccuracyError(f"{var}: {path} line {lineno} is not an object with question and answer")
                q, a = row.get("question"), row.get("answer")
                if not isinstance(q, str) or not q.strip():
                    raise AccuracyError(f"{var}: {path} line {lineno} has no question (gsm8k format: "
                                        '{"question": ..., "answer": "... #### N"})')
                if not isinstance(a, str) or not _ANSWER.search(a):
                    raise AccuracyError(f"{var}: {path} line {lineno}: the answer does not end in '#### N' "
                                        "(gsm8k format)")
                n += 1
    except OSError as e:
        raise AccuracyError(f"{var}: cannot read {path}: {e.strerror or e}") from None
    if n == 0:
        raise AccuracyError(f"{var}: {path} holds no question")
    return {"path": path, "questions": n, "sha256": h.hexdigest()}


# ---------------------------------------------------------------------------------------------
# references and the gate


def load_references(data_dir: str | os.PathLike | None = None) -> dict:
    import yaml  # controller side only

    path = Path(data_dir or default_data_dir()) / "accuracy.yml"
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise AccuracyError(f"cannot read the accuracy references {path}: {e}") from None
    if not isinstance(doc.get("references"), list) or not isinstance(doc.get("full_test_questions"), int):
        raise AccuracyError(f"{path}: expected full_test_questions (int) and references (list)")
    return doc


def find_reference(doc: dict, model: str | None, platform: str | None, dcp: int | None = 1) -> dict | None:
    for r in doc.get("references") or []:
        if (isinstance(r, dict) and r.get("model") == model and r.get("platform") == platform
                and int(r.get("decode_context_parallel", 1)) == int(dcp or 1)):
            return r
    return None


def plan_gate(s: Settings, dataset: dict, doc: dict, model: str | None, platform: str | None,
              dcp: int | None = 1) -> dict:
    """What the run is gated on, before it runs: {full, minimum, thresholds, reference, note}.
    A subset without accuracy_min_score (or the full set with neither a reference nor a minimum) is
    an input error, raised before lm-eval is started."""
    full_n = int(doc["full_test_questions"])
    full = dataset["questions"] == full_n
    ref = find_reference(doc, model, platform, dcp)
    where = f"model {model} on platform {platform}" + (f" with DCP {dcp}" if (dcp or 1) != 1 else "")
    ref_text = None
    if ref:
        ref_text = (f"{ref['exact_match_flexible']}" + (f" ± {ref['stderr']}" if ref.get("stderr") else "")
                    + f" ({ref.get('source')}: {ref.get('setup')}; full gsm8k, {full_n} questions)")
    note = None
    if full and ref:
        minimum = round(float(ref["exact_match_flexible"]) - s.tolerance, 4)
        if s.min_score is not None:
            minimum = max(minimum, s.min_score)
        basis = f"the recipe's reference {ref['exact_match_flexible']} less accuracy_tolerance {s.tolerance}"
    elif full:
        if s.min_score is None:
            raise AccuracyError(f"accuracy_min_score: data/accuracy.yml has no gsm8k reference for {where}; "
                                "set accuracy_min_score (the minimum flexible-extract exact_match)")
        minimum = s.min_score
        basis = f"accuracy_min_score (no recipe reference for {where})"
        note = f"no recipe reference for {where}"
    else:
        if s.min_score is None:
            hint = (f" (the recipe's {ref['exact_match_flexible']} on the full set, less a margin for the "
                    "smaller sample)") if ref else ""
            raise AccuracyError(
                f"accuracy_min_score: required when accuracy_dataset is not the full gsm8k test split "
                f"({dataset['questions']} of {full_n} questions): the recipe's reference applies to the full "
                f"split only; set the minimum flexible-extract exact_match{hint}")
        minimum = s.min_score
        basis = "accuracy_min_score"
        note = (f"subset of gsm8k: {dataset['questions']} of {full_n} questions; "
                + ("the recipe's reference applies to the full test split and is shown for information only"
                   if ref else f"no recipe reference for {where} (references apply to the full test split)")
                + f"; gated on accuracy_min_score {s.min_score}")
        if ref_text:
            ref_text += f"; not comparable: this run has {dataset['questions']} questions"
    return {"full": full, "minimum": minimum, "basis": basis, "note": note,
            "thresholds": {FIGURE: f">= {minimum:g}"},
            "reference": {FIGURE: ref_text} if ref_text else {},
            "reference_source": ref.get("source") if ref else None}


def gate(figures: dict, plan: dict) -> list[str]:
    """Violations as sentences; [] when the score reaches the minimum."""
    score = figures.get(FIGURE)
    if not isinstance(score, (int, float)):
        return ["no flexible-extract exact_match in lm-eval's results"]
    if score < plan["minimum"]:
        return [f"gsm8k flexible-extract exact_match {score:.4f} < {plan['minimum']:g} ({plan['basis']})"]
    return []


# ---------------------------------------------------------------------------------------------
# lm-eval


def lm_eval_dir() -> Path:
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.origin:
        raise AccuracyError("lm-eval is not installed in the controller venv: run `make venv` "
                            "(pyproject.toml pins lm-eval[api])")
    return Path(spec.origin).parent


def task_config(base: dict, dataset: str, fewshot: str | None = None) -> dict:
    """lm-eval's gsm8k task with the dataset replaced by local JSONL files (no hub): the test split is
    ``dataset``; the few-shot pool is ``fewshot`` (gsm8k's train split) or, without one, the test
    file itself, lm-eval leaving out the question being asked."""
    cfg = {k: v for k, v in base.items() if k not in ("tag", "dataset_name", "dataset_kwargs")}
    files = {"test": dataset}
    if fewshot:
        files["train"] = fewshot
    cfg.update(task=TASK, dataset_path="json", dataset_kwargs={"data_files": files},
               training_split="train" if fewshot else None, fewshot_split="train" if fewshot else "test",
               test_split="test")
    return cfg


def base_task(lm_eval_root: Path | None = None) -> dict:
    import yaml

    path = (lm_eval_root or lm_eval_dir()) / "tasks" / "gsm8k" / "gsm8k.yaml"
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise AccuracyError(f"cannot read lm-eval's gsm8k task {path}: {e}") from None


def _model_arg(name: str, value: str) -> str:
    # lm-eval splits model_args on "," and "="
    if not value or any(c in value for c in ",= \t\n"):
        raise AccuracyError(f"{name} {value!r} cannot be passed to lm-eval (no comma, '=' or space)")
    return value


def chat_url(base_url: str) -> str:
    if not re.match(r"^https?://[^\s/]+(/\S*)?$", str(base_url or "")):
        raise AccuracyError(f"endpoint {base_url!r} is not an http(s) URL")
    return str(base_url).rstrip("/") + "/chat/completions"


def lm_eval_argv(python: str, base_url: str, model: str, include_dir: str, out_dir: str, s: Settings) -> list[str]:
    """The recipe's lm-eval command line (seed 001) as an argv array."""
    margs = ",".join([
        f"model={_model_arg('served model name', model)}",
        f"base_url={_model_arg('endpoint', chat_url(base_url))}",
        f"num_concurrent={s.concurrency}",
        f"max_retries={s.max_retries}",
        f"timeout={s.request_timeout_s}",
        "tokenized_requests=False",
    ])
    return [python, "-m", "lm_eval", "run",
            "--model", "local-chat-completions", "--model_args", margs,
            "--tasks", TASK, "--include_path", include_dir,
            "--num_fewshot", str(s.num_fewshot), "--apply_chat_template", "--fewshot_as_multiturn",
            "--gen_kwargs", f"temperature={s.temperature},top_p={s.top_p},max_gen_toks={s.max_gen_toks}",
            "--batch_size", "1", "--seed", str(s.seed), "--output_path", out_dir]


def lm_eval_env(base: dict, api_key: str | None, cache_dir: str) -> dict:
    env = {k: v for k, v in base.items() if k not in ("OPENAI_API_KEY",)}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=cache_dir, HF_DATASETS_CACHE=cache_dir,
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", NO_COLOR="1")
    # lm-eval's local-chat-completions sends "Authorization: Bearer $OPENAI_API_KEY"
    env["OPENAI_API_KEY"] = api_key or ""
    return env


def redact(text: str, secrets: list[str | None]) -> str:
    """text with every secret and every Bearer token masked (lm-eval prints request headers when a
    request fails)."""
    for s in secrets:
        if s:
            text = text.replace(s, MASK)
    return re.sub(r"(?i)(bearer\s+)[^\s'\",)]+", r"\1" + MASK, text)


def parse_results(out_dir: str) -> dict:
    files = sorted(glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True))
    if not files:
        raise AccuracyError("lm-eval wrote no results file")
    try:
        doc = json.loads(Path(files[-1]).read_text())
    except (OSError, ValueError) as e:
        raise AccuracyError(f"lm-eval's results {files[-1]} cannot be read: {e}") from None
    res = (doc.get("results") or {}).get(TASK) or {}
    if FLEX not in res:
        raise AccuracyError(f"lm-eval's results {files[-1]} have no {FLEX} for {TASK}")

    def num(key):
        v = res.get(key)
        return round(float(v), 4) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None

    n = ((doc.get("n-samples") or {}).get(TASK) or {}).get("effective")
    return {FIGURE: num(FLEX), "exact_match_strict": num(STRICT),
            "stderr": num("exact_match_stderr,flexible-extract"),
            "questions": n if isinstance(n, int) else res.get("sample_len"),
            "task_version": ((doc.get("versions") or {}).get(TASK)),
            "lm_eval_version": doc.get("lm_eval_version"),
            "results_file": files[-1]}


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(base_url: str, model: str, s: Settings, plan: dict, api_key: str | None = None,
        out_dir: str | None = None, log_path: str | None = None, python: str | None = None,
        lm_eval_root: Path | None = None) -> dict:
    """Run lm-eval once against base_url and gate its score. Returns the run's row
    {endpoint, model, exact_match_flexible, exact_match_strict, stderr, questions, duration_s, ...,
    violations, error}; never raises for a failed run (the caller records it, then fails)."""
    row: dict[str, Any] = {"endpoint": base_url, "model": model}
    work = tempfile.mkdtemp(prefix="llmb-accuracy-")
    try:
        tasks = os.path.join(work, "tasks")
        os.makedirs(tasks)
        import yaml

        cfg = task_config(base_task(lm_eval_root), s.dataset, s.fewshot_dataset)
        Path(tasks, f"{TASK}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        out = out_dir or os.path.join(work, "out")
        if out_dir and os.path.isdir(out_dir):
            shutil.rmtree(out_dir)  # this run's results only
        argv = lm_eval_argv(python or sys.executable, base_url, model, tasks, out, s)
        env = lm_eval_env(dict(os.environ), api_key, os.path.join(work, "hf"))
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=s.timeout_s)
            output, rc = (proc.stdout or "") + (proc.stderr or ""), proc.returncode
        except subprocess.TimeoutExpired as e:
            output = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")) \
                + ((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
            rc = None
        row["duration_s"] = round(time.monotonic() - t0, 1)
        output = redact(output, [api_key])
        if log_path:
            os.makedirs(os.path.dirname(log_path), exist_ok=True)
            Path(log_path).write_text(output)
            row["log"] = log_path
        if rc is None:
            raise AccuracyError(f"lm-eval did not finish within {s.timeout_s} s (accuracy_timeout_s); "
                                f"last lines:\n{_tail(output)}")
        if rc != 0:
            if "No module named lm_eval" in output:
                raise AccuracyError("lm-eval is not installed in the controller venv: run `make venv`")
            raise AccuracyError(f"lm-eval exited with status {rc}; last lines:\n{_tail(output)}")
        row.update(parse_results(out))
        row["violations"] = gate(row, plan)
    except AccuracyError as e:
        row["error"] = str(e)
        row["violations"] = [str(e).splitlines()[0]]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return row


def record(rows: list[dict], plan: dict | None, dataset: dict | None, s: Settings | None,
           skipped: str | None = None) -> dict:
    """The stage's result for llmb_record: ok, the runs, thresholds and reference (the report shows
    each figure against them), the dataset, the settings, the note and the error of a failed gate."""
    if skipped:
        return {"ok": True, "skipped": skipped, "runs": [], "note": skipped}
    violations = [v for r in rows for v in r.get("violations") or []]
    data: dict[str, Any] = {
        "ok": not violations,
        "runs": [{k: v for k, v in r.items() if k not in ("violations", "error")} for r in rows],
        "thresholds": (plan or {}).get("thresholds") or {},
        "reference": (plan or {}).get("reference") or {},
        "full_test_split": (plan or {}).get("full"),
        "dataset": dataset,
        "settings": {"task": "gsm8k", "num_fewshot": s.num_fewshot, "apply_chat_template": True,
                     "fewshot_as_multiturn": True, "temperature": s.temperature, "top_p": s.top_p,
                     "max_gen_toks": s.max_gen_toks, "batch_size": 1, "num_concurrent": s.concurrency,
                     "fewshot_dataset": s.fewshot_dataset} if s else None,
    }
    if plan and plan.get("note"):
        data["note"] = plan["note"]
    if violations:
        data["error"] = "accuracy gate: " + "; ".join(v.splitlines()[0] for v in violations)
        errors = [r["error"] for r in rows if r.get("error")]
        if errors:
            data["errors"] = errors
    return data


def problems(args: dict, model: str | None, platform: str | None, dcp: int | None = 1) -> list[str]:
    """What the accuracy stage would refuse, checked by preflight before any host is touched: the
    settings, the dataset files and the gate (a subset without accuracy_min_score...). [] when the
    gate can run, or when accuracy_dataset is not set (the gate does not run)."""
    if args.get("dataset") in (None, ""):
        return []
    try:
        s = settings_from(args)
        dataset = read_dataset(s.dataset)
        if s.fewshot_dataset:
            read_dataset(s.fewshot_dataset, "accuracy_fewshot_dataset")
        plan_gate(s, dataset, load_references(), model, platform, dcp)
    except AccuracyError as e:
        return [str(e)]
    return []
