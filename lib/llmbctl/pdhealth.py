"""Health of a disaggregated deployment's groups, as the router's host sees them (stdlib only).

The plan's router service lists the health checks it starts after (``after_healthy``: node 0 of the
prefill and of the decode group, each with its group, role and host). ``group_report`` asks each and
names what is down by group and host, e.g. "the decode group 'decode_nodes' is down: node 0 node2
(http://172.30.0.12:30000/health): connection refused".
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def http_status(url: str, timeout: float = 5.0) -> tuple[int | None, str]:
    """(HTTP status or None, what went wrong)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - the plan's own URL
            return resp.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason)


def group_report(after_healthy: list[dict[str, Any]],
                 probe: Callable[[str], tuple[int | None, str]] = http_status) -> list[str]:
    """One line per group whose node 0 does not answer its health check (empty: every group is up)."""
    out = []
    for check in after_healthy:
        status, why = probe(check["url"])
        if status == 200:
            continue
        out.append(f"the {check.get('role', '?')} group {check.get('group', '?')!r} is down: node 0 "
                   f"{check.get('node', '?')} ({check['url']}): {why or f'HTTP {status}'}; the router cannot "
                   f"serve until it is back (systemctl status {check.get('service', 'its unit')} on "
                   f"{check.get('node', 'that host')})")
    return out
