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

    def post(self, body: bytes, stream: bool = False) -> tuple[bool, float, int, str]:
        t0 = time.perf_counter()
        try:
            self.conn.request("POST", self.path, body=body, headers=self.headers)
            r = self.conn.getresponse()
            if stream and r.status == 200:
                return self._events(r, t0)
            raw = r.read()
            if r.status != 200:
                return False, time.perf_counter() - t0, 0, f"HTTP Error {r.status}: {r.reason}"
            data = json.loads(raw)
            toks = int((data.get("usage") or {}).get("completion_tokens") or 0)
            return True, time.perf_counter() - t0, toks, ""
        except (http.client.HTTPException, OSError, ValueError, TimeoutError) as e:
            self.conn.close()
            return False, time.perf_counter() - t0, 0, str(e)[:200]

    def _events(self, r, t0: float) -> tuple[bool, float, int, str]:
        """A streamed answer (server-sent events): complete only with its `data: [DONE]`; a stream that
        ends before it (the server went away mid-answer) is a failed request, as `vllm bench serve`
        counts it. Tokens: the usage of the last event that has one, else the content events."""
        toks, events, done = 0, 0, False
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            event = json.loads(data)
            if not isinstance(event, dict) or "error" in event:
                self.conn.close()
                return False, time.perf_counter() - t0, 0, f"error event: {data[:160].decode(errors='replace')}"
            usage = event.get("usage") or {}
            toks = int(usage.get("completion_tokens") or 0) or toks
            events += any((c.get("delta") or {}).get("content") for c in event.get("choices") or [])
        if not done:
            self.conn.close()
            return False, time.perf_counter() - t0, 0, "the stream ended before data: [DONE]"
        r.read()
        return True, time.perf_counter() - t0, toks or events, ""

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
              token: str | None = None, stream: bool = False) -> dict:
    """``warmup`` requests go first, one at a time, and are not counted (as `vllm bench serve`'s
    initial test request): kernels compiled on first use stay out of the figures. ``stream``: the
    answers streamed (as `vllm bench serve` asks them); one whose stream breaks off counts as failed."""
    url = base_url.rstrip("/") + "/chat/completions"
    req = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
           "temperature": 0}
    if stream:
        req.update(stream=True, stream_options={"include_usage": True})
    body = json.dumps(req).encode()
    if warmup:
        first = _Client(url, timeout, token)
        for _ in range(warmup):
            first.post(body, stream)
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
                r = client.post(body, stream)
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


# ---------------------------------------------------------------------------------------------
# `vllm bench serve`: the recipes' benchmark, where the engine's own CLI is installed


# the figures kept from vLLM's result JSON (`--save-result`; key names of vllm/benchmarks/serve.py)
VLLM_RESULT_KEYS = (
    "num_prompts", "request_rate", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
    "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
    "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms",
    "median_e2el_ms", "p99_e2el_ms",
)


def vllm_bench_target(service: dict) -> dict | None:
    """Where `vllm bench serve` runs for a plan service that serves the API with the vllm CLI:
    {"prefix": argv before `bench serve`, "model": the model path the server loaded (the tokenizer),
    "container": the container's name or None}; None when the service is not `vllm serve` (SGLang,
    TensorRT-LLM, KTransformers: the stdlib client benchmarks those)."""
    if not isinstance(service, dict) or not service.get("api"):
        return None
    argv = [str(a) for a in service.get("argv") or []]
    ctr = service.get("container") or {}
    if not argv and ctr.get("entrypoint") and ctr.get("command"):
        argv = [str(ctr["entrypoint"]), *[str(a) for a in ctr["command"]]]
    if len(argv) < 2 or argv[0].rsplit("/", 1)[-1] != "vllm" or argv[1] != "serve":
        return None
    rest = argv[2:]
    model = rest[0] if rest and not rest[0].startswith("-") else None
    if model is None and "--model" in rest and rest.index("--model") + 1 < len(rest):
        model = rest[rest.index("--model") + 1]
    if service.get("kind") == "container":
        name = ctr.get("name")
        if not name:
            return None
        # -e NAME without a value: docker passes the variable from its own environment (the key)
        return {"prefix": ["docker", "exec", "-e", "OPENAI_API_KEY", str(name), argv[0]], "model": model,
                "container": str(name)}
    if service.get("exec_in"):
        return None
    return {"prefix": [argv[0]], "model": model, "container": None}


