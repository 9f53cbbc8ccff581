"""What runs on a node against what the plan and the lock say: the node side of `llmb status`.

The llmb_status module is its Ansible face (one call per host): :func:`observe` reads every service
of the host's part of the plan (systemctl show / docker inspect, the unit file on disk, one probe of
the plan's health or readiness), the engine release the API server reports (``/version``, SGLang's
``/get_server_info``) or the venv holds, the model commit of the weights record, the image the
container runs, and the devices' memory in use (``nvidia-smi --query-gpu``); :func:`judge` names
every drift. Pure except the ``run`` callable (the module's run_command: argv -> (rc, out, err)) and
the HTTP / file reads. Stdlib only, python3 >= 3.9.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from .grouptool import STAMP as GROUP_STAMP  # when the head last restarted the group
from .hw._text import ParseError
from .hw.nvidia import parse_query
from .ready import http_get, tcp_open
from .serve import connected_to, parse_systemctl_show
from .weights.verify import load_record

Run = Callable[[list], "tuple[int, str, str]"]
UNIT_PROPS = ("LoadState,ActiveState,SubState,NRestarts,ActiveEnterTimestamp,ExecMainStartTimestamp,"
              "MainPID,FragmentPath,DropInPaths,NeedDaemonReload,UnitFileState,Result")
GPU_QUERY = ["nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv"]
UNIT_KINDS = ("systemd", "mpirun", "exec")


def _iso(stamp: str) -> str | None:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(stamp)))
    except ValueError:
        return None


def unit_state(run: Run, name: str) -> dict:
    """A unit's state from ``systemctl show``: state, sub, since, restarts, pid, the unit file."""
    rc, out, err = run(["systemctl", "show", f"{name}.service", "-p", UNIT_PROPS])
    p = parse_systemctl_show(out) if rc == 0 else {}
    if not p or p.get("LoadState") == "not-found":
        return {"state": "missing", "sub": "", "since": None, "restarts": None, "pid": 0, "path": None,
                "reload": False, "error": (err or "").strip()[:200] or None}
    try:
        restarts = int(p.get("NRestarts") or 0)
    except ValueError:
        restarts = None
    try:
        pid = int(p.get("MainPID") or 0)
    except ValueError:
        pid = 0
    return {"state": p.get("ActiveState") or "unknown", "sub": p.get("SubState") or "",
            "since": p.get("ActiveEnterTimestamp") or p.get("ExecMainStartTimestamp") or None,
            "restarts": restarts, "pid": pid, "path": p.get("FragmentPath") or None,
            "reload": p.get("NeedDaemonReload") == "yes", "enabled": p.get("UnitFileState") or None,
            "dropins": (p.get("DropInPaths") or "").split()}


def container_state(run: Run, name: str) -> dict:
    """A container's state from ``docker inspect``: state, since, restarts, the image it runs."""
    rc, out, _ = run(["docker", "container", "inspect", "-f", "{{json .}}", name])
    try:
        doc = json.loads(out) if rc == 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return {"state": "missing", "sub": "", "since": None, "restarts": None, "pid": 0, "image_id": None}
    st = doc.get("State") or {}
    status = st.get("Status") or "unknown"
    return {"state": "active" if status == "running" else status, "sub": status, "since": st.get("StartedAt"),
            "restarts": doc.get("RestartCount"), "pid": st.get("Pid") or 0, "image_id": doc.get("Image")}


def image_digests(run: Run, image_id: str) -> list[str]:
    """The repo digests (``ref@sha256:...``) of a local image."""
    rc, out, _ = run(["docker", "image", "inspect", "-f", "{{json .RepoDigests}}", image_id])
    try:
        got = json.loads(out) if rc == 0 else []
    except ValueError:
        got = []
    return [str(d) for d in got or []]


