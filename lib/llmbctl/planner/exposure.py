"""Closed by default: the API key of the plan (llmb_api_key) and what the engine can do with it.

The key itself never enters the plan: a service that serves the API gets ``api.api_key`` =
{var: the inventory variable holding it, env: the variable the engine reads it from}; the serve
role writes the value into the service's 0600 EnvironmentFile (never the unit, never argv), and the
smoke, health and bench checks send it as a Bearer token. Which variable an engine reads is the
engine catalog's (``api_key_env`` of data/engines/hand/<engine>.yml); an engine with only an
``--api-key`` flag (the key would sit in the unit and in every process listing) or none is refused
when a key is set.

The listeners an engine binds to every interface with no option to choose (``llmb.ports.BINDS``
entries of kind "preload": Ray's GCS, the torch.distributed store) are confined to the node's cluster
address by ``confine_listeners``: the service gets the llmb-bindto preload in its env (and, in a
container, the library mounted read-only), unless the inventory sets llmb_confine_listeners: false.
"""

from __future__ import annotations

from typing import Any

from llmb.ports import BIND_ADDRESS_ENV, BIND_PORTS_ENV, BINDS

from ..layout import BINDTO
from .context import Context
from .model import HostPlan, Problem

API_KEY_VAR = "llmb_api_key"
CONFINE_VAR = "llmb_confine_listeners"


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


def confine_listeners(ctx: Context, hosts: list[HostPlan]) -> None:
    """Give every service that holds a "preload" listener the llmb-bindto preload (in place).

    LD_PRELOAD gets the library first (an LD_PRELOAD of the inventory's llmb_engine_env stays after
    it), LLMB_BIND_ADDRESS the node's cluster address and LLMB_BIND_PORTS those listeners' ports; a
    container also mounts the library read-only at the same path (the serve role builds it on the host)."""
    if ctx.v.get(CONFINE_VAR) is False:
        return
    for hp in hosts:
        for svc in hp.services:
            wanted = sorted({int(p["port"]) for p in svc.ports if "preload" in BINDS.get(p["purpose"], {})})
            if not wanted:
                continue
            before = [x for x in str(svc.env.get("LD_PRELOAD") or "").replace(":", " ").split() if x != BINDTO]
            svc.env["LD_PRELOAD"] = " ".join([BINDTO, *before])
            svc.env[BIND_ADDRESS_ENV] = hp.address
            svc.env[BIND_PORTS_ENV] = ",".join(str(p) for p in wanted)
            if svc.kind == "container":
                mount = f"{BINDTO}:{BINDTO}:ro"
                if mount not in svc.mounts:
                    svc.mounts.append(mount)
