"""llmb_stage_gate on the controller: a ``check`` given this run's one check_all result on the host
(``gates``, site.yml's playbooks/_gates.yml) and the gated stages that ran in full on it since
(``acted``) takes its verdict from there while it still holds (llmbctl.stagegate.prefetched decides),
without asking the node again; anything else runs the module on the node as ever (a single-stage
run has no ``gates``). ``prefetched_all``, run once, gives the stage's verdict for every host of the play
from those results alone (llmbctl.stagegate.prefetched_all), never asking a node. Documentation: plugins/modules/llmb_stage_gate.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl import stagegate


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        gates, acted = args.pop("gates", None), args.pop("acted", None)
        if args.get("action") == "prefetched_all":
            try:
                verdict = stagegate.prefetched_all(str(args.get("stage")), args.get("hosts"), gates,
                                                   args.get("acted_by_host"), args.get("digests"))
            except stagegate.StageGateError as err:
                raise AnsibleActionFail(f"llmb_stage_gate {args.get('stage')}: {err}") from None
            result.update(changed=False, **verdict)
            return result
        if gates and args.get("action") == "check":
            try:
                verdict = stagegate.prefetched(gates, str(args.get("stage")), list(acted or []), str(args.get("digest")))
            except stagegate.StageGateError as err:
                raise AnsibleActionFail(f"llmb_stage_gate {args.get('stage')}: {err}") from None
            if verdict:
                result.update(changed=False, **verdict)
                return result
        result.update(self._execute_module(module_name="llmb_stage_gate", module_args=args, task_vars=task_vars))
        return result
