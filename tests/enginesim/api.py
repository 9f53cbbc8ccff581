"""The OpenAI-compatible HTTP API of the stand-ins (deterministic answers).

/health (200 when ready, 503 while loading or with the never_healthy fault), /v1/models,
/v1/chat/completions (content, reasoning_content with a reasoning parser, tool calls when tools
are given and tool calling is on, 404 for an unknown model like vLLM; a gsm8k prompt of our generated
problems is answered as enginesim.gsm8k says, right for a configurable fraction), /v1/completions,
/version. SGLang's /get_load (the requests it runs) and its stop: on SIGTERM its /health answers
503 and it goes on serving until a check finds no request running (serve_until_signal).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import gsm8k, kimiformat
from .runtime import Log, env_float, request_seconds, serve_in_thread, wait_for_signal


@dataclass
class ApiConfig:
    engine: str  # vllm | vllm-ascend | sglang | trtllm
    version: str
    served_names: list[str]
    model_path: str
    max_model_len: int = 4096
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    auto_tool_choice: bool = False
    faults: set[str] = field(default_factory=set)
    # vLLM's --api-key / VLLM_API_KEY: a Bearer token required on /v1/* (401 without), /health open
    api_keys: list[str] = field(default_factory=list)
    pd: Any = None  # pd.PdWorker of a prefill/decode worker (SGLang --disaggregation-mode)
    # the format the served checkpoint writes (kimiformat.model_format of its config.json): answers go
    # through the server's parsers as raw text of that format; None: structured directly
    model_format: str | None = None
    # the server takes images (a vision tower in config.json, not served --language-model-only)
    vision: bool = False
    # vLLM's native multi-node rank 0: () -> why the group lost a node, or None. The real vLLM 0.26.0
    # keeps /health 200 after a node is lost, fails the next request with 500 (its collective meets
    # the dead ranks: "NCCL error: remote process exited") and its API then exits with status 0
    # (docs/examples/serve-real-multinode/faults/kill-rank/)
    group_lost: Any = None


def _words(text: str) -> int:
    return len(text.split())


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _images(messages: list) -> list[str]:
    """The image_url URLs of the messages' content parts (OpenAI multimodal chat)."""
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                url = part.get("image_url")
                out.append(str(url.get("url") if isinstance(url, dict) else url or ""))
    return out


def _image_size(url: str) -> tuple[int, int]:
    """(width, height) of a data: URL PNG; ApiError 400 for an image the server cannot read."""
    head, _, data = url.partition(",")
    if not head.startswith("data:image/") or ";base64" not in head:
        raise ApiError(400, f"enginesim reads only data:image/...;base64 URLs (no network), got {url[:40]!r}",
                       "BadRequestError", "messages")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise ApiError(400, "the image's base64 data is not valid", "BadRequestError", "messages") from None
    if raw[:8] != b"\x89PNG\r\n\x1a\n" or raw[12:16] != b"IHDR":
        raise ApiError(400, "cannot identify image file (enginesim reads PNG)", "BadRequestError", "messages")
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


def _sample(schema: dict):
    kind = (schema or {}).get("type")
    if "enum" in (schema or {}):
        return schema["enum"][0]
    if kind == "string":
        return "enginesim"
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return [_sample(schema.get("items", {}))]
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {k: _sample(props[k]) for k in required if k in props}
    return None


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {
            "error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}
        }


def tool_calling_enabled(cfg: ApiConfig) -> bool:
    if "no_tool_calls" in cfg.faults:
        return False
    if cfg.engine in ("vllm", "vllm-ascend"):
        return bool(cfg.auto_tool_choice and cfg.tool_call_parser)
    return bool(cfg.tool_call_parser)


