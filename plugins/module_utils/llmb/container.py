"""One launch-plan container on a node, reconciled with the docker CLI (stdlib only, Python 3.9+).

The llmb_container module is a thin shell around ``reconcile``:

- the container's spec (image ref, the image ID found on the node under that name, the pinned digest
  and ID, argv, env, devices, mounts, options) hashes to the label ``io.llm-bringup.spec-hash``; a
  running container with the same hash is left alone, any other is replaced (and only that one);
- before anything is removed or started, the node is checked: the image under the plan's name is the
  pinned one, every device exists (a CDI device is declared by a CDI spec), no other process listens
  on a planned port of a host-network container; after a start, the container must stay up for a
  settle time;
- every fault is a ``ContainerFault`` naming the host, the container, the cause (a stable token) and
  the fix, with the container's log tail where there is one;
- env values reach docker through a private ``--env-file`` (never the command line); argv is a list
  from the plan to ``docker run``.

Docker is called through ``docker(argv) -> (rc, stdout, stderr)`` so tests drive it with a fake.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .procnet import TCP_LISTEN, addr, read_tables, rows, socket_inodes
from .serve import process_tree as _tree

SPEC_LABEL = "io.llm-bringup.spec-hash"
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
# a CDI device name: vendor.example/class=name (the docker CLI's own test: not a path, has = after /)
CDI_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*/[a-zA-Z0-9][a-zA-Z0-9_.-]*=[a-zA-Z0-9_.:-]+$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Docker = Callable[[list], "tuple[int, str, str]"]

# causes (the `cause` of a failed result; the scenarios match on them)
IMAGE_MISSING = "image-missing"
IMAGE_DRIFT = "image-drift"
DEVICE_MISSING = "device-missing"
PORT_TAKEN = "port-taken"
RUN_FAILED = "run-failed"
EXITED_AT_START = "exited-at-start"
BAD_SPEC = "bad-spec"


class ContainerFault(Exception):
    """A container that cannot be (re)started as planned: where, why (cause token), what to do."""

    def __init__(self, host: str, name: str, cause: str, text: str, fix: str, log_tail: str = ""):
        self.host, self.name, self.cause, self.text, self.fix, self.log_tail = host, name, cause, text, fix, log_tail
        super().__init__(self.message())

    def message(self) -> str:
        msg = f"{self.host}: container {self.name}: {self.text}. Fix: {self.fix}"
        if self.log_tail:
            msg += f"\n--- container log tail ---\n{self.log_tail}"
        return msg


@dataclass
class Spec:
    name: str
    image: str
    argv: list = field(default_factory=list)  # what follows the image
    env: dict = field(default_factory=dict)
    devices: list = field(default_factory=list)
    mounts: list = field(default_factory=list)
    options: dict = field(default_factory=dict)
    ports: list = field(default_factory=list)  # [{port, purpose}] the container listens on
    digest: str | None = None  # pinned registry digest of image (sha256:...)
    image_id: str | None = None  # pinned image ID (tarball loads)
    config: list = field(default_factory=list)  # the plan's config files it reads ([{path, content}])

    def hash_input(self, found_image_id: str) -> dict:
        return {
            "image": self.image,
            "image_id": found_image_id,
            "pin": {"digest": self.digest or None, "id": self.image_id or None},
            "argv": [str(a) for a in self.argv],
            "env": {str(k): str(v) for k, v in self.env.items()},
            "devices": self.devices,
            "mounts": self.mounts,
            "options": self.options,
            "config": [{"path": c.get("path"), "content": c.get("content")} for c in self.config or []],
        }


def spec_hash(doc: Any) -> str:
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def device_arg(d: Any) -> str:
    return d if isinstance(d, str) else f"{d['host']}:{d.get('container', d['host'])}"


def mount_arg(m: Any) -> str:
    if isinstance(m, str):
        return m
    out = f"{m['host']}:{m.get('container', m['host'])}"
    return out + ":ro" if m.get("readonly") or m.get("mode") == "ro" else out


def docker_run_argv(spec: Spec, label: str, env_file: str | None) -> list:
    """`docker run -d` argv for spec. `options` keys follow the plan: network, ipc, pid, shm_size,
    gpus, privileged, cap_add, security_opt, ulimits, group_add, workdir, user, extra_args,
    entrypoint, restart. Env values are in env_file (names and values never on the command line)."""
    o = spec.options or {}
    out = ["docker", "run", "-d", "--name", spec.name, "--label", f"{SPEC_LABEL}={label}",
           "--restart", str(o.get("restart") or "unless-stopped")]
    for key, flag in (("network", "--network"), ("ipc", "--ipc"), ("pid", "--pid"), ("shm_size", "--shm-size"),
                      ("gpus", "--gpus")):
        if o.get(key):
            out += [flag, str(o[key])]
    if o.get("privileged"):
        out.append("--privileged")
    for key, flag in (("cap_add", "--cap-add"), ("security_opt", "--security-opt"), ("ulimits", "--ulimit"),
                      ("group_add", "--group-add")):
        for value in o.get(key) or []:
            out += [flag, str(value)]
    if o.get("workdir"):
        out += ["-w", str(o["workdir"])]
    if o.get("user"):
        out += ["--user", str(o["user"])]
    for d in spec.devices or []:
        out += ["--device", device_arg(d)]
    for m in spec.mounts or []:
        out += ["-v", mount_arg(m)]
    if env_file:
        out += ["--env-file", env_file]
    out += [str(a) for a in o.get("extra_args") or []]
    if o.get("entrypoint") is not None:
        out += ["--entrypoint", str(o["entrypoint"])]
    out.append(spec.image)
    out += [str(a) for a in spec.argv or []]
    return out


def env_file_text(spec: Spec, host: str) -> str:
    """docker --env-file lines (NAME=value, read literally to the end of the line)."""
    lines = []
    for key in sorted(spec.env):
        value = str(spec.env[key])
        if not ENV_KEY.match(str(key)):
            raise ContainerFault(host, spec.name, BAD_SPEC, f"environment name {key!r} is not NAME syntax",
                                 "fix the name in llmb_engine_env")
        if any(c in value for c in "\n\r\0"):
            raise ContainerFault(host, spec.name, BAD_SPEC, f"environment value of {key} holds a line break",
                                 f"remove the line break from {key} in llmb_engine_env")
        lines.append(f"{key}={value}\n")
    return "".join(lines)


# ------------------------------------------------------------------------------ node checks
@dataclass
class Node:
    """Where the node's facts are read (a test points them at a temporary tree)."""

    root: str = "/"
    proc: str = "/proc"
    cdi_dirs: tuple = CDI_SPEC_DIRS

    def path(self, p: str) -> str:
        return os.path.join(self.root, p.lstrip("/"))


