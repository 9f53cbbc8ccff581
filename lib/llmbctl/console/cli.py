"""`llmb`: the stage playbooks through ansible-runner, with live progress and the report.

    llmb up -i INV [-e k=v ...]          site.yml; report.html at the end
    llmb verify -i INV                   playbooks/verify.yml
    llmb plan -i INV [launch-plan args]  scripts/launch-plan (no host contacted)
    llmb recover NODE -i INV [--accept-hostkey SHA256:...]
    llmb report RUN                      (re)write report.{json,md,html} of artifacts/RUN
    llmb up -i INV --check               dry run, then the plan diff against the applied lock
    llmb rollback -i INV [--to N|--list] re-apply an earlier applied lock (console/upgrade.py)

Ansible's full output (stdout) and every event (job_events/) stay under
artifacts/<run-id>/runner/. Plain ansible-playbook keeps working: this only drives it.
A run gets only the environment it needs, and its secrets (HF_TOKEN, ...) never enter what the
runner writes: llmb.console.runenv.
Exit status: 0 verdict OK, 1 failed, 2 bad input (a message naming it; an inventory stage 0 refuses,
with its problems listed last).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from llmb.report import PIPELINE_STAGES, REFUSED_TEXT, ReportError, problem_lines, write_report
from llmb.stages import BY_NAME

from llmbctl import REPO_ROOT

from ..lockhistory import HistoryError
from . import daytwo, runenv, upgrade
from .progress import FAILED, OK, RUNNING, UNREACHABLE, Progress

ROOT = Path(os.environ.get("LLMB_ROOT") or REPO_ROOT)
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:-]{0,127}$")
_EXTRA = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
STYLE = {OK: "green", FAILED: "bold red", UNREACHABLE: "bold red", RUNNING: "yellow"}


class UsageError(ValueError):
    pass


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def render(p: Progress, title: str):
    """A rich Table: one row per host, one column per stage, then the weights fetched."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column("host")
    stages = p.stages()
    for s in stages:
        t.add_column(s)
    t.add_column("weights fetched")
    for h in p.hosts:
        row = [h]
        for s in stages:
            c = p.cells.get((s, h))
            if c is None:
                row.append("[dim]·[/dim]")
                continue
            secs = f" {c.seconds:.0f}s" if c.seconds is not None else ""
            row.append(f"[{STYLE.get(c.status, 'dim')}]{c.status}{secs}[/]")
        w = p.weights.get(h)
        if w:
            rate = f" {_human(w.rate)}/s" if w.rate else ""
            row.append(f"{_human(w.bytes)} in {w.files} files{rate}")
        else:
            row.append("-")
        t.add_row(*row)
    return t


def _check_extra(values: list[str]) -> list[str]:
    for v in values:
        if not _EXTRA.match(v) and not v.startswith("@"):
            raise UsageError(f"-e {v!r}: expected name=value or @file")
    return values


def _inventory(value: str) -> str:
    if not value:
        raise UsageError("-i: the inventory is required (a directory such as inventories/h800, or a hosts file)")
    path = Path(value).expanduser()
    if not path.exists():
        raise UsageError(f"-i {value}: no such inventory")
    return str(path.resolve())


def new_run_id(value: str | None) -> str:
    """--run-id / LLMB_RUN_ID, checked; else the UTC time."""
    run_id = value or _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    if not _RUN_ID.match(run_id):
        raise UsageError(f"--run-id / LLMB_RUN_ID {run_id!r}: letters, digits and . _ + : - only")
    return run_id


def run_playbook(playbook: str | list[str], inventory: str, extra: list[str], run_id: str, expect: list[str] | None,
                 title: str, quiet: bool = False, options: list[str] | None = None, ident: str | None = None,
                 report: bool = True, command: str | None = None, progress: Progress | None = None) -> int:
    """Run playbooks of the repository through ansible-runner; live progress; the report.

    options: more ansible-playbook options (--check, --limit; checked by the caller); ident: the
    runner's name for this call (several calls of one run: artifacts/<run>/runner/artifacts/<ident>);
    report: False for a step of a longer run (exit status from Ansible alone, the report comes at the
    end); command: the day-two command's column in the live table; progress: a table to draw into."""
    ident = ident or run_id
    try:
        import ansible_runner
        from rich.console import Console
        from rich.live import Live
    except ImportError as e:
        raise UsageError(f"llmb needs ansible-runner and rich in the controller venv ({e.name} missing): "
                         "run make venv") from None
    run_dir = ROOT / "artifacts" / run_id
    private = run_dir / "runner"
    private.mkdir(parents=True, exist_ok=True)
    argv = ["-i", inventory]
    extra, secret_vars = runenv.split_extra(extra)
    for v in extra:
        argv += ["-e", v]
    argv += list(options or [])
    argv += [playbook] if isinstance(playbook, str) else list(playbook)  # after the options: scripts/llmb-playbook passes them all to ansible-playbook
    plain, secret = runenv.split(os.environ)
    channel = runenv.SecretChannel(secret, secret_vars)
    env = {"LLMB_RUN_ID": run_id, "LLMB_ARTIFACTS_DIR": str(run_dir), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
           **channel.env}
    progress = progress or Progress(command=command)
    console = Console(stderr=quiet)  # quiet (--json): the table and the lines after it on stderr
    t0 = time.monotonic()
    with Live(render(progress, title), console=console, refresh_per_second=4, transient=False,
              auto_refresh=console.is_terminal) as live:
        def handler(ev: dict) -> bool:
            progress.feed(ev)
            if console.is_terminal:
                live.update(render(progress, f"{title}  {time.monotonic() - t0:.0f}s"))
            return True  # keep the event in job_events/

        try:
            # ansible_runner.run, with the environment it seeded from os.environ cut to what the run needs
            r = ansible_runner.interface.init_runner(
                private_data_dir=str(private), project_dir=str(ROOT), binary=str(ROOT / "scripts/llmb-playbook"),
                cmdline=shlex.join(argv), envvars=env, ident=ident, quiet=True, suppress_env_files=True,
                event_handler=handler, settings={"suppress_ansible_output": True})
            r.config.env = runenv.runner_env(r.config.env, os.environ, plain, env)
            r.run()
        finally:
            channel.close()
        progress.settle()
        live.update(render(progress, f"{title}  {time.monotonic() - t0:.0f}s"))
    console.print()
    out = private / "artifacts" / ident / "stdout"
    for (stage, host), c in progress.cells.items():
        if c.status in (FAILED, UNREACHABLE):
            console.print(f"[bold red]{stage} on {host}[/]: {c.error}", markup=True, highlight=False, soft_wrap=True)
    if not report:
        console.print(f"ansible output: {out}", soft_wrap=True)
        return 0 if r.rc == 0 else 1
    try:
        rep = write_report(str(run_dir), expect) if run_dir.is_dir() else None
    except ReportError as e:
        console.print(str(e), soft_wrap=True)
        rep = None
    console.print(f"ansible output: {out}", soft_wrap=True)
    console.print(f"events:         {out.parent / 'job_events'}", soft_wrap=True)
    if rep is None:
        return 1 if r.rc else 0
    console.print(f"verdict:        {rep['verdict']}" + (f"  endpoint {rep['endpoint']}" if rep.get("endpoint") else ""),
                  soft_wrap=True)
    console.print(f"report:         {run_dir / 'report.html'}", soft_wrap=True)
    if rep.get("refused"):
        print_refusal(console, rep["refused"])
        return 2
    return 0 if rep["ok"] and r.rc == 0 else 1


