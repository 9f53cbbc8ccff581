"""The double speaks the Kimi formats (#24 point 7): kimi_k2 and kimi_k3 tool-call / reasoning text read
by the server's own parser, multimodal chat requests (image_url content parts), and the smoke test
against it: an image for a vision model, a kimi_k3 tool call for Kimi-K3."""

from __future__ import annotations

import json

import pytest
from enginesim import kimiformat
from enginesim.api import ApiConfig, ApiError, ApiServer, chat_completion
from enginesim.runtime import Log
from llmb.smoke import IMAGE_URL, image_request, png_bytes, run_smoke

CALL = {"name": "get_weather", "arguments": {"city": 'Paris & "Lyon"', "days": 3, "unit": "c"}}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


# ----------------------------------------------------------------------------- the formats


def test_kimi_k3_text_is_the_xtml_channels():
    raw = kimiformat.render("kimi_k3", "think first", "hello", [CALL])
    assert raw.startswith("<|open|>think<|sep|>think first<|close|>think<|sep|>")
    assert "<|open|>response<|sep|>hello<|close|>response<|sep|>" in raw
    assert '<|open|>call tool="get_weather" index="1"<|sep|>' in raw
    # string arguments raw, the others JSON; quotes and ampersands escaped in attributes only
    assert '<|open|>argument key="city" type="string"<|sep|>Paris & "Lyon"<|close|>argument<|sep|>' in raw
    assert '<|open|>argument key="days" type="json"<|sep|>3<|close|>argument<|sep|>' in raw
    assert raw.endswith("<|close|>tools<|sep|><|close|>message<|sep|>")


def test_kimi_k3_parser_reads_back_calls_reasoning_and_reply():
    raw = kimiformat.render("kimi_k3", "think first", "hello", [CALL])
    reasoning, content, calls = kimiformat.parse("kimi_k3", "kimi_k3", raw)
    assert reasoning == "think first" and content == "hello"
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == CALL["arguments"]


def test_kimi_k2_format_round_trip():
    raw = kimiformat.render("kimi_k2", "hmm", None, [CALL])
    assert "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" in raw
    reasoning, content, calls = kimiformat.parse("kimi_k2", "kimi_k2", raw)
    assert reasoning == "hmm" and content == "" and calls[0]["id"] == "functions.get_weather:0"
    assert json.loads(calls[0]["function"]["arguments"]) == CALL["arguments"]


def test_a_parser_of_another_format_finds_no_call():
    raw = kimiformat.render("kimi_k3", None, None, [CALL])
    _, content, calls = kimiformat.parse("kimi_k2", "kimi_k2", raw)
    assert calls == [] and "<|open|>tools<|sep|>" in content  # the markup reaches the client, as on a cluster


@pytest.mark.parametrize("config,fmt", [
    ({"model_type": "kimi_k3", "text_config": {"model_type": "kimi_linear"}}, "kimi_k3"),
    ({"model_type": "kimi_k25", "text_config": {"model_type": "deepseek_v3"}}, "kimi_k2"),
    ({"model_type": "kimi_k2"}, "kimi_k2"),
    ({"model_type": "llama"}, None),
])
def test_model_format_from_config(config, fmt):
    assert kimiformat.model_format(config) == fmt


# ----------------------------------------------------------------------------- the API


def cfg(**kw) -> ApiConfig:
    base = dict(engine="vllm", version="0.32.0", served_names=["moonshotai/Kimi-K3"], model_path="/m",
                reasoning_parser="kimi_k3", tool_call_parser="kimi_k3", auto_tool_choice=True,
                model_format="kimi_k3", vision=True)
    base.update(kw)
    return ApiConfig(**base)


def ask(c: ApiConfig, **req) -> dict:
    body = {"model": c.served_names[0], "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    body.update(req)
    return chat_completion(c, body)


def test_k3_tool_call_through_the_kimi_k3_parser():
    out = ask(cfg(), tools=TOOLS, tool_choice="auto")
    msg = out["choices"][0]["message"]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"city": "enginesim"}
    assert msg["reasoning_content"] and "<|" not in (msg["content"] or "")


def test_k3_served_with_the_kimi_k2_parser_loses_its_tool_call():
    msg = ask(cfg(tool_call_parser="kimi_k2", reasoning_parser="kimi_k2"), tools=TOOLS,
              tool_choice="auto")["choices"][0]["message"]
    assert msg["tool_calls"] == [] and "<|open|>tools<|sep|>" in msg["content"]


def test_an_image_is_answered_by_a_vision_model():
    msg = chat_completion(cfg(), image_request({"model": "moonshotai/Kimi-K3"}))["choices"][0]["message"]
    assert "[an image of 16x16]" in msg["content"]


def test_an_image_to_a_text_only_server_is_a_400():
    with pytest.raises(ApiError) as err:
        chat_completion(cfg(vision=False), image_request({"model": "moonshotai/Kimi-K3"}))
    assert err.value.status == 400 and "image" in err.value.message


def test_the_smoke_image_is_a_real_png():
    raw = png_bytes(3, 2)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(raw[16:20], "big") == 3
    assert IMAGE_URL.startswith("data:image/png;base64,")