def is_cdi(device: str) -> bool:
    return bool(CDI_NAME.match(device))


def cdi_declared(node: Node) -> dict:
    """{kind: set of device names} declared by the CDI specs (JSON, or YAML as nvidia-ctk writes it)."""
    out: dict = {}
    for d in node.cdi_dirs:
        for path in sorted(glob.glob(os.path.join(node.path(d), "*"))):
            if not path.endswith((".json", ".yaml", ".yml")):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            kind, names = _cdi_parse(text, path.endswith(".json"))
            if kind:
                out.setdefault(kind, set()).update(names)
    return out


def _cdi_parse(text: str, is_json: bool) -> tuple:
    if is_json:
        try:
            doc = json.loads(text)
        except ValueError:
            return None, set()
        devices = doc.get("devices") or [] if isinstance(doc, dict) else []
        return (doc.get("kind") if isinstance(doc, dict) else None), {
            str(x.get("name")) for x in devices if isinstance(x, dict) and x.get("name") is not None}
    # YAML as nvidia-ctk writes it (sigs.k8s.io/yaml: keys sorted, top-level lists not indented):
    # `kind:` at the top, `devices:` a list whose items hold `name:` at the item's key indentation
    kind = None
    names = set()
    in_devices = False
    dash = None  # indentation of the device items' dashes
    for line in text.splitlines():
        body = line.lstrip(" ")
        if not body or body.startswith("#"):
            continue
        indent = len(line) - len(body)
        if indent == 0 and not body.startswith("-"):
            in_devices = body.startswith("devices:")
            m = re.match(r"""^kind:\s*["']?([^"'\s#]+)""", body)
            if m:
                kind = m.group(1)
            continue
        if not in_devices:
            continue
        if body.startswith("- ") and (dash is None or indent == dash):
            dash = indent
            body, indent = body[2:].lstrip(" "), indent + 2
        if dash is not None and indent == dash + 2:
            m = re.match(r"""^name:\s*["']?([^"'\s#]+)""", body)
            if m:
                names.add(m.group(1))
    return kind, names


