"""A finding's one line (llmb.finding) for a task's fail_msg, from a check record or a mapping built in
the task: "{{ {'id': 'preflight x', 'expected': E, 'found': F, 'fix': X} | llmb_finding_line(inventory_hostname) }}"
-> 'host: preflight x: expected E, found F. X'; "" for a record that passed."""

from __future__ import annotations

from llmb.finding import Finding


def llmb_finding_line(record, host=None, check_id=None):
    f = Finding.from_record(dict(record or {}), None if host is None else str(host))
    if check_id:
        f.id = str(check_id)
    return "" if f.ok else f.render()


class FilterModule:
    def filters(self):
        return {"llmb_finding_line": llmb_finding_line}
