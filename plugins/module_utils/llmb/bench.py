"""A small closed-loop load generator for OpenAI chat completions (stdlib only).

Sends `requests` chat completions with `concurrency` workers and reports latency percentiles,
request and output-token throughput. It is the stage-6 gate when no engine-native benchmark
(`vllm bench serve`) is configured; thresholds are optional.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
import urllib.parse


class _Client:
    """One worker's HTTP/1.1 connection, kept alive between requests as serving benchmarks' clients
    do (`vllm bench serve` reuses its connections); reopened when the server closed it."""

    def __init__(self, url: str, timeout: float, token: str | None = None):
        u = urllib.parse.urlsplit(url)
        self.headers = {"Content-Type": "application/json"}
        if token:  # the API key (llmb_api_key) as vLLM takes it
            self.headers["Authorization"] = f"Bearer {token}"
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(u.hostname or "127.0.0.1", u.port, timeout=timeout)
        self.path = u.path + (f"?{u.query}" if u.query else "")

    def post(self, body: bytes) -> tuple[bool, float, int, str]:
        t0 = time.perf_counter()
        try:
            self.conn.request("POST", self.path, body=body, headers=self.headers)
            r = self.conn.getresponse()
            raw = r.read()
            if r.status != 200:
                return False, time.perf_counter() - t0, 0, f"HTTP Error {r.status}: {r.reason}"
            data = json.loads(raw)
            toks = int((data.get("usage") or {}).get("completion_tokens") or 0)
            return True, time.perf_counter() - t0, toks, ""
        except (http.client.HTTPException, OSError, ValueError, TimeoutError) as e:
            self.conn.close()
            return False, time.perf_counter() - t0, 0, str(e)[:200]

    def close(self) -> None:
        self.conn.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def run_bench(base_url: str, model: str, requests: int = 32, concurrency: int = 4, max_tokens: int = 64,
              prompt: str = "Write a haiku about GPUs.", timeout: float = 300, warmup: int = 0,
              token: str | None = None) -> dict:
    """``warmup`` requests go first, one at a time, and are not counted (as `vllm bench serve`'s
    initial test request): kernels compiled on first use stay out of the figures."""
    url = base_url.rstrip("/") + "/chat/completions"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    if warmup:
        first = _Client(url, timeout, token)
        for _ in range(warmup):
            first.post(body)
        first.close()
    results: list[tuple[bool, float, int, str]] = []
    lock = threading.Lock()
    todo = list(range(requests))

    def worker():
        client = _Client(url, timeout, token)
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    todo.pop()
                r = client.post(body)
                with lock:
                    results.append(r)
        finally:
            client.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(max(1, concurrency))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[0]]
    lat = [r[1] for r in ok]
    toks = sum(r[2] for r in ok)
    return {
        "requests": requests, "concurrency": concurrency, "succeeded": len(ok), "failed": len(results) - len(ok),
        "success_rate": round(len(ok) / requests, 4) if requests else 0.0,
        "errors": sorted({r[3] for r in results if not r[0]})[:5],
        "duration_s": round(wall, 3),
        "request_throughput": round(len(ok) / wall, 3) if wall else 0.0,
        "output_token_throughput": round(toks / wall, 3) if wall else 0.0,
        "latency_mean_s": round(statistics.fmean(lat), 4) if lat else None,
        "latency_p50_s": round(percentile(lat, 0.5), 4) if lat else None,
        "latency_p99_s": round(percentile(lat, 0.99), 4) if lat else None,
    }


def gate(result: dict, min_success_rate: float = 1.0, min_output_tok_s: float | None = None,
         max_p99_s: float | None = None) -> list[str]:
    """Threshold violations, as sentences; [] when the run passes."""
    bad = []
    rate = result["succeeded"] / result["requests"] if result["requests"] else 0.0
    if rate < min_success_rate:
        bad.append(f"success rate {rate:.2%} < {min_success_rate:.2%} (errors: {result['errors']})")
    if min_output_tok_s is not None and result["output_token_throughput"] < min_output_tok_s:
        bad.append(f"output throughput {result['output_token_throughput']} tok/s < {min_output_tok_s}")
    if max_p99_s is not None and (result["latency_p99_s"] or 0) > max_p99_s:
        bad.append(f"p99 latency {result['latency_p99_s']} s > {max_p99_s}")
    return bad
