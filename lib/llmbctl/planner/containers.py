"""Engine containers: their options, command, devices and mounts, the default image, how NVIDIA GPUs
reach them, commands run inside a running one (docker exec), and the checks of the container
variables (llmb_container_options, llmb_container_mounts, llmb_container_nvidia_gpus)."""

from __future__ import annotations

import copy
import dataclasses
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
    problems += gpu_access_problems(ctx)
    for mount in ctx.v.get("llmb_container_mounts") or []:
        if len(str(mount).split(":")) not in (2, 3):
            problems.append(
                Problem(
                    "container",
                    f"llmb_container_mounts: {mount!r} is not 'src:dst[:ro]'",
                    found=mount,
                    fix="write mounts in docker -v syntax",
                )
            )
    return problems


# The one shell script of a container whose entrypoint is a shell (seeds 002/003 run the ROCm image
# with --entrypoint /bin/bash): constant, the engine argv follows as its positional parameters, so no
# value is ever parsed by the shell and argv stays a list end to end.
SHELL_EXEC = 'exec "$@"'


def gpu_access_problems(ctx: Context) -> list[Problem]:
    """llmb_container_nvidia_gpus is for NVIDIA platforms, and cdi / devices leave --gpus unset."""
    mode = ctx.v.get("llmb_container_nvidia_gpus") or "gpus"
    if mode == "gpus":
        return []
    if ctx.platform.vendor != "nvidia":
        return [
            Problem(
                "container",
                f"llmb_container_nvidia_gpus: {mode} is for NVIDIA platforms; {ctx.platform.name} is "
                f"{ctx.platform.vendor} (its devices come from the platform: llmb_container_devices adds more)",
                found=f"llmb_container_nvidia_gpus: {mode}",
                expected="gpus (the default) on a non-NVIDIA platform",
                fix="remove llmb_container_nvidia_gpus",
            )
        ]
    gpus = (ctx.v.get("llmb_container_options") or {}).get("gpus")
    if gpus:
        return [
            Problem(
                "container",
                f"llmb_container_options.gpus ({gpus}) asks for --gpus, but llmb_container_nvidia_gpus: {mode} "
                "passes the GPUs as --device entries",
                found=f"llmb_container_options.gpus: {gpus}, llmb_container_nvidia_gpus: {mode}",
                expected="one way to pass the GPUs",
                fix="remove llmb_container_options.gpus, or set llmb_container_nvidia_gpus: gpus",
            )
        ]
    return []


def container_command(argv: list[str], entrypoint: Any) -> list[str]:
    """The container command for an engine argv, given the container entrypoint.

    A shell entrypoint gets ``-c 'exec "$@"' <shell> <argv...>`` ($0 is the shell's name, "$@" the
    argv); no entrypoint means the argv replaces the image's entrypoint+cmd."""
    shell = str(entrypoint).split("/")[-1] if entrypoint else ""
    if shell in ("bash", "sh"):
        return ["-c", SHELL_EXEC, shell, *argv]
    return list(argv)


# `docker exec` services (kind exec: a unit on the node running a process inside a running engine
# container, vLLM's run_cluster.sh pattern). The process records its pid in the container so that
# the unit's ExecStop can end it (a killed `docker exec` client leaves its process running): both
# scripts are constant, the pid file and the argv are positional parameters.
EXEC_PIDFILE_SCRIPT = 'echo $$ > "$1" && shift && exec "$@"'
EXEC_STOP_SCRIPT = 'read p < "$1" && kill -TERM "$p" && while kill -0 "$p" 2>/dev/null; do sleep 1; done'
DOCKER = "/usr/bin/docker"


def docker_exec(container: str, env: dict[str, str], argv: list[str]) -> list[str]:
    """Run argv inside the node's engine container; env names are passed from the unit's environment
    (their values never appear on the command line)."""
    out = [DOCKER, "exec"]
    for key in sorted(env):
        out += ["-e", key]
    return [*out, container, *argv]


def exec_pidfile(service: str) -> str:
    return f"/tmp/{service}.pid"


def exec_argv(service: str, container: str, env: dict[str, str], argv: list[str]) -> list[str]:
    """The unit's command of exec service `service`: argv in `container`, its pid recorded there."""
    return docker_exec(container, env, ["/bin/sh", "-c", EXEC_PIDFILE_SCRIPT, "sh", exec_pidfile(service), *argv])


def exec_stop_argv(service: str, container: str) -> list[str]:
    """ExecStop of exec service `service`: SIGTERM to its process in `container`, then wait for it."""
    return [DOCKER, "exec", container, "/bin/sh", "-c", EXEC_STOP_SCRIPT, "sh", exec_pidfile(service)]


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
    devices = gpu_devices(ctx, opts, devices)
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


# llmb_container_nvidia_gpus: cdi -> the NVIDIA Container Toolkit's CDI device for every GPU
# (`nvidia-ctk cdi generate`, Docker 25+ with CDI enabled); devices -> the driver's device nodes
# themselves (no runtime hook: the image brings a user-space driver matching the node's module)
CDI_ALL_GPUS = "nvidia.com/gpu=all"
NVIDIA_CONTROL_DEVICES = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]


def nvidia_gpu_devices(mode: str, device_count: int) -> list[str]:
    """The --device entries of llmb_container_nvidia_gpus `mode` (cdi | devices) on a node of device_count GPUs."""
    if mode == "cdi":
        return [CDI_ALL_GPUS]
    return [f"/dev/nvidia{i}" for i in range(device_count)] + list(NVIDIA_CONTROL_DEVICES)


def gpu_devices(ctx: Context, opts: dict[str, Any], devices: list[str]) -> list[str]:
    """How NVIDIA GPUs reach the container (llmb_container_nvidia_gpus): `gpus` keeps the platform's
    --gpus option (the NVIDIA runtime hook), `cdi` and `devices` drop it for --device entries."""
    mode = ctx.v.get("llmb_container_nvidia_gpus") or "gpus"
    if ctx.platform.vendor != "nvidia" or mode == "gpus":
        return list(devices)
    opts["gpus"] = None
    wanted = nvidia_gpu_devices(mode, ctx.platform.device_count)
    return wanted + [d for d in devices if d not in wanted]


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
