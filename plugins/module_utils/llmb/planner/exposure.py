"""Closed by default: the API key of the plan (llmb_api_key) and what the engine can do with it.

The key itself never enters the plan: a service that serves the API gets ``api.api_key`` =
{var: the inventory variable holding it, env: the variable the engine reads it from}; the serve
role writes the value into the service's 0600 EnvironmentFile (never the unit, never argv), and the
smoke, health and bench checks send it as a Bearer token. Which variable an engine reads is the
engine catalog's (``api_key_env`` of data/engines/hand/<engine>.yml); an engine with only an
``--api-key`` flag (the key would sit in the unit and in every process listing) or none is refused
when a key is set.
"""

from __future__ import annotations

from typing import Any

from .context import Context
from .model import Problem

API_KEY_VAR = "llmb_api_key"


def api_key_set(ctx: Context) -> bool:
    value = ctx.v.get(API_KEY_VAR)
    return value is not None and str(value) != ""


def api_key_auth(ctx: Context) -> dict[str, Any] | None:
    """{var, env} for the API service when a key is set and the engine reads it from the environment."""
    if not api_key_set(ctx) or not ctx.flagset.api_key_env:
        return None
    return {"var": API_KEY_VAR, "env": ctx.flagset.api_key_env}


def check_api_key(ctx: Context) -> list[Problem]:
    if not api_key_set(ctx) or ctx.flagset.api_key_env:
        return []
    has_flag = "--api-key" in ctx.flagset.flags
    found = (
        f"{ctx.engine} {ctx.version} takes the key only as --api-key in argv" if has_flag
        else f"{ctx.engine} {ctx.version} has no API key option"
    )
    return [
        Problem(
            "exposure",
            f"{API_KEY_VAR} is set but {ctx.engine} cannot take it from the environment",
            found=found,
            expected="an engine that reads its API key from an environment variable (vLLM: VLLM_API_KEY)",
            fix=(
                f"unset {API_KEY_VAR} and put an authenticating proxy in front of the API, or bind the API "
                "to a private address with llmb_api_host (docs/ports.md)"
            ),
        )
    ]