def chat_completion(cfg: ApiConfig, req: dict) -> dict:
    """The deterministic answer to one chat request (raises ApiError like the real server)."""
    model = req.get("model")
    if model not in cfg.served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", "BadRequestError", "messages")
    last_user = next(
        (
            _text_of(m.get("content"))
            for m in reversed(messages)
            if isinstance(m, dict) and m.get("role") == "user"
        ),
        "",
    )
    images = _images(messages)
    if images and not cfg.vision:
        raise ApiError(400, f"{cfg.served_names[0]} takes no image input (a text-only model, or served with "
                       "--language-model-only)", "BadRequestError", "messages")
    sizes = [_image_size(u) for u in images]
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]
    tools = req.get("tools") or []
    choice = req.get("tool_choice", "auto" if tools else "none")
    message: dict = {"role": "assistant", "content": None, "tool_calls": []}
    finish = "stop"
    if tools and choice != "none":
        if cfg.engine in ("vllm", "vllm-ascend") and choice == "auto" and not tool_calling_enabled(cfg):
            raise ApiError(
                400,
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "BadRequestError",
            )
        if tool_calling_enabled(cfg) or isinstance(choice, dict):
            tool = tools[0]
            if isinstance(choice, dict):
                wanted = choice.get("function", {}).get("name")
                tool = next((t for t in tools if t.get("function", {}).get("name") == wanted), tool)
            fn = tool.get("function", {})
            message["tool_calls"] = [
                {
                    "id": f"chatcmpl-tool-{digest}",
                    "type": "function",
                    "function": {
                        "name": fn.get("name", "tool"),
                        "arguments": json.dumps(_sample(fn.get("parameters") or {"type": "object"}) or {}),
                    },
                }
            ]
            finish = "tool_calls"
    if finish == "stop":
        seen = "".join(f" [an image of {w}x{h}]" for w, h in sizes)
        message["content"] = gsm8k.answer(last_user) or (
            f"[{cfg.served_names[0]}] deterministic answer {digest} to: {last_user[:200]}{seen}")
    if cfg.reasoning_parser and "no_reasoning" not in cfg.faults:
        message["reasoning_content"] = f"The user wrote {_words(last_user)} words; answer {digest} follows."
    if cfg.model_format and not isinstance(choice, dict):
        # the model's own text, read by the server's parsers (a parser of another format finds nothing)
        calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                 for c in message["tool_calls"]]
        # the double's model thinks when the server reads thinking (as the other paths of this function)
        thought = (f"The user wrote {_words(last_user)} words; answer {digest} follows."
                   if cfg.reasoning_parser and "no_reasoning" not in cfg.faults else None)
        raw = kimiformat.render(cfg.model_format, thought,
                                message["content"], calls)
        reasoning, text, parsed = kimiformat.parse(cfg.tool_call_parser if tool_calling_enabled(cfg) else None,
                                                   cfg.reasoning_parser, raw)
        message["tool_calls"] = parsed
        message["content"] = text or None
        message.pop("reasoning_content", None)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        finish = "tool_calls" if parsed else "stop"
    prompt_tokens = sum(_words(_text_of(m.get("content"))) for m in messages if isinstance(m, dict))
    completion_tokens = _words(message.get("content") or "") + _words(message.get("reasoning_content") or "")
    return {
        "id": f"chatcmpl-{digest}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def text_completion(cfg: ApiConfig, req: dict) -> dict:
    model = req.get("model")
    if model not in cfg.served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    prompt = req.get("prompt", "")
    prompt = prompt if isinstance(prompt, str) else json.dumps(prompt)
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:12]
    text = f" deterministic completion {digest}"
    return {
        "id": f"cmpl-{digest}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": _words(prompt),
            "completion_tokens": _words(text),
            "total_tokens": _words(prompt) + _words(text),
        },
    }


