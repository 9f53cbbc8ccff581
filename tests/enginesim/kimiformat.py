"""What a Kimi model writes, and what the engines' kimi_k2 / kimi_k3 parsers make of it (the double).

The double does not answer tool calls and reasoning as ready-made JSON when the served model is a
Kimi model: it writes the model's raw text in the model's own format (``render``) and runs it through
the parser the server was started with (``parse``), as the real server does. A Kimi-K3 answer read
with the kimi_k2 parser therefore comes back without its tool call, as it would on the cluster.

Formats (facts from the engines' parsers; the code here is the double's own):

- kimi_k2 (Kimi-K2, K2.5, K2.6, K2.7-Code): reasoning inside ``<think>`` ... ``</think>``; tool calls in
  ``<|tool_calls_section_begin|>`` ... ``<|tool_calls_section_end|>``, each
  ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>JSON<|tool_call_end|>``.
- kimi_k3 (Kimi-K3, SGLang function_call/kimik3_format.py and kimik3_detector.py): channels opened by
  ``<|open|>NAME<|sep|>`` and closed by ``<|close|>NAME<|sep|>``: ``think`` (the reasoning),
  ``response`` (the reply), ``tools`` holding ``<|open|>call tool="NAME" index="N"<|sep|>`` ...
  ``<|close|>call<|sep|>``, each argument ``<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>``
  (type "string": the raw text; any other type: JSON), then ``<|close|>message<|sep|>``; attribute
  values escape ``&`` and ``"`` as ``&amp;`` and ``&quot;``.
Standard library only.
"""

from __future__ import annotations

import json
import re
from typing import Any

FORMATS = ("kimi_k2", "kimi_k3")

# kimi_k2
K2_THINK_OPEN, K2_THINK_CLOSE = "<think>", "</think>"
K2_SECTION_OPEN, K2_SECTION_CLOSE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K2_CALL_OPEN, K2_ARGS, K2_CALL_CLOSE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_K2_CALL = re.compile(
    re.escape(K2_CALL_OPEN) + r"\s*(?P<id>[^<]+?)\s*" + re.escape(K2_ARGS) + r"(?P<args>.*?)" + re.escape(K2_CALL_CLOSE),
    re.DOTALL,
)

# kimi_k3
SEP = "<|sep|>"


def _open(name: str) -> str:
    return f"<|open|>{name}{SEP}"


def _close(name: str) -> str:
    return f"<|close|>{name}{SEP}"


_K3_CALL = re.compile(r"<\|open\|>call\s+(?P<attrs>[^<]*?)<\|sep\|>(?P<body>.*?)<\|close\|>call<\|sep\|>", re.DOTALL)
_K3_ARG = re.compile(r"<\|open\|>argument\s+(?P<attrs>[^<]*?)<\|sep\|>(?P<val>.*?)<\|close\|>argument<\|sep\|>",
                     re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')


def model_format(config: dict[str, Any]) -> str | None:
    """The format a checkpoint writes, from its config.json: kimi_k3 for Kimi-K3, kimi_k2 for the K2
    family (K2.5 to K2.7 nest it under text_config); None for another model."""
    mtype = str(config.get("model_type") or "")
    if mtype == "kimi_k3":
        return "kimi_k3"
    inner = str((config.get("text_config") or {}).get("model_type") or "") if isinstance(
        config.get("text_config"), dict) else ""
    if mtype in ("kimi_k2", "kimi_k25") or inner == "kimi_k2":
        return "kimi_k2"
    return None


def _esc(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")


def _unesc(value: str) -> str:
    return value.replace("&quot;", '"').replace("&amp;", "&")


def render(fmt: str, reasoning: str | None, content: str | None, calls: list[dict[str, Any]]) -> str:
    """The raw text a model of format ``fmt`` writes; calls are {name, arguments (a dict)}."""
    if fmt == "kimi_k2":
        out = f"{K2_THINK_OPEN}{reasoning}{K2_THINK_CLOSE}" if reasoning else ""
        out += content or ""
        if calls:
            out += K2_SECTION_OPEN + "".join(
                f"{K2_CALL_OPEN}functions.{c['name']}:{i}{K2_ARGS}{json.dumps(c['arguments'])}{K2_CALL_CLOSE}"
                for i, c in enumerate(calls)) + K2_SECTION_CLOSE
        return out
    if fmt == "kimi_k3":
        out = f"{_open('think')}{reasoning}{_close('think')}" if reasoning else ""
        if content:
            out += f"{_open('response')}{content}{_close('response')}"
        if calls:
            body = ""
            for i, c in enumerate(calls, start=1):
                args = ""
                for key, value in c["arguments"].items():
                    kind = "string" if isinstance(value, str) else "json"
                    raw = value if isinstance(value, str) else json.dumps(value)
                    args += f'<|open|>argument key="{_esc(key)}" type="{kind}"{SEP}{raw}{_close("argument")}'
                body += f'<|open|>call tool="{_esc(c["name"])}" index="{i}"{SEP}{args}{_close("call")}'
            out += f"{_open('tools')}{body}{_close('tools')}"
        return out + _close("message")
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def parse(parser: str | None, reasoning_parser: str | None, text: str) -> tuple[str | None, str, list[dict]]:
    """(reasoning, content, tool calls as the OpenAI API returns them) of raw model text, read with the
    server's parsers: ``parser`` the tool-call parser (None: calls stay in the text), ``reasoning_parser``
    the reasoning parser (None: reasoning stays in the text). A parser of another format finds nothing
    of its own and leaves the text as it is."""
    reasoning = None
    if reasoning_parser == "kimi_k2" and K2_THINK_CLOSE in text:
        head, _, text = text.partition(K2_THINK_CLOSE)
        reasoning = head.replace(K2_THINK_OPEN, "", 1)
    elif reasoning_parser == "kimi_k3" and _close("think") in text:
        head, _, text = text.partition(_close("think"))
        reasoning = head.replace(_open("think"), "", 1)
    calls: list[dict] = []
    if parser == "kimi_k2" and K2_SECTION_OPEN in text:
        text, _, section = text.partition(K2_SECTION_OPEN)
        for m in _K2_CALL.finditer(section.split(K2_SECTION_CLOSE)[0]):
            ident = m["id"].strip()
            name = ident.split(".", 1)[-1].rsplit(":", 1)[0]
            calls.append({"id": ident, "type": "function", "function": {"name": name, "arguments": m["args"].strip()}})
    elif parser == "kimi_k3" and _open("tools") in text:
        text, _, section = text.partition(_open("tools"))
        for n, m in enumerate(_K3_CALL.finditer(section.split(_close("tools"))[0])):
            attrs = {k: _unesc(v) for k, v in _ATTR.findall(m["attrs"])}
            args: dict[str, Any] = {}
            for a in _K3_ARG.finditer(m["body"]):
                aattrs = {k: _unesc(v) for k, v in _ATTR.findall(a["attrs"])}
                raw = a["val"]
                if aattrs.get("type", "string") == "string":
                    args[aattrs.get("key", "")] = raw
                else:
                    try:
                        args[aattrs.get("key", "")] = json.loads(raw)
                    except ValueError:
                        args[aattrs.get("key", "")] = raw
            if attrs.get("tool"):
                calls.append({"id": f"call_{n}", "type": "function",
                              "function": {"name": attrs["tool"], "arguments": json.dumps(args, ensure_ascii=False)}})
    if parser == "kimi_k3" or reasoning_parser == "kimi_k3":
        text = text.replace(_open("response"), "").replace(_close("response"), "").replace(_close("message"), "")
    return reasoning, text, calls