def missing_devices(devices: list, node: Node) -> list:
    """(device, why) of every planned device the node lacks."""
    out = []
    declared = None
    for d in devices or []:
        arg = device_arg(d)
        if is_cdi(arg):
            if declared is None:
                declared = cdi_declared(node)
            kind, _, name = arg.partition("=")
            if kind not in declared:
                out.append((arg, f"no CDI spec in {' or '.join(node.cdi_dirs)} declares {kind}"))
            elif name not in declared[kind]:
                have = ", ".join(sorted(declared[kind])) or "none"
                out.append((arg, f"the CDI specs declare {kind} devices {have}, not {name!r}"))
            continue
        host_path = arg.split(":", 1)[0]
        if not os.path.exists(node.path(host_path)):
            out.append((arg, f"{host_path} does not exist"))
    return out


def listeners(ports: list, node: Node) -> dict:
    """{port: [(pid, command line)]} of the processes listening on TCP `ports` in this network namespace."""
    wanted = {int(p) for p in ports}
    inodes: dict = {}
    for text in read_tables(os.path.join(node.proc, "self", "net")):
        for local, _remote, inode in rows(text, TCP_LISTEN):
            try:
                _, port = addr(local)
            except ValueError:
                continue
            if port in wanted:
                inodes[inode] = port
    out: dict = {p: [] for p in wanted if p in inodes.values()}
    if not out:
        return {}
    for entry in os.listdir(node.proc):
        if not entry.isdigit():
            continue
        held = socket_inodes(node.proc, int(entry)) & set(inodes)
        for inode in held:
            out[inodes[inode]].append((int(entry), _cmdline(node.proc, int(entry))))
    return out


def _cmdline(proc: str, pid: int) -> str:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def process_tree(proc: str, root: int) -> set:
    return _tree(proc, [root]) if root > 0 else set()


# ------------------------------------------------------------------------------ reconcile
@dataclass
class Outcome:
    changed: bool
    action: str  # none | start | create | replace | remove
    spec_hash: str | None
    image_id: str | None = None
    cmd: list | None = None
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)