class ApiServer:
    def __init__(self, cfg: ApiConfig, host: str, port: int, log: Log):
        self.cfg = cfg
        self.log = log
        self.ready = threading.Event()
        self.exiting = threading.Event()  # SIGTERM received: SGLang's gracefully_exit
        self.running = 0  # completions in flight (SGLang's /get_load num_reqs)
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # uvicorn-style access log
                pass

            def _send(self, status: int, body, content_type: str = "application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 503: "Service Unavailable"}.get(
                    status, ""
                )
                outer.log.raw(
                    f"INFO:     {self.client_address[0]}:{self.client_address[1]} - "
                    f'"{self.command} {self.path} HTTP/1.1" {status} {reason}'
                )

            def _healthy(self) -> bool:
                return outer.ready.is_set() and "never_healthy" not in outer.cfg.faults

            def _unauthorized(self) -> bool:
                # vLLM's AuthenticationMiddleware (0.19-0.23): paths under /v1 need
                # "Authorization: Bearer <key>"; else 401 {"error": "Unauthorized"}
                if not outer.cfg.api_keys or not self.path.startswith("/v1"):
                    return False
                scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                if scheme.lower() == "bearer" and token in outer.cfg.api_keys:
                    return False
                self._send(401, {"error": "Unauthorized"})
                return True

            def do_GET(self):
                if self._unauthorized():
                    return None
                if self.path == "/health":  # SGLang answers 503 once SIGTERM came (its graceful exit)
                    return self._send(200 if self._healthy() and not outer.exiting.is_set() else 503, b"")
                if self.path == "/get_load" and outer.cfg.engine == "sglang":
                    return self._send(200, [{"dp_rank": 0, "num_reqs": outer.running, "num_waiting_reqs": 0,
                                             "num_tokens": 0}])
                if not self._healthy():
                    return self._send(503, {"error": {"message": "the model is still loading", "code": 503}})
                if self.path == "/v1/models":
                    now = int(time.time())
                    data = [
                        {
                            "id": n,
                            "object": "model",
                            "created": now,
                            "owned_by": outer.cfg.engine,
                            "root": outer.cfg.model_path,
                            "parent": None,
                            "max_model_len": outer.cfg.max_model_len,
                        }
                        for n in outer.cfg.served_names
                    ]
                    return self._send(200, {"object": "list", "data": data})
                if self.path == "/version":
                    return self._send(200, {"version": outer.cfg.version})
                if self.path in ("/model_info", "/get_model_info"):  # what the SGLang router asks
                    return self._send(200, {"model_path": outer.cfg.model_path, "tokenizer_path": outer.cfg.model_path,
                                            "is_generation": True})
                if self.path in ("/server_info", "/get_server_info"):
                    return self._send(200, {"model_path": outer.cfg.model_path,
                                            "served_model_name": outer.cfg.served_names[0],
                                            "disaggregation_mode": outer.cfg.pd.mode if outer.cfg.pd else "null",
                                            "version": outer.cfg.version})
                return self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self._unauthorized():
                    return None
                if not self._healthy():
                    return self._send(503, {"error": {"message": "the model is still loading", "code": 503}})
                try:
                    req = json.loads(raw or b"{}")
                except ValueError:
                    return self._send(400, ApiError(400, "invalid JSON body", "BadRequestError").body())
                lost = outer.cfg.group_lost() if outer.cfg.group_lost and self.path in (
                    "/v1/chat/completions", "/v1/completions") else None
                if lost:
                    outer.log.error(f"RuntimeError: NCCL error: remote process exited or there was a network error "
                                    f"({lost})", "multiproc_executor.py:1007")
                    self._send(500, {"error": {"message": "EngineCore encountered an issue. See stack trace (above) "
                                               "for the root cause.", "type": "InternalServerError", "param": None,
                                               "code": 500}})
                    outer.log.raw("INFO:     Application shutdown complete.")
                    threading.Timer(0.2, os._exit, args=(0,)).start()  # the real API exits 0 here
                    return None
                completion = self.path in ("/v1/chat/completions", "/v1/completions")
                with outer.lock:
                    outer.running += completion
                try:
                    if outer.cfg.pd is not None and completion:
                        outer.cfg.pd.before_chat(req)
                    stream = self.path == "/v1/chat/completions" and req.get("stream")
                    if completion and not stream and request_seconds() > 0:
                        time.sleep(request_seconds())  # generating
                    if self.path == "/v1/chat/completions":
                        resp = chat_completion(outer.cfg, req)
                        if stream:
                            return self._stream(resp)
                        return self._send(200, resp)
                    if self.path == "/v1/completions":
                        return self._send(200, text_completion(outer.cfg, req))
                except ApiError as err:
                    return self._send(err.status, err.body())
                finally:
                    with outer.lock:
                        outer.running -= completion
                return self._send(404, {"detail": "Not Found"})

            def _stream(self, resp: dict):
                msg = resp["choices"][0]["message"]
                chunks = [{"role": "assistant", "content": ""}]
                if msg.get("reasoning_content"):
                    chunks.append({"reasoning_content": msg["reasoning_content"]})
                if msg.get("tool_calls"):
                    chunks.append(
                        {"tool_calls": [dict(tc, index=i) for i, tc in enumerate(msg["tool_calls"])]}
                    )
                if msg.get("content"):
                    chunks.append({"content": msg["content"]})
                lines = []
                for i, delta in enumerate(chunks):
                    finish = resp["choices"][0]["finish_reason"] if i == len(chunks) - 1 else None
                    event = {
                        "id": resp["id"],
                        "object": "chat.completion.chunk",
                        "created": resp["created"],
                        "model": resp["model"],
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                    lines.append(b"data: " + json.dumps(event).encode() + b"\n\n")
                lines.append(b"data: [DONE]\n\n")
                if request_seconds() <= 0:
                    return self._send(200, b"".join(lines), "text/event-stream")
                # generating for request_seconds: the first event at once, the rest when done (chunked,
                # as uvicorn streams); a process that ends meanwhile leaves the stream without [DONE]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i, line in enumerate(lines):
                    if i == 1:
                        time.sleep(request_seconds())
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                outer.log.raw(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "POST {self.path} '
                              'HTTP/1.1" 200 OK')
                return None

        self.httpd = serve_in_thread(
            ThreadingHTTPServer,
            (host, port),
            Handler,
            log,
            lambda exc: (
                f"OSError: [Errno {exc.errno}] error while attempting to bind on address "
                f"({host!r}, {port}): {exc.strerror}"
            ),
            "launcher.py:1",
        )
        self.port = self.httpd.server_address[1]


def serve_until_signal(cfg: ApiConfig, address: tuple[str, int], log: Log, process: str, ready_lines) -> int:
    """Serve the API on address, log ready_lines(bound port) as the engine does once it is up, and
    run until SIGTERM/SIGINT (the exit status of process)."""
    server = ApiServer(cfg, address[0], address[1], log)
    server.ready.set()
    for line in ready_lines(server.port):
        log.info(line)
    if cfg.engine != "sglang":
        return wait_for_signal(log, process)
    # SGLang (0.5.x TokenizerManager.sigterm_watchdog): SIGTERM sets gracefully_exit, /health answers
    # 503, requests are still taken; every 5 s it logs the requests remaining and exits once there are
    # none. Under load that may never come: systemd's TimeoutStopSec then kills it, the requests in
    # flight with it (a router that still sends it requests keeps it busy).
    runtime_signal = wait_for_signal(log, process)
    server.exiting.set()
    poll = env_float("LLMB_ENGINESIM_EXIT_POLL_S", 5.0)
    while True:
        with server.lock:
            remaining = server.running
        log.info(f"Gracefully exiting... Remaining number of requests {remaining}.", where="tokenizer_manager.py:1")
        if remaining == 0:
            return runtime_signal
        time.sleep(poll)


@contextlib.contextmanager
def serving(cfg: ApiConfig):
    """The double's API in this process on a free port of 127.0.0.1, ready: yields its /v1 base URL (unit tests)."""
    from .runtime import Log

    srv = ApiServer(cfg, "127.0.0.1", 0, Log())
    srv.ready.set()
    try:
        yield f"http://127.0.0.1:{srv.port}/v1"
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
