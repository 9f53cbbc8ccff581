"""serve's results on the fast path of a converged re-run (issue 29), controller side: where every host's
serve stage was found converged, nothing of the role ran, so what is left is its proof from outside
(the OpenAI smoke test of every endpoint, from the controller as a client would) and every host's
result for the report. Both are done here in one task (plugins/action/llmb_serve_converged.py) instead
of two rounds per host (roles/serve/tasks/smoke.yml and report.yml); the records are the ones those
write when nothing restarted: {services, restarted: [], smoke, healthy: [], compile_cache: {}}.

Every serve record, from either writer, is written by ``record_serve``: the one place that carries the
host's start history (llmb.starthistory) over from its previous record in the artifacts directory.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from llmb import starthistory

from llmbctl.results import record, result_path


class ServeResultError(ValueError):
    pass


def services(doc_hosts: Mapping[str, Any], host: str) -> list[dict[str, Any]]:
    """The host's planned services (the document's hosts.<host>.plan.services; none without a plan), as
    roles/serve/tasks/plan.yml reads them."""
    if not isinstance(doc_hosts, Mapping):
        raise ServeResultError(f"document hosts: expected a mapping, found {type(doc_hosts).__name__}")
    entry = doc_hosts.get(host) or {}
    plan = (entry.get("plan") if isinstance(entry, Mapping) else None) or {}
    found = (plan.get("services") if isinstance(plan, Mapping) else None) or []
    if not isinstance(found, list) or not all(isinstance(s, Mapping) and isinstance(s.get("name"), str) for s in found):
        raise ServeResultError(f"{host}: plan.services: expected a list of services with a name, found {found!r:.120}")
    return [dict(s) for s in found]


def api(service: Mapping[str, Any], host: str) -> dict[str, Any] | None:
    """The service's API as the smoke test reads it (base_url, served_model_name, reasoning, tool_calls,
    vision, api_key's variable), or None where it serves none."""
    a = service.get("api")
    if a is None:
        return None
    where = f"{host}: service {service['name']}: api"
    if not isinstance(a, Mapping):
        raise ServeResultError(f"{where}: expected a mapping, found {a!r:.80}")
    for key in ("base_url", "served_model_name"):
        if not isinstance(a.get(key), str) or not a[key]:
            raise ServeResultError(f"{where}.{key}: expected a non-empty string, found {a.get(key)!r:.80}")
    out: dict[str, Any] = {"base_url": a["base_url"], "model": a["served_model_name"]}
    for key, name in (("reasoning", "reasoning"), ("tool_calls", "tool_calls"), ("vision", "image")):
        value = a.get(key, False)
        if not isinstance(value, bool):
            raise ServeResultError(f"{where}.{key}: expected true or false, found {value!r:.80}")
        out[name] = value
    key = a.get("api_key")
    if key is not None:
        if not isinstance(key, Mapping) or not isinstance(key.get("var"), str) or not key["var"]:
            raise ServeResultError(f"{where}.api_key: expected {{var: <variable name>}}, found {key!r:.80}")
        out["api_key_var"] = key["var"]
    return out


SmokeRunner = Callable[[str, dict[str, Any]], list[dict[str, Any]]]


def converged_results(doc_hosts: Mapping[str, Any], hosts: list[str], smoke: SmokeRunner | None
                      ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, list[dict[str, Any]]]]]:
    """Every host's serve result where the stage was found converged on every host: ``smoke(host, api)``
    smoke-tests one endpoint and returns its checks (llmb.smoke.run_smoke's transcript); ``smoke`` None
    (check mode, serve_smoke false) runs none and each API service's transcript is {} (what the skipped
    per-host task records). Returns (data per host, [(host, checks) of each endpoint that failed a check])."""
    results: dict[str, dict[str, Any]] = {}
    failed: list[tuple[str, list[dict[str, Any]]]] = []
    for host in hosts:
        mine = services(doc_hosts, host)
        transcripts = []
        for s in mine:
            a = api(s, host)
            if a is None:
                continue
            checks = smoke(host, a) if smoke is not None else None
            if checks is not None and not all(c.get("ok") for c in checks):
                failed.append((host, checks))
            transcripts.append(checks if checks is not None else {})
        results[host] = {"services": [s["name"] for s in mine], "restarted": [], "smoke": transcripts,
                         "healthy": [], "compile_cache": {}}
    return results, failed


_MAX_RECORD_BYTES = 4 << 20  # a serve record is a few kB; one this large is not ours


def _previous_starts(path: str) -> tuple[list[dict[str, Any]], str | None]:
    """The start history in the host's previous serve record at ``path``: ([], None) where there is none
    (no record yet, or an older one without ``starts``); ([], why) where it cannot be read or is not
    what a serve record holds (the caller starts a fresh history and says so)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return [], None
    except OSError as err:
        return [], f"cannot open it ({err.strerror or err})"
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(_MAX_RECORD_BYTES + 1)
    except OSError as err:
        return [], f"cannot read it ({err.strerror or err})"
    if len(raw) > _MAX_RECORD_BYTES:
        return [], f"larger than {_MAX_RECORD_BYTES} bytes"
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:
        return [], f"not JSON ({str(err)[:120]})"
    if not isinstance(doc, dict):
        return [], f"expected a JSON object, found {type(doc).__name__}"
    if "starts" not in doc:
        return [], None
    try:
        return starthistory.check(doc["starts"]), None
    except starthistory.HistoryError as err:
        return [], str(err)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def record_serve(artifacts_dir: str, host: str, data: Mapping[str, Any], started: str | None = None,
                 at: str | None = None) -> tuple[str, str | None]:
    """Write the host's serve record (llmbctl.results.record) with ``starts``: the history of its previous
    record, then one start per service this run started (``data['started_services']``; none without it)
    and health-waited (``data['healthy']``), its cache state from ``data['group_compile_cache']`` (the state as
    a start of its group) else ``data['compile_cache']``, its time from
    start to healthy from ``data['since_start_s']`` where known, ``at`` now in UTC unless given; the last
    starthistory.CAP per service kept.
    Returns (path, warning): a warning naming the host and the file where the previous history could not
    be read and a fresh one was started. Raises ServeResultError where this run's ``healthy`` or
    ``compile_cache`` is not what roles/serve/tasks/report.yml writes."""
    path = result_path(artifacts_dir, "serve", host)
    previous, why = _previous_starts(path)
    try:
        states = {}  # a start's state: its group's where report.yml gave it, else the host's own cache's
        for key in ("compile_cache", "group_compile_cache"):
            value = data.get(key) or {}
            if not isinstance(value, Mapping):
                raise starthistory.HistoryError(f"{key}: expected a mapping of service to state, found {value!r:.80}")
            states.update(value)
        new = starthistory.from_run(data.get("healthy") or [], states, data.get("started_services") or [],
                                    at or _now(), data.get("since_start_s"))
    except starthistory.HistoryError as err:
        raise ServeResultError(f"{host}: serve record: {err}") from None
    warning = (f"{host}: serve record {path}: its start history cannot be used ({why}); starting a fresh one"
               if why else None)
    return record(artifacts_dir, "serve", host, {**data, "starts": starthistory.merge(previous, new)},
                  started=started), warning
