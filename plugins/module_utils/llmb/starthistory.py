"""The serve stage's start history (issue 23 point 6): every health-checked start of a host's services
recorded in this artifacts directory, with the time it took to healthy and the state of the service's
compile cache before it (cold, warm or peer: llmb.compile_cache.STATES). The time to healthy of a start
(``time_to_healthy``) is from the service's start (llmb_service_ready's since_start_s: systemd's start
timestamp, a container's StartedAt), else, where that is not known, the health wait (waited_s).

The serve record of a host (<artifacts_dir>/serve/<host>.json) keeps it as ``starts``, a list of
{service, compile_cache, waited_s, since_start_s, at}: llmbctl.serveresult carries the previous record's list over,
appends this run's health waits of the services it started (none on the converged fast path) and keeps the last CAP per service;
the report groups it by compile cache state and shows each group's median and count (``summary``, the one
place that decides the grouping and the median). An entry without a cache state (none was known at its
start) is grouped as ``unknown``, shown after the three states. Stdlib only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from .compile_cache import STATES

CAP = 20  # the last starts kept per service
UNKNOWN = "unknown"  # the group of a start whose compile cache state was not known
GROUPS = (*STATES, UNKNOWN)  # the order the report shows them in
_MAX_ENTRIES = 4096  # more than any capped history holds: a list longer than this is not ours
_MAX_TEXT = 200


class HistoryError(ValueError):
    """A start history (or a run's health waits) that is not what the serve record holds; the message
    says what was found."""


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_TEXT or not value.isprintable():
        raise HistoryError(f"{what}: expected a non-empty printable string of at most {_MAX_TEXT} characters, "
                           f"found {value!r:.80}")
    return value


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise HistoryError(f"{what}: expected seconds (a finite number, 0 or more), found {value!r:.80}")
    return float(value)


def _state(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if value not in STATES:
        raise HistoryError(f"{what}: expected one of {', '.join(STATES)} or null, found {value!r:.80}")
    return value


def _optional_seconds(value: Any, what: str) -> float | None:
    return None if value is None else _seconds(value, what)


def check(raw: Any) -> list[dict[str, Any]]:
    """The entries of a record's ``starts``, each checked: {service, compile_cache (a state or None),
    waited_s, since_start_s (or None), at}. Raises HistoryError on anything else (the caller starts a fresh history)."""
    if not isinstance(raw, list):
        raise HistoryError(f"starts: expected a list, found {type(raw).__name__}")
    if len(raw) > _MAX_ENTRIES:
        raise HistoryError(f"starts: expected at most {_MAX_ENTRIES} entries, found {len(raw)}")
    out = []
    for i, e in enumerate(raw):
        where = f"starts[{i}]"
        if not isinstance(e, Mapping):
            raise HistoryError(f"{where}: expected a mapping, found {type(e).__name__}")
        out.append({"service": _text(e.get("service"), f"{where}.service"),
                    "compile_cache": _state(e.get("compile_cache"), f"{where}.compile_cache"),
                    "waited_s": _seconds(e.get("waited_s"), f"{where}.waited_s"),
                    "since_start_s": _optional_seconds(e.get("since_start_s"), f"{where}.since_start_s"),
                    "at": _text(e.get("at"), f"{where}.at")})
    return out


def from_run(healthy: Any, compile_cache: Any, started: Any, at: str, since_start: Any = None) -> list[dict[str, Any]]:
    """The starts one serve run adds: one per service it started or restarted (``started``, the record's
    started_services) and then health-waited (the record's ``healthy``, [[service, seconds], ...] as
    roles/serve/tasks/report.yml writes it), with the service's state in the record's ``compile_cache``
    ({service: state}; a service it does not name: None) and its seconds from start to healthy in
    ``since_start`` (the record's since_start_s, {service: seconds}; a service it does not name: None). A service that was already running is
    health-waited too (healthy at once): that is no start, and adds nothing."""
    if not isinstance(healthy, list):
        raise HistoryError(f"healthy: expected a list of [service, seconds], found {type(healthy).__name__}")
    if not isinstance(compile_cache, Mapping):
        raise HistoryError(f"compile_cache: expected a mapping of service to state, found {type(compile_cache).__name__}")
    if not isinstance(started, list):
        raise HistoryError(f"started_services: expected a list of service names, found {type(started).__name__}")
    names = {_text(s, f"started_services[{i}]") for i, s in enumerate(started)}
    since_start = {} if since_start is None else since_start
    if not isinstance(since_start, Mapping):
        raise HistoryError(f"since_start_s: expected a mapping of service to seconds, found {type(since_start).__name__}")
    out = []
    for i, row in enumerate(healthy):
        if not isinstance(row, (list, tuple)) or len(row) != 2:
            raise HistoryError(f"healthy[{i}]: expected [service, seconds], found {row!r:.80}")
        service = _text(row[0], f"healthy[{i}] service")
        waited = _seconds(row[1], f"healthy[{i}] seconds")
        if service in names:
            out.append({"service": service, "compile_cache": _state(compile_cache.get(service), f"compile_cache.{service}"),
                        "waited_s": waited,
                        "since_start_s": _optional_seconds(since_start.get(service), f"since_start_s.{service}"),
                        "at": _text(at, "at")})
    return out


def merge(previous: list[dict[str, Any]], new: list[dict[str, Any]], cap: int = CAP) -> list[dict[str, Any]]:
    """The previous history with the new starts after it, only the last ``cap`` of each service kept
    (oldest first, the order they were recorded in)."""
    if cap < 1:
        raise HistoryError(f"cap: expected 1 or more, found {cap!r}")
    joined = [*previous, *new]
    left: dict[str, int] = {}
    for e in joined:
        left[e["service"]] = left.get(e["service"], 0) + 1
    out = []
    for e in joined:  # drop each service's oldest until cap are left
        if left[e["service"]] > cap:
            left[e["service"]] -= 1
            continue
        out.append(e)
    return out


def time_to_healthy(start: dict[str, Any]) -> float:
    """A start's time to healthy: from the service's start where known, else the health wait."""
    return start["waited_s"] if start.get("since_start_s") is None else start["since_start_s"]


def summary(starts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per service (in the order first recorded): {service, groups: [{compile_cache, median_s, count}]},
    a group per compile cache state that has starts, in GROUPS order (``unknown``: no state known);
    median_s is statistics.median of the group's times to healthy (``time_to_healthy``)."""
    by: dict[str, dict[str, list[float]]] = {}
    for e in starts:
        by.setdefault(e["service"], {}).setdefault(e["compile_cache"] or UNKNOWN, []).append(time_to_healthy(e))
    return [{"service": service,
             "groups": [{"compile_cache": g, "median_s": round(statistics.median(groups[g]), 3), "count": len(groups[g])}
                        for g in GROUPS if g in groups]}
            for service, groups in by.items()]
