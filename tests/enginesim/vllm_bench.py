"""`vllm bench serve` stand-in: the real release's option names (data/engines/bench/vllm-<version>.yml,
walked from vLLM's own parser by scripts/bench-catalog), a real closed-loop benchmark against the API
(HTTP, OPENAI_API_KEY sent as a Bearer token as vLLM's client does), and the result JSON with vLLM's
key names (`--save-result --result-dir --result-filename`). Standard library only."""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse
from datetime import datetime
from pathlib import Path

from . import flagset

USAGE = "usage: vllm bench serve [options]"


def load(version: str | None = None) -> dict:
    """The bench serve flag set: of the given/installed release when shipped, else the newest."""
    directory = flagset.data_dir() / "bench"
    docs = {p.stem: flagset.read_doc(p) for p in directory.glob("vllm-*.yml")}
    if not docs:
        raise SystemExit(f"enginesim: no `vllm bench serve` flag set in {directory}")
    version = version or flagset._installed_version("vllm")
    name = f"vllm-{version}"
    if name not in docs:
        name = max(docs, key=lambda n: flagset.version_key(str(docs[n].get("version"))))
    return docs[name]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _one(url: str, body: bytes, headers: dict, timeout: float) -> dict:
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", u.path, body=body, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        latency = time.perf_counter() - t0
        if r.status != 200:
            return {"ok": False, "latency": latency, "error": f"HTTP {r.status}: {raw[:200].decode(errors='replace')}"}
        data = json.loads(raw)
        usage = data.get("usage") or {}
        return {"ok": True, "latency": latency, "out": int(usage.get("completion_tokens") or 0),
                "in": int(usage.get("prompt_tokens") or 0), "error": ""}
    except (OSError, ValueError, http.client.HTTPException) as e:
        return {"ok": False, "latency": time.perf_counter() - t0, "error": str(e)[:200]}
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    fs = load()
    try:
        args, pos = flagset.parse(fs, argv, max_positionals=0)
    except flagset.UsageError as err:
        print(USAGE, file=sys.stderr)
        print(f"vllm bench serve: error: {err}", file=sys.stderr)
        return 2
    get = lambda k: args.get(k, fs["flags"][k].get("default"))  # noqa: E731
    base = get("--base-url") or f"http://{get('--host') or '127.0.0.1'}:{get('--port') or 8000}"
    url = base.rstrip("/") + get("--endpoint")
    model_id = get("--model")
    served = get("--served-model-name") or model_id
    n, conc = int(get("--num-prompts")), get("--max-concurrency")
    in_len, out_len = int(get("--random-input-len")), int(get("--random-output-len"))
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    prompt = " ".join(["benchmark"] * max(1, in_len))
    body = json.dumps({"model": served, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": out_len, "temperature": 0.0, "stream": False}).encode()
    print(f"Starting initial single prompt test run... ({url})", flush=True)
    first = _one(url, body, headers, 60)
    if not first["ok"]:
        print(f"ValueError: Initial test run failed - Please make sure benchmark arguments are correctly "
              f"specified. Error: {first['error']}", file=sys.stderr)
        return 1
    for _ in range(int(get("--num-warmups") or 0)):
        _one(url, body, headers, 60)
    results: list[dict] = []
    lock = threading.Lock()
    todo = list(range(n))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            r = _one(url, body, headers, 300)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(max(1, int(conc or n)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - t0
    ok = [r for r in results if r["ok"]]
    out_tokens = sum(r["out"] for r in ok)
    in_tokens = sum(r["in"] for r in ok)
    e2el = [r["latency"] * 1000 for r in ok]
    ttft = [x * 0.1 for x in e2el]  # no streaming here: the first token counted at a tenth of the request
    tpot = [(r["latency"] * 1000 * 0.9) / max(1, r["out"] - 1) for r in ok]
    rate = get("--request-rate")
    result = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": get("--backend"),
        "backend": get("--backend"), "label": get("--label"), "model_id": model_id,
        "tokenizer_id": get("--tokenizer") or model_id, "num_prompts": n,
        "request_rate": "inf" if str(rate) == "inf" or float(rate) == float("inf") else float(rate),
        "burstiness": get("--burstiness"), "max_concurrency": conc,
        "duration": duration, "completed": len(ok), "failed": len(results) - len(ok),
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration if duration else 0.0, "request_goodput": None,
        "output_throughput": out_tokens / duration if duration else 0.0,
        "total_token_throughput": (in_tokens + out_tokens) / duration if duration else 0.0,
        "max_output_tokens_per_s": out_tokens / duration if duration else 0.0,
        "max_concurrent_requests": int(conc or n),
    }
    selected = (get("--percentile-metrics") or "ttft,tpot,itl").split(",")
    pcts = [float(p) for p in str(get("--metric-percentiles")).split(",")]
    for key, vals in (("ttft", ttft), ("tpot", tpot), ("itl", tpot), ("e2el", e2el)):
        if key not in selected:
            continue
        result[f"mean_{key}_ms"] = statistics.fmean(vals) if vals else 0.0
        result[f"median_{key}_ms"] = statistics.median(vals) if vals else 0.0
        result[f"std_{key}_ms"] = statistics.pstdev(vals) if vals else 0.0
        for p in pcts:
            word = str(int(p)) if int(p) == p else str(p)
            result[f"p{word}_{key}_ms"] = _pct(vals, p)
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print("{:<40} {:<10}".format("Successful requests:", len(ok)))
    print("{:<40} {:<10}".format("Failed requests:", len(results) - len(ok)))
    print("{:<40} {:<10.2f}".format("Benchmark duration (s):", duration))
    print("{:<40} {:<10.2f}".format("Output token throughput (tok/s):", result["output_throughput"]))
    print("=" * 50, flush=True)
    if get("--save-result"):
        name = get("--result-filename") or f"{get('--backend')}-{rate}qps-{str(model_id).split('/')[-1]}.json"
        if get("--result-dir"):
            os.makedirs(get("--result-dir"), exist_ok=True)
            name = os.path.join(get("--result-dir"), name)
        Path(name).write_text(json.dumps(result))
    return 0
