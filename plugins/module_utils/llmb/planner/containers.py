"""Engine containers: their options, command, devices and mounts, the default image, and the checks
of the container variables (llmb_container_options, llmb_container_mounts, llmb_container_image)."""

from __future__ import annotations

import copy
import dataclasses
import shlex
from typing import Any

from .context import Context
from .model import Problem, Service

# docker run options of every engine container before the platform's and llmb_container_options;
# a list option is merged with the inventory's list, any other is replaced
CONTAINER_OPTIONS: dict[str, Any] = {
    "network": "host",
    "ipc": None,
    "shm_size": None,
    "privileged": False,
    "cap_add": [],
    "security_opt": [],
    "group_add": [],
    "ulimits": [],
    "gpus": None,
    "workdir": None,
    "entrypoint": None,
    "restart": "unless-stopped",
}


def container_options(ctx: Context, name: str, platform_defaults: dict[str, Any]) -> dict[str, Any]:
    """Container options: defaults, then the platform's, then llmb_container_options (lists merged)."""
    opts: dict[str, Any] = {"name": name, **copy.deepcopy(CONTAINER_OPTIONS)}
    opts.update(platform_defaults)
    for key, value in (ctx.v.get("llmb_container_options") or {}).items():
        if isinstance(CONTAINER_OPTIONS.get(key), list) and isinstance(value, list):
            merged = list(opts.get(key) or [])
            merged.extend(x for x in value if x not in merged)
            opts[key] = merged
        else:
            opts[key] = value
    return opts


def container_problems(ctx: Context) -> list[Problem]:
    """llmb_container_options keys and llmb_container_mounts entries are ones the planner knows."""
    known = {"name", *CONTAINER_OPTIONS}
    problems = []
    for key in ctx.v.get("llmb_container_options") or {}:
        if key not in known:
            problems.append(
                Problem(
                    "container",
                    f"llmb_container_options has an unknown key {key!r}",
                    found=key,
                    expected=" | ".join(sorted(known)),
                    fix="use one of the keys above (devices and mounts have their own variables)",
                )
            )
    for mount in ctx.v.get("llmb_container_mounts") or []:
        if len(str(mount).split(":")) not in (2, 3):
            problems.append(
                Problem(
                    "container",
                    f"mount {mount!r} is not 'src:dst[:ro]'",
                    found=mount,
                    fix="write mounts in docker -v syntax",
                )
            )
    return problems


def container_command(argv: list[str], entrypoint: Any) -> list[str]:
    """The container command for an engine argv, given the container entrypoint.

    A shell entrypoint (seed 002/003 run the ROCm image with --entrypoint /bin/bash) gets
    ``-c 'exec <argv>'``; no entrypoint means the argv replaces the image's entrypoint+cmd.
    """
    if entrypoint and str(entrypoint).split("/")[-1] in ("bash", "sh"):
        return ["-c", "exec " + shlex.join(argv)]
    return list(argv)


def containerize(
    ctx: Context,
    svc: Service,
    image: str | None,
    devices: list[str],
    mounts: list[str],
    platform_defaults: dict,
) -> Service:
    """svc (name, role, argv, order, env) run in a container of image, with the inventory's devices and mounts."""
    opts = container_options(ctx, svc.name, platform_defaults)
    entry = opts.get("entrypoint")
    if entry is None:
        opts["entrypoint"] = svc.argv[0]
        opts["command"] = list(svc.argv[1:])
    else:
        opts["command"] = container_command(svc.argv, entry)
    extra_devices = [str(d) for d in ctx.v.get("llmb_container_devices") or []]
    user_mounts = [str(m) for m in ctx.v.get("llmb_container_mounts") or []]
    return dataclasses.replace(
        svc,
        kind="container",
        argv=list(svc.argv),
        image=image,
        devices=list(devices) + [d for d in extra_devices if d not in devices],
        mounts=list(mounts) + [m for m in user_mounts if m not in mounts],
        container=opts,
    )


def default_image(ctx: Context) -> str | None:
    """llmb_container_image, else the flag set's image for the platform's vendor (None: there is none)."""
    image = ctx.v.get("llmb_container_image")
    if image:
        return str(image)
    template = ctx.flagset.images.get(ctx.platform.vendor)
    if not template:
        return None
    suffix = ctx.flagset.image_suffix_by_platform.get(ctx.platform.name, "")
    return template.format(version=ctx.version, image_suffix=suffix)
