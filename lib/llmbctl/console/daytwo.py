"""The console's day-two commands (issue 27): status, stop, start, collect (docs/day-two.md).

    llmb status -i INV [--json]               playbooks/status.yml: what runs against the plan and the lock
    llmb stop -i INV [--group G] [--no-drain] playbooks/stop.yml: reverse plan order, drained first
    llmb start -i INV [--group G]             playbooks/start.yml: plan order, each level healthy
    llmb collect -i INV [--limit HOSTS]       playbooks/collect.yml: a support bundle per host, one archive

Each goes through ansible-runner like the other commands (cli.run_playbook: the live table, the
run's environment without its secrets, the report of artifacts/<run-id>/). Exit status: 0 all as
planned / done, 1 otherwise (drift, a service not healthy, a host that did not answer), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from .progress import FAILED, UNREACHABLE, Progress

COMMANDS = ("status", "stop", "start", "collect")
# an Ansible host pattern as --limit takes it: names, groups, globs, ranges, and , : ! & as separators
_LIMIT = re.compile(r"^[A-Za-z0-9_.*\[\]:,!&-]{1,512}$")


def _common(sp) -> None:
    sp.add_argument("-i", "--inventory", required=True)
    sp.add_argument("-e", "--extra-vars", action="append", default=[], metavar="NAME=VALUE")
    sp.add_argument("--run-id", default=os.environ.get("LLMB_RUN_ID"))


def add_parsers(sub) -> None:
    sp = sub.add_parser("status", help="what runs on every node against the plan and the lock: playbooks/status.yml")
    _common(sp)
    sp.add_argument("--json", action="store_true", help="the status as JSON on stdout (the table goes to stderr)")
    for name, helptext in (("stop", "stop the planned services in reverse plan order, drained first: playbooks/stop.yml"),
                           ("start", "start the planned services in plan order, with health: playbooks/start.yml")):
        sp = sub.add_parser(name, help=helptext)
        _common(sp)
        sp.add_argument("--group", metavar="G", help="only the hosts of inventory group G (a whole serving group)")
        if name == "stop":
            sp.add_argument("--no-drain", action="store_true",
                            help="stop at once: no worker taken out of its router's rotation first (serve_drain=false)")
    sp = sub.add_parser("collect", help="a support bundle per host, one archive: playbooks/collect.yml")
    _common(sp)
    sp.add_argument("--limit", metavar="HOSTS", help="only these hosts (an Ansible host pattern: node1,node2)")


def limit_option(value: str | None) -> list[str]:
    """--limit HOSTS as ansible-playbook options; the controller (stage 0) always runs."""
    if value is None:
        return []
    if not _LIMIT.match(value):
        raise ValueError(f"--limit {value!r}: expected an Ansible host pattern (names, groups, globs; , : ! &)")
    return ["--limit", f"{value},localhost"]


def _errors(progress: Progress) -> dict[str, str]:
    """host -> why it has no result (its failed or unreachable task), from the live table."""
    out: dict[str, str] = {}
    for (_stage, host), c in progress.cells.items():
        if c.status in (FAILED, UNREACHABLE):
            out.setdefault(host, f"{c.status}: {c.error or c.task}")
    return out


def status(a: argparse.Namespace, cli) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..status import COLUMNS, SUMMARY, drift_lines, exit_status, rows, summarize
    run_id = cli.new_run_id(a.run_id)
    inv, extra = cli._inventory(a.inventory), cli._check_extra(a.extra_vars)
    progress = Progress(command="status")
    rc = cli.run_playbook("playbooks/status.yml", inv, extra, run_id, ["status"], f"llmb status {run_id}",
                          quiet=a.json, progress=progress)
    if rc == 2:
        return 2
    run_dir = cli.ROOT / "artifacts" / run_id
    summary = summarize(run_dir, _errors(progress))
    summary["run_id"] = run_id
    (run_dir / SUMMARY).write_text(json.dumps(summary, indent=1, default=str) + "\n")
    if a.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
        t = Table(title=f"llmb status {run_id}: " + ("all as planned" if summary["ok"] else
                                                     f"{len(summary['drift'])} drift"), title_justify="left")
        for c in COLUMNS:
            t.add_column(c)
        for r in rows(summary):
            t.add_row(*(Text(x) for x in r), style=None if r[-1] == "-" else "red")
        console.print(t)
        for h, rec in summary["hosts"].items():
            if rec and rec.get("group_restarted"):
                console.print(f"note: {h} (head) restarted the serving group at {rec['group_restarted']}", soft_wrap=True)
        for line in drift_lines(summary):
            console.print(Text(f"drift: {line}", style="red"), soft_wrap=True)
        console.print(f"status:         {run_dir / SUMMARY}", soft_wrap=True)
    return exit_status(summary)


def collect(a: argparse.Namespace, cli) -> int:
    run_id = cli.new_run_id(a.run_id)
    inv, extra = cli._inventory(a.inventory), cli._check_extra(a.extra_vars)
    options = limit_option(a.limit)
    progress = Progress(command="collect")
    rc = cli.run_playbook("playbooks/collect.yml", inv, extra, run_id, ["collect"], f"llmb collect {run_id}",
                          progress=progress, options=options)
    archive = cli.ROOT / "artifacts" / run_id / f"llmb-collect-{run_id}.tar.gz"
    if archive.is_file():
        print(f"archive:        {archive}")
    if rc == 2:
        return 2
    if a.limit:  # the report expects every planned host; the hosts asked for are what counts here
        return 0 if archive.is_file() and not _errors(progress) else 1
    return rc if archive.is_file() else 1


def inventory_groups(inventory: str) -> list[str]:
    """The inventory's group names (Ansible's own reader; no host contacted)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    return sorted(InventoryManager(loader=DataLoader(), sources=[inventory]).groups)