def read_text(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def probe(health: dict | None, ready: dict | None, pid: int, api_key: str | None = None,
          proc: str = "/proc", get=http_get) -> dict:
    """One probe of the plan's health (HTTP, the served model listed) or readiness (TCP, the rank's
    connection to its master): {"ok": bool|None, "detail": str}; ok None when the plan has neither."""
    if health:
        status, _ = get(health["url"])
        if status != 200:
            return {"ok": False, "detail": f"GET {health['url']} -> {status or 'connection refused'}"}
        base = health["url"].rsplit("/", 1)[0]
        path = health.get("models_path") or "/v1/models"
        mstatus, body = get(base + path, token=api_key)
        try:
            models = [d.get("id") for d in json.loads(body or b"{}").get("data", [])]
        except (ValueError, AttributeError):
            models = []
        want = health.get("expect_model")
        if want and want not in models:
            return {"ok": False, "detail": f"GET {path} -> {mstatus}, lists {models}, not {want!r}"}
        return {"ok": True, "detail": f"GET {health['url']} -> 200" + (f", serves {want}" if want else "")}
    if ready and ready.get("type") == "tcp":
        ok = tcp_open(ready["host"], ready["port"])
        return {"ok": ok, "detail": f"TCP {ready['host']}:{ready['port']} {'open' if ok else 'closed'}"}
    if ready and ready.get("type") == "connected":
        ok, _ = connected_to(proc, [pid], ready["host"], int(ready["port"]))
        return {"ok": ok, "detail": f"{'connected' if ok else 'no connection'} to {ready['host']}:{ready['port']}"}
    return {"ok": None, "detail": "the plan defines no health check"}


def running_release(base_url: str, api_key: str | None = None, get=http_get) -> str | None:
    """The release the API server reports: vLLM's ``/version``, SGLang's ``/get_server_info``."""
    root = base_url[:-3] if base_url.endswith("/v1") else base_url.rstrip("/")
    for path in ("/version", "/get_server_info"):
        status, body = get(root + path, token=api_key)
        if status == 200:
            try:
                v = json.loads(body or b"{}").get("version")
            except (ValueError, AttributeError):
                v = None
            if v:
                return str(v)
    return None


def installed_release(run: Run, version_command: list | None, want: str | None = None) -> str | None:
    """The engine's release as its own version command prints it (host install; the engine stage's
    check): ``want`` when one of its lines is that, else its last line."""
    if not version_command:
        return None
    try:
        rc, out, _ = run(list(version_command))
    except OSError:
        return None
    lines = [ln.strip() for ln in (out or "").splitlines() if ln.strip()]
    if rc != 0 or not lines:
        return None
    return want if want in lines else lines[-1]


def gpu_memory(run: Run) -> dict:
    """Device memory in use: {"gpus": [{index, used_mib, total_mib}], "error"}."""
    try:
        rc, out, err = run(GPU_QUERY)
    except OSError as e:
        return {"gpus": [], "error": str(e)}
    if rc != 0:
        return {"gpus": [], "error": f"{' '.join(GPU_QUERY)}: exit {rc}: {(err or out).strip()[:200]}"}
    try:
        rows = parse_query(out)["gpus"]
    except ParseError as e:
        return {"gpus": [], "error": str(e)}
    return {"gpus": [{"index": r.get("index"), "used_mib": r.get("memory_used_mib"),
                      "total_mib": r.get("memory_total_mib")} for r in rows], "error": None}


def observe(run: Run, services: list[dict], engine: dict, model: dict, api_key: str | None = None,
            gpus: bool = True, proc: str = "/proc", get=http_get) -> dict:
    """Everything :func:`judge` compares, read on the node."""
    out_services = []
    for s in services:
        name = s["name"]
        if s.get("kind") == "container":
            st = container_state(run, (s.get("container") or {}).get("name") or name)
            if st.get("image_id"):
                st["image_digests"] = image_digests(run, st["image_id"])
        else:
            st = unit_state(run, name)
            st["unit_text"] = read_text(f"/etc/systemd/system/{name}.service") if st["state"] != "missing" else None
        active = st["state"] == "active"
        st["health"] = probe(s.get("health"), s.get("ready"), st.get("pid") or 0, api_key, proc, get) if active \
            else {"ok": False if (s.get("health") or s.get("ready")) else None, "detail": f"not running ({st['state']})"}
        base = (s.get("api") or {}).get("base_url")
        st["release"] = running_release(base, api_key, get) if base and active else None
        out_services.append({"name": name, **st})
    installed = installed_release(run, engine.get("version_command"), engine.get("version")) \
        if engine.get("install") == "host" else None
    rec = load_record(model["dir"]) if model.get("dir") else None
    stamp = (read_text(GROUP_STAMP) or "").strip()
    return {"services": out_services, "installed_release": installed, "group_restarted": _iso(stamp),
            "model_commit": (rec or {}).get("commit"), "gpu": gpu_memory(run) if gpus else {"gpus": [], "error": None}}


def unit_drift(expected: str | None, found: str | None) -> str | None:
    """How the unit on disk differs from the one the plan renders (None: the same)."""
    if expected is None:
        return None
    if found is None:
        return "unit file missing"
    if found == expected:
        return None
    exp, got = expected.splitlines(), found.splitlines()
    for i in range(min(len(exp), len(got))):  # python 3.9 on the nodes: no zip(strict=)
        if exp[i] != got[i]:
            return (f"unit edited on the node (line {i + 1}: {got[i].strip()[:120]!r}, "
                    f"the plan renders {exp[i].strip()[:120]!r})")
    return f"unit edited on the node ({len(got)} lines, the plan renders {len(exp)})"


def judge(services: list[dict], observed: dict, engine: dict, model: dict) -> list[dict]:
    """Every drift of the host: [{"service", "check", "expected", "found"}] (service None: the host)."""
    drift = []
    by_name = {o["name"]: o for o in observed["services"]}

    def add(service, check, expected, found):
        drift.append({"service": service, "check": check, "expected": expected, "found": found})

    want = engine.get("version")
    for s in services:
        o = by_name.get(s["name"]) or {}
        name = s["name"]
        active = o.get("state") == "active"
        if not active:
            add(name, "state", "active", f"{o.get('state')}{' (' + o['sub'] + ')' if o.get('sub') else ''}")
        elif (o.get("health") or {}).get("ok") is False:
            add(name, "health", "healthy", o["health"]["detail"])
        if s.get("kind") in UNIT_KINDS and o.get("state") != "missing":
            why = unit_drift(s.get("unit"), o.get("unit_text"))
            if why:
                add(name, "unit", "the unit the plan renders", why)
            elif o.get("dropins"):
                add(name, "unit", "the unit the plan renders", f"overridden by {', '.join(o['dropins'])}")
            elif o.get("reload"):
                add(name, "unit", "loaded as on disk", "unit file changed on disk, systemd not reloaded")
        if want and o.get("release") and o["release"] != want:
            add(name, "release", want, o["release"])
        img = engine.get("image") or {}
        if s.get("kind") == "container" and o.get("image_id") and (img.get("id") or img.get("digest")):
            digest_ok = not img.get("digest") or any(d.endswith("@" + img["digest"]) for d in o.get("image_digests") or [])
            if (img.get("id") and o["image_id"] != img["id"]) or not digest_ok:
                add(name, "image", img.get("digest") or img.get("id"), o["image_id"])
    installed = observed.get("installed_release")
    if want and installed and installed != want:
        add(None, "release", want, f"{installed} installed in {engine.get('venv')}")
    commit = model.get("commit")
    if commit and observed.get("model_commit") and observed["model_commit"] != commit:
        add(None, "model", commit, observed["model_commit"])
    return drift


def plan_service(svc: dict, units: dict | None = None) -> dict:
    """What llmb_status needs of one plan service (no argv, no env: nothing secret travels), with the
    unit text the plan renders for it (``units``: name -> text)."""
    return {
        "name": svc["name"], "kind": svc.get("kind"), "role": svc.get("role"), "order": svc.get("order"),
        "health": svc.get("health"), "ready": svc.get("ready"),
        "api": {"base_url": (svc.get("api") or {}).get("base_url")} if svc.get("api") else None,
        "container": {"name": (svc.get("container") or {}).get("name")} if svc.get("container") else None,
        "unit": (units or {}).get(svc["name"]),
    }


def drift_line(d: dict) -> str:
    where = d.get("service") or "host"
    return f"{where}: {d.get('check')}: expected {d.get('expected')}, found {d.get('found')}"


def drift_text(drift: list[dict]) -> str:
    """One line per drift, for the record's error (the report's "why")."""
    return "; ".join(drift_line(d) for d in drift or [])
