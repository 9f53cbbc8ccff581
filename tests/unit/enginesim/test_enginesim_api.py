"""The OpenAI API of the double, in-process: answers, reasoning, tool calls, errors, streaming."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from enginesim.api import ApiConfig, ApiError, ApiServer, chat_completion
from enginesim.runtime import Log

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"enum": ["c", "f"]},
                },
                "required": ["city", "unit"],
            },
        },
    }
]


def cfg(**kw):
    base = dict(
        engine="vllm",
        version="0.19.1",
        served_names=["kimi-k2-sim"],
        model_path="/m",
        reasoning_parser="kimi_k2",
        tool_call_parser="kimi_k2",
        auto_tool_choice=True,
    )
    base.update(kw)
    return ApiConfig(**base)


def ask(c, **req):
    body = {"model": "kimi-k2-sim", "messages": [{"role": "user", "content": "What is 2+2?"}]}
    body.update(req)
    return chat_completion(c, body)


def test_answer_is_deterministic_with_reasoning():
    a, b = ask(cfg()), ask(cfg())
    msg = a["choices"][0]["message"]
    assert msg["content"] == b["choices"][0]["message"]["content"] and "What is 2+2?" in msg["content"]
    assert msg["reasoning_content"] and a["choices"][0]["finish_reason"] == "stop"
    assert a["usage"]["total_tokens"] == a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"]


def test_no_reasoning_without_parser_or_with_the_fault():
    assert "reasoning_content" not in ask(cfg(reasoning_parser=None))["choices"][0]["message"]
    assert "reasoning_content" not in ask(cfg(faults={"no_reasoning"}))["choices"][0]["message"]


def test_tool_call_when_tools_are_given():
    resp = ask(cfg(), tools=TOOLS)
    choice = resp["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "enginesim", "unit": "c"}


def test_auto_tool_choice_needs_the_flags_like_vllm():
    with pytest.raises(ApiError) as err:
        ask(cfg(auto_tool_choice=False), tools=TOOLS)
    assert err.value.status == 400 and "--enable-auto-tool-choice" in err.value.message
    # SGLang has no switch: the parser alone enables tool calls; without it tools are ignored
    assert ask(cfg(engine="sglang", auto_tool_choice=False), tools=TOOLS)["choices"][0]["message"][
        "tool_calls"
    ]
    assert ask(cfg(engine="trtllm", tool_call_parser=None), tools=TOOLS)["choices"][0]["message"]["content"]


def test_wrong_model_name_is_404_like_vllm():
    with pytest.raises(ApiError) as err:
        chat_completion(cfg(), {"model": "Kimi-K2-Thinking", "messages": [{"role": "user", "content": "x"}]})
    assert err.value.status == 404
    assert err.value.body()["error"]["message"] == "The model `Kimi-K2-Thinking` does not exist."


def test_http_server_health_models_and_stream():
    server = ApiServer(cfg(), "127.0.0.1", 0, Log())
    base = f"http://127.0.0.1:{server.port}"
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/health", timeout=5)
        assert err.value.code == 503  # still loading
        server.ready.set()
        assert urllib.request.urlopen(base + "/health", timeout=5).status == 200
        models = json.load(urllib.request.urlopen(base + "/v1/models", timeout=5))
        assert [m["id"] for m in models["data"]] == ["kimi-k2-sim"]
        req = urllib.request.Request(
            base + "/v1/chat/completions",
            data=json.dumps(
                {"model": "kimi-k2-sim", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            ).encode(),
        )
        events = urllib.request.urlopen(req, timeout=5).read().decode().split("\n\n")
        assert events[-2] == "data: [DONE]"
        deltas = [json.loads(e[6:])["choices"][0]["delta"] for e in events if e.startswith("data: {")]
        assert any("reasoning_content" in d for d in deltas) and any(d.get("content") for d in deltas)
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def test_never_healthy_fault():
    server = ApiServer(cfg(faults={"never_healthy"}), "127.0.0.1", 0, Log())
    server.ready.set()
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=5)
        assert err.value.code == 503
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