def group_option(inventory: str, group: str | None) -> list[str]:
    if group is None:
        return []
    groups = inventory_groups(inventory)
    if group not in groups:
        raise ValueError(f"--group {group!r}: no such group in {inventory} (its groups: {', '.join(groups)})")
    return ["--limit", f"{group},localhost"]


def drain_lines(stop_dir) -> list[str]:
    """The stop's drains (llmb.report.drain_lines) from its records under ``stop_dir``."""
    from llmb.report import drain_lines as lines

    records = {}
    for path in sorted(stop_dir.glob("*.json")):
        try:
            records[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return lines({h: r for h, r in records.items() if isinstance(r, dict)})


def stop_start(a: argparse.Namespace, cli) -> int:
    run_id = cli.new_run_id(a.run_id)
    inv, extra = cli._inventory(a.inventory), cli._check_extra(a.extra_vars)
    options = group_option(inv, a.group)
    if getattr(a, "no_drain", False):
        extra = [*extra, "serve_drain=false"]
    progress = Progress(command=a.cmd)
    title = f"llmb {a.cmd}{' --group ' + a.group if a.group else ''} {run_id}"
    rc = cli.run_playbook(f"playbooks/{a.cmd}.yml", inv, extra, run_id, [a.cmd], title, progress=progress,
                          options=options)
    if a.cmd == "stop":
        for line in drain_lines(cli.ROOT / "artifacts" / run_id / "stop"):
            print(line)
    if rc == 2 or not a.group:
        return rc
    # the report expects every planned host; with --group the group's hosts are what counts
    done = {p.stem for p in (cli.ROOT / "artifacts" / run_id / a.cmd).glob("*.json")}
    return 0 if done and not _errors(progress) else 1


def main(a: argparse.Namespace, cli) -> int:
    """Run day-two command ``a.cmd``; ``cli`` is the console module (run_playbook, the input checks)."""
    if a.cmd == "status":
        return status(a, cli)
    if a.cmd == "collect":
        return collect(a, cli)
    if a.cmd in ("stop", "start"):
        return stop_start(a, cli)
    print(f"llmb: {a.cmd}: not a day-two command", file=sys.stderr)
    return 2
