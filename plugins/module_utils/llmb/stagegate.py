"""The fast path of a converged re-run (issue 29), node side: one module call per host and stage tells
whether the stage has anything to do on this node.

A stage that converged records on the node (``<state dir>/stages/<stage>.json``) the digest of its
inputs (computed on the controller: llmbctl.stagegate) and what it then observed of its own state: the
content hashes of the small files it wrote (units, environment files, keys, config.json), the stat of
what is too big to hash (the weights' shards, the venv's packages), the state of its units and of its
services' health endpoints. A later run asks again: the same digest and the same observations mean
that nothing the stage decides from has changed and nothing it made has been touched, so the stage
has nothing to do. Anything else (no record, another digest, a file edited, a unit stopped, an
endpoint down) is named and the stage runs in full as it always did.

Stdlib only, python3 >= 3.9 (shipped to the nodes inside the module).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

SCHEMA = 1
WATCH_KEYS = ("hash", "stat", "names", "units", "tcp", "http", "commands")

Run = Callable[[list], "tuple[int, str]"]


class GateError(ValueError):
    """A watch specification or a record that cannot be read."""


def record_path(state_dir: str, stage: str) -> str:
    if not stage or not stage.replace("_", "").isalnum():
        raise GateError(f"stage: expected a stage name (letters, digits, _), found {stage!r}")
    return os.path.join(state_dir, "stages", f"{stage}.json")


def check_watch(watch: Any) -> dict[str, list]:
    """The watch specification, every key known and every entry of the right type (GateError else)."""
    if not isinstance(watch, dict):
        raise GateError(f"watch: expected a mapping, found {type(watch).__name__}")
    unknown = sorted(set(watch) - set(WATCH_KEYS))
    if unknown:
        raise GateError(f"watch: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(WATCH_KEYS)}")
    out: dict[str, list] = {}
    for key in WATCH_KEYS:
        items = watch.get(key) or []
        if not isinstance(items, list):
            raise GateError(f"watch.{key}: expected a list, found {type(items).__name__}")
        for it in items:
            if key == "tcp":
                ok = isinstance(it, list) and len(it) == 2 and isinstance(it[0], str) and isinstance(it[1], int)
            elif key == "commands":
                ok = isinstance(it, list) and len(it) > 0 and all(isinstance(a, str) for a in it)
            else:
                ok = isinstance(it, str) and it != ""
            if not ok:
                raise GateError(f"watch.{key}: bad entry {it!r}")
        out[key] = items
    return out


def sha256_file(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _matches(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]


def _run(argv: list) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return 127, str(err)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def _tcp(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout):
            return True
    except OSError:
        return False


def _http(url: str, timeout: float = 3.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (the plan's own health URL)
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except (OSError, ValueError):
        return None


def observe(watch: dict, run: Run = _run, tcp: Callable[[str, int], bool] = _tcp,
            http: Callable[[str], int | None] = _http) -> dict[str, Any]:
    """What the node shows of the watched state now (JSON-able, comparable with ==)."""
    w = check_watch(watch)
    seen: dict[str, Any] = {}
    if w["hash"]:
        seen["hash"] = {p: {m: sha256_file(m) for m in _matches(p) if not os.path.isdir(m)} for p in w["hash"]}
    if w["stat"]:
        stats = {}
        for p in w["stat"]:
            stats[p] = {}
            for m in _matches(p):
                try:
                    st = os.stat(m)
                except OSError:
                    continue
                stats[p][m] = [st.st_size, st.st_mtime_ns, st.st_mode]
        seen["stat"] = stats
    if w["names"]:
        seen["names"] = {p: _matches(p) if glob.has_magic(p) else [m for m in [p] if os.path.exists(m)]
                         for p in w["names"]}
    if w["units"]:
        rc, out = run(["systemctl", "show", "-p", "Id,ActiveState,UnitFileState", "--", *w["units"]])
        seen["units"] = parse_units(out) if rc == 0 else {"error": rc}
    if w["tcp"]:
        seen["tcp"] = {f"{h}:{p}": tcp(h, p) for h, p in w["tcp"]}
    if w["http"]:
        seen["http"] = {u: http(u) for u in w["http"]}
    if w["commands"]:
        cmds = {}
        for argv in w["commands"]:
            rc, out = run(list(argv))
            cmds[json.dumps(argv)] = [rc, hashlib.sha256(out.encode()).hexdigest()]
        seen["commands"] = cmds
    return seen


def parse_units(out: str) -> dict[str, list]:
    """``systemctl show -p Id,ActiveState,UnitFileState u1 u2 ...`` (blocks separated by blank lines):
    {unit: [ActiveState, UnitFileState]}."""
    units: dict[str, list] = {}
    for block in out.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = [props.get("ActiveState", ""), props.get("UnitFileState", "")]
    return units


def _healthy(seen: dict) -> list[str]:
    """What in an observation cannot be a converged stage, whatever was recorded (a dead unit, a closed
    port, an endpoint not answering 200)."""
    bad = []
    units = seen.get("units") or {}
    if "error" in units:
        bad.append(f"systemctl show failed (rc {units['error']})")
    else:
        bad += [f"unit {u} is {s[0]}" for u, s in sorted(units.items()) if s[0] != "active"]
    bad += [f"nothing listens on {a}" for a, ok in sorted((seen.get("tcp") or {}).items()) if not ok]
    bad += [f"{u} answers {c if c is not None else 'nothing'}, not 200"
            for u, c in sorted((seen.get("http") or {}).items()) if c != 200]
    return bad


def differences(record: Any, digest: str, seen: dict) -> list[str]:
    """Why the stage has something to do on this node ([]: nothing)."""
    bad = _healthy(seen)
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        return ["no record of a converged run of this stage on the node"] + bad
    if record.get("digest") != digest:
        bad.insert(0, "the stage's inputs changed since its last converged run "
                      f"({str(record.get('digest'))[:19]} -> {digest[:19]})")
    was = record.get("seen") or {}
    for key in WATCH_KEYS:
        a, b = was.get(key), seen.get(key)
        if a == b:
            continue
        if not isinstance(a, dict) or not isinstance(b, dict):
            bad.append(f"{key}: {'not recorded' if a is None else 'no longer watched' if b is None else 'differs'}")
            continue
        for item in sorted(set(a) | set(b)):
            if a.get(item) != b.get(item):
                bad.append(f"{key} {item}: {_what(a.get(item), b.get(item))}")
    return bad


def _what(was: Any, now: Any) -> str:
    if isinstance(was, dict) and isinstance(now, dict):
        gone = sorted(set(was) - set(now))
        new = sorted(set(now) - set(was))
        changed = sorted(k for k in set(was) & set(now) if was[k] != now[k])
        parts = ([f"gone {', '.join(gone[:3])}"] if gone else []) + ([f"new {', '.join(new[:3])}"] if new else []) \
            + ([f"changed {', '.join(changed[:3])}"] if changed else [])
        return "; ".join(parts) or "differs"
    return f"was {json.dumps(was)[:80]}, now {json.dumps(now)[:80]}"


def load(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def make_record(stage: str, digest: str, seen: dict) -> dict[str, Any]:
    return {"schema": SCHEMA, "stage": stage, "digest": digest, "seen": seen}


def check_all(state_dir: str, specs: Any, observe_fn: Callable[[dict], dict] = observe) -> dict[str, dict]:
    """Several stages' checks in one call (site.yml asks once per host for every gated stage, right
    after stage 0): ``specs`` is {stage: {"digest": ..., "watch": ...}}; the answer is
    {stage: {"converged": bool, "differs": [...], "record": path, "digest": the digest asked with}},
    each as one ``check`` would say."""
    if not isinstance(specs, dict) or not specs:
        raise GateError(f"stages: expected a mapping of stage to its digest and watch, found {specs!r:.80}")
    verdicts: dict[str, dict] = {}
    for stage in sorted(specs):
        spec = specs[stage]
        if not isinstance(spec, dict) or not isinstance(spec.get("digest"), str) or "watch" not in spec:
            raise GateError(f"stages.{stage}: expected {{digest: <str>, watch: <mapping>}}, found {spec!r:.80}")
        path = record_path(state_dir, stage)
        differs = differences(load(path), spec["digest"], observe_fn(spec["watch"]))
        verdicts[stage] = {"converged": not differs, "differs": differs, "record": path, "digest": spec["digest"]}
    return verdicts
