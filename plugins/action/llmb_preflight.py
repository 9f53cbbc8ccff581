"""llmb_preflight: preflight's one round per node. Waits for the node's connection, reads what preflight
needs of it in one module call (llmb_preflight: the minimal facts, the NVIDIA driver, a C compiler), then
judges it on the controller (llmbctl.nodeos.preflight_problems) and fails with every problem in one
message. The facts become the host's facts, as setup's would; an untested OS is a warning.
Documentation: plugins/modules/llmb_preflight.py."""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from llmb.finding import Finding
from llmbctl.nodeos import os_untested, preflight_problems
from llmbctl.plugin import ControllerAction

ARG_SPEC = {
    "engine": {"type": "str", "default": ""},
    "version": {"type": "str", "default": ""},
    "vendor": {"type": "str", "default": ""},
    "control": {"type": "bool", "default": False},
    "confined": {"type": "str", "default": ""},
    "connect_timeout": {"type": "int", "default": 30},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC
    _requires_connection = True

    def _read(self, host, module_args, task_vars, timeout):
        """The module's result, retrying while the node does not answer (wait_for_connection's job)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._execute_module(module_name="llmb_preflight", module_args=module_args, task_vars=task_vars)
            except AnsibleConnectionFailure as err:
                if time.monotonic() >= deadline:
                    raise AnsibleActionFail(Finding(
                        "preflight connection", host=host, found=str(err).strip()[:500],
                        expected=f"the node answers over its connection within {timeout} s").render()) from None
                time.sleep(1)
                try:
                    self._connection.reset()
                except AnsibleConnectionFailure:
                    pass

    def act(self, args, task_vars, result):
        host = task_vars.get("inventory_hostname")
        nvidia = args["vendor"] == "nvidia" and not args["control"]
        module_args = {"driver": nvidia, "compiler": bool(args["confined"])}
        res = self._read(host, module_args, task_vars, args["connect_timeout"])
        if res.get("failed"):
            found = str(res.get("msg") or res.get("module_stderr") or "failed").strip()[:500]
            raise AnsibleActionFail(Finding("preflight facts", host=host, found=found,
                                            expected="the facts module runs on the node (python3 there)").render())
        facts = res.get("ansible_facts") or {}
        try:
            problems = preflight_problems(
                host, facts, engine=args["engine"], version=args["version"], vendor=args["vendor"] or None,
                driver_query=(res.get("driver_query") or {}).get("stdout", "") if nvidia else None,
                confined=args["confined"], compiler=res.get("compiler"))
        except ValueError as err:  # llmbctl.catalog.CatalogError too
            raise AnsibleActionFail(f"{host}: preflight engine.driver: {err}") from None
        result.update(changed=False, ansible_facts=facts, checked=sorted(["os"] + ["driver"] * nvidia
                                                                          + ["compiler"] * bool(args["confined"])))
        note = os_untested(host, facts)
        if note:
            result.setdefault("warnings", []).append(note)
        if problems:
            result.update(failed=True, msg="; ".join(problems), problems=problems)
        return result