def print_refusal(console, problems: list[dict]) -> None:
    """Stage 0's problems as the planner states them, last on the terminal (deployment.json)."""
    n = len(problems)
    console.print(f"\n[bold red]{REFUSED_TEXT}[/]: {n} problem{'s' if n != 1 else ''} "
                  "(fix the inventory and run again)", markup=True, highlight=False, soft_wrap=True)
    for i, p in enumerate(problems, 1):
        first, *rest = problem_lines(p)
        console.print(f"{i}. {first}", markup=False, highlight=False, soft_wrap=True)
        for line in rest:
            console.print(f"      {line}", markup=False, highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="llmb", description="llm-bringup operator's console (ansible-runner)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, helptext in (("up", "every stage: site.yml"), ("verify", f"stage {BY_NAME['verify'].number}: {BY_NAME['verify'].playbook}"),
                           ("recover", "rebuild one node: playbooks/recover.yml")):
        sp = sub.add_parser(name, help=helptext)
        if name == "recover":
            sp.add_argument("node")
            sp.add_argument("--accept-hostkey", metavar="SHA256:...",
                            help="accept exactly this new host key of NODE (the fingerprint recover showed)")
        sp.add_argument("-i", "--inventory", required=True)
        sp.add_argument("-e", "--extra-vars", action="append", default=[], metavar="NAME=VALUE")
        sp.add_argument("--run-id", default=os.environ.get("LLMB_RUN_ID"))
        if name == "up":  # issue 27: the plan diff first, group by group (console/upgrade.py)
            sp.add_argument("--check", action="store_true",
                            help="dry run (--check --diff), then the plan diff against the applied lock")
    upgrade.add_parsers(sub, os.environ.get("LLMB_RUN_ID"))
    sp = sub.add_parser("plan", help="the launch plan, no host contacted: scripts/launch-plan")
    sp.add_argument("-i", "--inventory", required=True)
    sp.add_argument("rest", nargs=argparse.REMAINDER)
    sp = sub.add_parser("report", help="(re)write report.{json,md,html} of a run")
    sp.add_argument("run", help="run id (artifacts/<run>) or its directory")
    daytwo.add_parsers(sub)
    a = ap.parse_args(argv)
    try:
        if a.cmd in daytwo.COMMANDS:
            return daytwo.main(a, sys.modules[__name__])
        if a.cmd == "plan":
            return subprocess.call([str(ROOT / "scripts/launch-plan"), "-i", _inventory(a.inventory), *a.rest])
        if a.cmd == "report":
            d = Path(a.run) if "/" in a.run else ROOT / "artifacts" / a.run
            rep = write_report(str(d))
            print(f"verdict: {rep['verdict']}\nreport:  {d / 'report.html'}")
            return 0 if rep["ok"] else 1
        run_id = new_run_id(a.run_id)
        inv, extra = _inventory(a.inventory), _check_extra(a.extra_vars)
        if a.cmd == "up":
            return upgrade.up(run_playbook, inv, extra, run_id, ROOT, f"llmb up {run_id}", a.check)
        if a.cmd == "rollback":
            return upgrade.rollback(run_playbook, a, inv, extra, run_id, ROOT)
        if a.cmd == "verify":
            return run_playbook("playbooks/verify.yml", inv, extra, run_id, ["verify"], f"llmb verify {run_id}")
        extra = [f"llmb_recover_host={a.node}", *extra]
        if a.accept_hostkey:
            from ..hostkeys import check_fingerprint

            extra.append(f"llmb_recover_hostkey={check_fingerprint(a.accept_hostkey, '--accept-hostkey')}")
        return run_playbook("playbooks/recover.yml", inv, extra, run_id, PIPELINE_STAGES, f"llmb recover {a.node} {run_id}")
    except (UsageError, ReportError, ValueError, HistoryError) as e:
        print(f"llmb: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
