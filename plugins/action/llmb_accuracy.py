"""llmb_accuracy: lm-eval's gsm8k against this host's endpoints, on the controller; records the result
(llmbctl.results, the one results writer) first, then fails when the gate is missed.
Documentation: plugins/modules/llmb_accuracy.py; logic: lib/llmbctl/accuracy.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from llmbctl import accuracy as A
from llmbctl.plugin import ControllerAction, stage_started
from llmbctl.results import ResultError, record, result_path

ARG_SPEC = {
    "endpoints": {"type": "list", "elements": "dict", "required": True},
    "api_key": {"type": "str", "no_log": True},
    # checked and converted by llmbctl.accuracy (one reader of the gate's settings), passed as given
    **{name: {"type": "raw"} for name in ("dataset", "fewshot_dataset", "num_fewshot", "max_gen_toks", "concurrency",
                                          "request_timeout_s", "timeout_s", "max_retries", "tolerance", "min_score")},
    "model_profile": {"type": "str"},
    "platform": {"type": "str"},
    "decode_context_parallel": {"type": "int", "default": 1},
    "artifacts_dir": {"type": "path", "required": True},
    "host": {"type": "str"},
}


class ActionModule(ControllerAction, ActionBase):
    arg_spec = ARG_SPEC

    def act(self, args, task_vars, result):
        host = args["host"] or task_vars.get("inventory_hostname")
        started = stage_started(task_vars)

        def write(data):
            try:
                return record(args["artifacts_dir"], "accuracy", host, data, started=started)
            except (ResultError, OSError) as err:
                raise AnsibleActionFail(f"{host}: llmb_record accuracy: {err}") from None

        if args.get("dataset") in (None, ""):
            data = A.record([], None, None, None, skipped=(
                "not run: accuracy_dataset is not set (the gsm8k gate needs a local gsm8k-format JSONL; "
                "docs/accuracy.md)"))
            result.update(changed=False, skipped_gate=True, path=write(data), accuracy=data)
            return result
        if self._task.check_mode:
            data = A.record([], None, None, None, skipped="check mode: lm-eval not run")
            result.update(changed=False, path=write(data), accuracy=data)
            return result
        try:
            s = A.settings_from(args)
            dataset = A.read_dataset(s.dataset)
            if s.fewshot_dataset:
                A.read_dataset(s.fewshot_dataset, "accuracy_fewshot_dataset")
            plan = A.plan_gate(s, dataset, A.load_references(), args.get("model_profile"),
                               args.get("platform"), args.get("decode_context_parallel"))
        except A.AccuracyError as err:
            # bad input: recorded as this host's failed result, then the task fails naming the variable
            write({"ok": False, "error": str(err), "runs": []})
            raise AnsibleActionFail(f"{host}: accuracy: {err}") from None
        rows = []
        for i, ep in enumerate(args["endpoints"]):
            # <artifacts>/accuracy/<host>[.i].lm-eval/ (lm-eval's results) and <host>[.i].lm-eval.log
            base = result_path(args["artifacts_dir"], "accuracy", host, "" if i == 0 else f".{i}")[: -len(".json")]
            rows.append(A.run(str(ep.get("base_url")), str(ep.get("served_model_name")), s, plan,
                              api_key=args.get("api_key"), out_dir=base + ".lm-eval", log_path=base + ".lm-eval.log"))
        data = A.record(rows, plan, dataset, s)
        path = write(data)  # record first, then fail
        result.update(changed=False, path=path, accuracy=data)
        if not data["ok"]:
            result.update(failed=True, msg=f"{host}: {data['error']}"
                          + "".join(f"\n{e}" for e in data.get("errors") or [] if "\n" in e))
        return result
