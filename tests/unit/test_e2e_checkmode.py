"""tests/e2e/checkmode.py, the dry run's changed set against the real run's: the (host, task) pairs it
reads from Ansible's output (handlers included) and the exceptions it reads from docs/check-mode.md,
each of which must name a task that exists."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("e2e_checkmode", ROOT / "tests" / "e2e" / "checkmode.py")
checkmode = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(checkmode)

OUT = """\
PLAY [Serve the model] *********************************************************

TASK [serve : Systemd unit per systemd service] ********************************
changed: [node1] => (item=llmb-ray)
ok: [node2] => (item=llmb-ray)

TASK [serve : Start services] **************************************************
ok: [node1]
changed: [node2 -> node1]

RUNNING HANDLER [ssh_mesh : Restart the mesh sshd] *****************************
changed: [node2]

PLAY RECAP *********************************************************************
node1                      : ok=3    changed=1    unreachable=0    failed=0
"""


def test_changed_set_reads_tasks_and_handlers():
    assert checkmode.changed_set(OUT) == {
        ("node1", "serve : Systemd unit per systemd service"),
        ("node2", "serve : Start services"),
        ("node2", "ssh_mesh : Restart the mesh sshd"),  # a handler the dry run did not report is a difference
    }


def test_compare_leaves_out_the_documented_exceptions_only():
    dry = "TASK [weights : Patch config.json for the engine and platform] ***\nchanged: [node1]\n"
    real = "RUNNING HANDLER [serve : Reload units] ***\nchanged: [node1]\n"
    assert checkmode.compare(dry, real) == (set(), {("node1", "serve : Reload units")})


def _tasks() -> dict[str, dict]:
    names = {}
    for path in sorted((ROOT / "roles").glob("*/*/*.yml")):
        if path.parent.name not in ("tasks", "handlers"):
            continue
        stack = list(yaml.safe_load(path.read_text()) or [])
        while stack:
            t = stack.pop()
            if isinstance(t, dict):
                if "name" in t:
                    names[f"{path.parent.parent.name} : {t['name']}"] = t
                for key in ("block", "rescue", "always"):
                    stack += t.get(key) or []
    return names


def test_every_documented_exception_names_a_task_that_exists():
    table, tasks = checkmode.unpredictable(), _tasks()
    assert len(table) >= 3, "docs/check-mode.md's table was not read"
    assert not set(table) - set(tasks), f"docs/check-mode.md lists tasks that do not exist: {set(table) - set(tasks)}"
    # systemd_service with daemon_reload alone never reports changed (real run or check mode): never an exception
    reload_only = [n for n in table if set(tasks[n].get("ansible.builtin.systemd_service") or {"x": 1}) == {"daemon_reload"}]
    assert not reload_only, reload_only