class Reconciler:
    def __init__(self, docker: Docker, host: str, node: Node | None = None, settle_s: float = 2.0,
                 log_lines: int = 40, sleep: Callable[[float], None] = time.sleep):
        self.docker, self.host, self.node = docker, host, node or Node()
        self.settle_s, self.log_lines, self.sleep = settle_s, log_lines, sleep

    # --- docker reads
    def _inspect(self, what: str, name: str) -> dict | None:
        rc, out, _ = self.docker(["docker", what, "inspect", "--format", "{{json .}}", name])
        if rc != 0:
            return None
        try:
            return json.loads(out)
        except ValueError:
            return None

    def logs(self, name: str) -> str:
        rc, out, err = self.docker(["docker", "logs", "--tail", str(self.log_lines), name])
        return (out + err).strip() if rc == 0 else ""

    def fault(self, spec: Spec, cause: str, text: str, fix: str, log_tail: str = "") -> ContainerFault:
        return ContainerFault(self.host, spec.name, cause, text, fix, log_tail)

    # --- checks
    def check_image(self, spec: Spec, image: dict) -> None:
        found_id = str(image.get("Id") or "")
        digests = [str(d) for d in image.get("RepoDigests") or []]
        have = sorted({d.split("@", 1)[1] for d in digests if "@" in d})
        # an image loaded from a tarball has no registry digests: its pinned image ID vouches for it
        loaded = not digests and bool(spec.image_id) and found_id == spec.image_id
        if spec.digest and spec.digest not in have and not loaded:
            raise self.fault(
                spec, IMAGE_DRIFT,
                f"image {spec.image} on this node is {found_id[:19]} with registry digests "
                f"{', '.join(have) or 'none'}, not the pinned {spec.digest}: the tag moved (a pull of the tag, "
                "or the registry's tag drifted from the pin)",
                "run the engine stage (playbooks/engine.yml pulls the pinned digest and tags it), or adopt the "
                "new image on purpose by moving the pin (LLMB_REPIN=1, or engine_image_pins)")
        if spec.image_id and found_id != spec.image_id:
            raise self.fault(
                spec, IMAGE_DRIFT,
                f"image {spec.image} on this node is {found_id}, not the pinned image ID {spec.image_id}",
                "run the engine stage (it loads the pinned tarball or pulls the pinned digest), or correct "
                "engine_image_pins")

    def check_devices(self, spec: Spec) -> None:
        missing = missing_devices(spec.devices, self.node)
        if missing:
            text = "; ".join(f"device {d} is missing on this node ({why})" for d, why in missing)
            cdi = any(is_cdi(d) for d, _ in missing)
            fix = ("load the accelerator driver so that its device nodes exist (the verify stage shows what the "
                   "node has), or drop the device from llmb_container_devices if the inventory added it")
            if cdi:
                fix = ("generate the CDI spec (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml, or the "
                       "NVIDIA Container Toolkit's nvidia-cdi-refresh service), or set "
                       "llmb_container_nvidia_gpus: gpus; " + fix)
            raise self.fault(spec, DEVICE_MISSING, text, fix)

    def check_ports(self, spec: Spec, current: dict | None) -> None:
        if (spec.options or {}).get("network") != "host":
            return
        planned = {int(p["port"]): p.get("purpose", "") for p in spec.ports or [] if p.get("port")}
        if not planned:
            return
        mine = process_tree(self.node.proc, int(((current or {}).get("State") or {}).get("Pid") or 0))
        taken = []
        for port, holders in sorted(listeners(list(planned), self.node).items()):
            others = [(pid, cmd) for pid, cmd in holders if pid not in mine]
            if others:
                who = ", ".join(f"pid {pid} ({cmd})" for pid, cmd in others[:3])
                taken.append(f"port {port} ({planned[port]}) is already in use on this node by {who}")
            elif not holders and not mine:  # a listener whose process this user cannot see (not root)
                taken.append(f"port {port} ({planned[port]}) is already in use on this node (by a process "
                             "this user cannot see)")
        if taken:
            raise self.fault(spec, PORT_TAKEN, "; ".join(taken),
                             "stop what holds the port, or move the service to a free port (the llmb_*_port "
                             "variables: llmb_sshd_port, llmb_ray_port, llmb_api_port, ...)")

    def mount_warnings(self, spec: Spec) -> list:
        out = []
        for m in spec.mounts or []:
            src = mount_arg(m).split(":", 1)[0]
            if src.startswith("/") and not os.path.exists(self.node.path(src)):
                out.append(f"{self.host}: container {spec.name}: mount source {src} does not exist on this node; "
                           "docker creates an empty directory there")
        return out

    # --- actions
    def settle(self, spec: Spec, restarts0: int = 0) -> None:
        """The container must stay up for settle_s: an exit or a restart at start is a fault."""
        deadline = time.monotonic() + self.settle_s
        while True:
            cur = self._inspect("container", spec.name) or {}
            state = cur.get("State") or {}
            status = state.get("Status", "")
            restarts = int(cur.get("RestartCount") or 0) - restarts0
            if status in ("exited", "dead") or state.get("Restarting") or restarts > 0:
                if status in ("exited", "dead"):
                    how = f"exited at start (exit code {state.get('ExitCode')})"
                else:  # docker's restart policy already brought it back: the exit code is gone with it
                    how = f"exited at start and was restarted by docker {max(restarts, 1)} time(s) (status {status})"
                if state.get("Error"):
                    how += f": {state['Error']}"
                raise self.fault(spec, EXITED_AT_START, how,
                                 "read the log tail below; the engine's own error is usually its last line",
                                 self.logs(spec.name))
            if time.monotonic() >= deadline:
                return
            self.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def run(self, spec: Spec, label: str) -> list:
        tmp = tempfile.mkdtemp(prefix="llmb-container-")
        try:
            env_path = None
            if spec.env:
                env_path = os.path.join(tmp, "env")
                fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(env_file_text(spec, self.host))
            argv = docker_run_argv(spec, label, env_path)
            rc, _, err = self.docker(argv)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if rc != 0:
            tail = self.logs(spec.name) if self._inspect("container", spec.name) else ""
            raise self.fault(spec, RUN_FAILED, f"docker run of {spec.image} failed (rc={rc}): {err.strip()[-1500:]}",
                             "see docker's message; the plan's devices, mounts and options are in the command", tail)
        return [a if a != env_path else "<env-file>" for a in argv]

    def reconcile(self, spec: Spec, check_mode: bool = False, state: str = "started") -> Outcome:
        env_file_text(spec, self.host)  # refuse an env that cannot be passed, before anything changes
        current = self._inspect("container", spec.name)
        have = ((current or {}).get("Config") or {}).get("Labels") or {}
        have_hash = have.get(SPEC_LABEL)
        running = bool(current and (current.get("State") or {}).get("Running"))
        before = {"exists": current is not None, "running": running, "spec_hash": have_hash}
        if state == "absent":
            if current is None:
                return Outcome(False, "none", None, before=before, after=before)
            if not check_mode:
                self._must(spec, ["docker", "rm", "-f", spec.name], "docker rm -f")
            return Outcome(True, "remove", None, before=before, after={"exists": False})

        image = self._inspect("image", spec.image)
        if image is None:
            if check_mode:
                action = "replace" if current is not None else "create"
                return Outcome(True, action, None, before=before, after={"running": True},
                               warnings=[f"{self.host}: container {spec.name}: image {spec.image} is not on this "
                                         "node yet (the engine stage pulls it)"])
            raise self.fault(spec, IMAGE_MISSING, f"image {spec.image} is not on this node",
                             "run the engine stage (playbooks/engine.yml) first")
        self.check_image(spec, image)
        found_id = str(image.get("Id") or "")
        want = spec_hash(spec.hash_input(found_id))
        after = {"exists": True, "running": True, "spec_hash": want}
        if current is not None and have_hash == want and running:
            return Outcome(False, "none", want, found_id, before=before, after=after)
        action = "start" if current is not None and have_hash == want else (
            "replace" if current is not None else "create")
        warnings = self.mount_warnings(spec)
        if check_mode:
            return Outcome(True, action, want, found_id, before=before, after=after, warnings=warnings)
        self.check_devices(spec)
        self.check_ports(spec, current)
        cmd = None
        restarts0 = 0
        if action == "start":
            restarts0 = int((current or {}).get("RestartCount") or 0)
            self._must(spec, ["docker", "start", spec.name], "docker start", logs=True)
        else:
            if current is not None:
                self._must(spec, ["docker", "rm", "-f", spec.name], "docker rm -f")
            cmd = self.run(spec, want)
        self.settle(spec, restarts0)
        return Outcome(True, action, want, found_id, cmd=cmd, before=before, after=after, warnings=warnings)

    def _must(self, spec: Spec, argv: list, what: str, logs: bool = False) -> None:
        rc, _, err = self.docker(argv)
        if rc != 0:
            raise self.fault(spec, RUN_FAILED, f"{what} failed (rc={rc}): {err.strip()[-1500:]}",
                             "see docker's message", self.logs(spec.name) if logs else "")