# ----------------------------------------------------------------------------- the smoke test against it


def _serve(c: ApiConfig):
    srv = ApiServer(c, "127.0.0.1", 0, Log())
    srv.ready.set()
    return srv, f"http://127.0.0.1:{srv.port}/v1"


@pytest.mark.parametrize("c", [
    cfg(),  # Kimi-K3: kimi_k3 parsers, vision
    cfg(served_names=["moonshotai/Kimi-K2.6"], reasoning_parser="kimi_k2", tool_call_parser="kimi_k2",
        model_format="kimi_k2"),  # K2.6: kimi_k2 parsers, vision
], ids=["kimi-k3", "kimi-k2.6"])
def test_smoke_passes_with_an_image_and_a_tool_call(c):
    srv, base = _serve(c)
    try:
        checks = run_smoke(base, c.served_names[0], True, True, 5, image=True)
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
    assert all(x["ok"] for x in checks), checks
    assert {x["check"] for x in checks} >= {"image-input", "tool-call", "reasoning-content"}


def test_smoke_fails_when_the_server_takes_no_image():
    srv, base = _serve(cfg(vision=False))
    try:
        checks = run_smoke(base, "moonshotai/Kimi-K3", True, True, 5, image=True)
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
    bad = [x for x in checks if not x["ok"]]
    assert [x["check"] for x in bad] == ["image-input"] and bad[0]["status"] == 400


def test_smoke_fails_when_k3_is_served_with_the_k2_parser():
    srv, base = _serve(cfg(tool_call_parser="kimi_k2", reasoning_parser="kimi_k2"))
    try:
        checks = run_smoke(base, "moonshotai/Kimi-K3", True, True, 5)
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()
    assert [x["check"] for x in checks if not x["ok"]] == ["reasoning-content", "tool-call"]


def test_the_release_registry_decides_whether_a_k3_checkpoint_loads(tmp_path, monkeypatch):
    from pathlib import Path

    from enginesim import flagset, runtime

    monkeypatch.setenv("LLMB_ENGINESIM_DATA", str(Path(__file__).resolve().parents[3] / "data" / "engines"))
    config = {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"]}
    runtime.check_model_config(Log(), flagset.load("vllm", "0.32.0"), tmp_path, config, True)  # registered
    with pytest.raises(SystemExit):
        runtime.check_model_config(Log(), flagset.load("vllm", "0.26.0"), tmp_path, config, True)


# ----------------------------------------------------------------------------- a sample's plan, served by the double

K3_CONFIG = {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"],
             "auto_map": {"AutoConfig": "configuration_kimi_k3.KimiK3Config"},
             "text_config": {"model_type": "kimi_linear", "max_position_embeddings": 1048576},
             "vision_config": {"vt_hidden_size": 1152}}
K26_CONFIG = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"],
              "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
              "text_config": {"model_type": "deepseek_v3"}, "max_position_embeddings": 262144,
              "vision_config": {"vt_hidden_size": 1152}}


@pytest.mark.parametrize("sample,config,text_only", [
    ("mi355x-k3", K3_CONFIG, False),
    ("h200-k26", K26_CONFIG, False),
    ("h200-k26", K26_CONFIG, True),
])
def test_a_samples_plan_served_by_the_double_passes_its_smoke_test(tmp_path, sample, config, text_only):
    """The plan's argv run as a process; the smoke test as the serve role runs it, from the plan's api:
    an image for the vision model, a kimi_k3 (or kimi_k2) tool call through the release's parser."""
    import sys as _sys

    from enginesim_helpers import REPO, Proc, cli, free_port, sim_env, wait_healthy
    from llmbctl.planner import plan_inventory

    _sys.path.insert(0, str(REPO / "tests" / "unit" / "module_utils" / "planner"))
    from planner_helpers import load_inventory

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    port = free_port()
    hv, groups = load_inventory(sample)
    for v in hv.values():
        v.update(llmb_model_dir=str(model), llmb_api_port=port, llmb_api_host="127.0.0.1", ansible_host="127.0.0.1",
                 llmb_install="host", llmb_container_image=None, llmb_engine_args=dict(
                     v.get("llmb_engine_args") or {}, **({"language-model-only": True} if text_only else {})))
    (host,) = plan_inventory(hv, groups, str(REPO / "data")).to_list()
    svc = next(s for s in host["services"] if s.get("api"))
    argv = [*cli("vllm"), *svc["argv"][1:]]
    api = svc["api"]
    assert api.get("vision", False) is (not text_only)
    env = sim_env(tmp_path / "s", LLMB_ENGINESIM_VERSION_VLLM=svc["argv"][0].split("vllm-")[1].split("/")[0])
    with Proc(argv, env, tmp_path / "vllm.log") as proc:
        wait_healthy(port, proc)
        checks = run_smoke(api["base_url"], api["served_model_name"], api["reasoning"], api["tool_calls"], 20,
                           image=api.get("vision", False))
    assert checks and all(c["ok"] for c in checks), (checks, proc.output())
    assert ("image-input" in {c["check"] for c in checks}) is (not text_only)
    assert "tool-call" in {c["check"] for c in checks}