def vllm_bench_argv(prefix: list[str], base_url: str, served_name: str, model: str | None, requests: int,
                    concurrency: int, input_len: int, output_len: int, result_dir: str, result_filename: str,
                    request_rate: float | None = None, warmups: int = 0, ignore_eos: bool = False,
                    trust_remote_code: bool = True) -> list[str]:
    """The recipes' command (seed 001 section 8, seed 003) as an argv array: chat endpoint, random
    dataset, fixed input/output lengths, the result saved as JSON."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    argv = [*prefix, "bench", "serve", "--backend", "openai-chat", "--base-url", root,
            "--endpoint", "/v1/chat/completions", "--served-model-name", served_name]
    if model:
        argv += ["--model", model]
    argv += ["--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(output_len),
             "--num-prompts", str(requests), "--max-concurrency", str(concurrency),
             "--request-rate", "inf" if request_rate is None else str(request_rate),
             "--num-warmups", str(warmups), "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
             "--save-result", "--result-dir", result_dir, "--result-filename", result_filename, "--disable-tqdm"]
    if ignore_eos:
        argv.append("--ignore-eos")
    if trust_remote_code:
        argv.append("--trust-remote-code")
    return argv


def vllm_bench_figures(result: dict, requests: int) -> dict:
    """The figures of a `vllm bench serve` result in the shape of run_bench's (so one gate and one
    report table serve both), with vLLM's own figures beside them under their own names."""
    def num(key):
        v = result.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    completed = int(num("completed") or 0)
    failed = num("failed")
    p99 = num("p99_e2el_ms")
    p50 = num("median_e2el_ms")
    mean = num("mean_e2el_ms")
    out = {
        "tool": "vllm bench serve",
        "requests": requests, "concurrency": result.get("max_concurrency"),
        "succeeded": completed, "failed": int(failed) if failed is not None else max(0, requests - completed),
        "success_rate": round(completed / requests, 4) if requests else 0.0,
        "errors": [e for e in (result.get("errors") or []) if e][:5],
        "duration_s": round(num("duration") or 0.0, 3),
        "request_throughput": round(num("request_throughput") or 0.0, 3),
        "output_token_throughput": round(num("output_throughput") or 0.0, 3),
        "latency_mean_s": round(mean / 1000.0, 4) if mean is not None else None,
        "latency_p50_s": round(p50 / 1000.0, 4) if p50 is not None else None,
        "latency_p99_s": round(p99 / 1000.0, 4) if p99 is not None else None,
    }
    for key in VLLM_RESULT_KEYS:  # vLLM's own names; floats to 3 decimals (the JSON keeps them whole)
        v = result.get(key)
        if key in result and not isinstance(v, (dict, list)):
            out[key] = round(v, 3) if isinstance(v, float) else v
    return out


TOOLS = ("auto", "vllm", "client")


def bench_tool(services: list, tool: str = "auto") -> str:
    """Which benchmark runs for these API services: "vllm" (`vllm bench serve`, the recipes' tool)
    where every one runs `vllm serve`, else "client" (run_bench); bench_tool forces one. ValueError
    names the variable for a choice that cannot be honoured."""
    if tool not in TOOLS:
        raise ValueError(f"bench_tool is {tool!r}, expected one of {', '.join(TOOLS)}")
    if tool == "client":
        return "client"
    missing = [str((s or {}).get("name")) for s in services or [] if vllm_bench_target(s) is None]
    if tool == "vllm" and missing:
        raise ValueError(f"bench_tool: vllm, but {', '.join(missing)} does not run `vllm serve` (no `vllm bench "
                         "serve` to run there); use auto or client")
    return "vllm" if services and not missing else "client"
