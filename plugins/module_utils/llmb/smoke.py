"""OpenAI-API smoke tests of a served endpoint (stdlib only).

Each check returns a record {check, ok, request, status, found, expected}; a failure names the
request that failed, so an operator can replay it with curl.
"""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
import zlib

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _call(method: str, url: str, body: dict | None, timeout: float, token: str | None = None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        return None, {"error": str(getattr(e, "reason", e))}
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, {"raw": raw[:500].decode(errors="replace")}


# tool_choice "named": the request names the function (OpenAI's {"type": "function", ...}), so the
# engine must return it in tool_calls whatever the weights say (guided decoding): the check for a
# model with random weights. The city is an enum there so the forced JSON arguments stay short.
TOOL_CHOICES = ("auto", "named")


def forced_tool_request(chat: dict) -> dict:
    tool = json.loads(json.dumps(WEATHER_TOOL))
    tool["function"]["parameters"]["properties"]["city"]["enum"] = ["Paris", "London"]
    return dict(chat, messages=[{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
                tools=[tool], tool_choice={"type": "function", "function": {"name": "get_weather"}},
                max_tokens=256)


def png_bytes(width: int = 16, height: int = 16, rgb: tuple[int, int, int] = (220, 30, 30)) -> bytes:
    """A one-colour RGB PNG, written with the standard library (no image package on the controller)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


IMAGE_URL = "data:image/png;base64," + base64.b64encode(png_bytes()).decode("ascii")


def image_request(chat: dict) -> dict:
    """A chat request whose user message carries an image (OpenAI content parts: image_url, text)."""
    return dict(chat, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": IMAGE_URL}},
        {"type": "text", "text": "What colour is this image? Answer in one word."},
    ]}], max_tokens=64)


def run_smoke(base_url: str, model: str, reasoning: bool, tool_calls: bool, timeout: float = 120,
              token: str | None = None, tool_choice: str = "auto", image: bool = False) -> list[dict]:
    base = base_url.rstrip("/")
    checks: list[dict] = []

    def rec(check, ok, request, status, found, expected):
        checks.append({"check": check, "ok": bool(ok), "request": request, "status": status,
                       "found": found, "expected": expected})

    st, body = _call("GET", f"{base}/models", None, timeout, token)
    ids = [d.get("id") for d in (body or {}).get("data", [])] if isinstance(body, dict) else []
    rec("served-model-name", st == 200 and model in ids, f"GET {base}/models", st, ids, f"a model with id {model!r}")

    chat = {"model": model, "messages": [{"role": "user", "content": "Reply with one short sentence: what is 2+2?"}],
            "max_tokens": 64, "temperature": 0}
    st, body = _call("POST", f"{base}/chat/completions", chat, timeout, token)
    msg = ((body or {}).get("choices") or [{}])[0].get("message", {}) if isinstance(body, dict) else {}
    content = msg.get("content") or ""
    rec("chat-completion", st == 200 and bool(content.strip()), f"POST {base}/chat/completions", st,
        content[:200] if st == 200 else body, "HTTP 200 with non-empty content")
    if reasoning:
        rc = msg.get("reasoning_content") or msg.get("reasoning")
        rec("reasoning-content", bool(rc), f"POST {base}/chat/completions (reasoning parser on)", st,
            (rc or None) and rc[:200], "message.reasoning_content present (reasoning parser on)")
    if tool_calls:
        if tool_choice not in TOOL_CHOICES:
            raise ValueError(f"tool_choice must be one of {TOOL_CHOICES}, not {tool_choice!r}")
        tbody = forced_tool_request(chat) if tool_choice == "named" else dict(
            chat, messages=[{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
            tools=[WEATHER_TOOL], tool_choice="auto")
        st, body = _call("POST", f"{base}/chat/completions", tbody, timeout, token)
        tmsg = ((body or {}).get("choices") or [{}])[0].get("message", {}) if isinstance(body, dict) else {}
        calls = tmsg.get("tool_calls") or []
        names = [c.get("function", {}).get("name") for c in calls]
        args_ok = all(_json_ok(c.get("function", {}).get("arguments")) for c in calls)
        rec("tool-call", st == 200 and "get_weather" in names and args_ok,
            f"POST {base}/chat/completions (tools=[get_weather], tool_choice={tool_choice})", st,
            [{"name": n, "arguments": c.get("function", {}).get("arguments")} for n, c in zip(names, calls, strict=True)]
            or tmsg.get("content") or body,
            "a get_weather tool call with JSON arguments")
    if image:
        st, body = _call("POST", f"{base}/chat/completions", image_request(chat), timeout, token)
        imsg = ((body or {}).get("choices") or [{}])[0].get("message", {}) if isinstance(body, dict) else {}
        text = imsg.get("content") or ""
        rec("image-input", st == 200 and bool(text.strip()),
            f"POST {base}/chat/completions (an image_url content part: a 16x16 PNG)", st,
            text[:200] if st == 200 else body, "HTTP 200 with non-empty content for a message with an image")
    wrong = dict(chat, model=model + "-not-served", max_tokens=1)
    st, _ = _call("POST", f"{base}/chat/completions", wrong, timeout, token)
    rec("unknown-model-404", st == 404, f"POST {base}/chat/completions (model={wrong['model']!r})", st, st,
        "HTTP 404 for a model name that is not served")
    return checks


def _json_ok(s) -> bool:
    try:
        json.loads(s) if isinstance(s, str) else None
        return isinstance(s, str)
    except ValueError:
        return False


def failures_text(host: str, checks: list[dict]) -> str:
    bad = [c for c in checks if not c["ok"]]
    lines = [f"{host}: smoke test failed ({len(bad)} of {len(checks)} checks):"]
    for c in bad:
        lines.append(f"  - {c['check']}: {c['request']} -> HTTP {c['status']}; expected {c['expected']}, "
                     f"found {json.dumps(c['found'])[:300]}")
    return "\n".join(lines)
