"""llmbctl.plugin: what the action and filter plugins share (argument handling, error translation)."""

from __future__ import annotations

import pytest
from llmbctl.plugin import RESULT_ARGS, ControllerAction, HostResultAction, reraise, reraise_each


class PluginError(Exception):
    pass


def parse(value, strict=True):
    """Parse a number."""
    if strict and not str(value).isdigit():
        raise ValueError(f"expected digits, found {value!r}")
    return int(value)


def test_reraise_translates_only_the_named_errors_and_keeps_name_and_doc():
    wrapped = reraise(parse, ValueError, PluginError, "numbers: ")
    assert wrapped("12") == 12
    assert wrapped(value="7", strict=False) == 7
    assert (wrapped.__name__, wrapped.__doc__) == ("parse", "Parse a number.")
    with pytest.raises(PluginError, match=r"^numbers: expected digits, found 'x'$") as info:
        wrapped("x")
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(TypeError):
        reraise(parse, KeyError, PluginError)(None, 1, 2)


def test_reraise_each_names_every_function():
    filters = reraise_each((parse, str.upper), (ValueError, KeyError), PluginError, "f: ")
    assert sorted(filters) == ["parse", "upper"]
    assert filters["upper"]("a") == "A"
    with pytest.raises(PluginError, match="^f: expected digits"):
        filters["parse"]("-1")


class FakeActionBase:
    """The two methods of Ansible's ActionBase that ControllerAction relies on."""

    def run(self, tmp=None, task_vars=None):
        self.seen_vars = task_vars
        return {"started": True}

    def validate_argument_spec(self, argument_spec=None):
        self.seen_spec = argument_spec
        return None, {name: spec.get("default") for name, spec in argument_spec.items()}


class Echo(ControllerAction, FakeActionBase):
    arg_spec = {"stage": {"type": "str", "default": "engine"}}

    def act(self, args, task_vars, result):
        return dict(result, args=args, host=task_vars.get("inventory_hostname"))


def test_controller_action_validates_arguments_then_acts():
    action = Echo()
    assert action.run(task_vars={"inventory_hostname": "n1"}) == {
        "started": True, "args": {"stage": "engine"}, "host": "n1"}
    assert action.seen_spec is Echo.arg_spec
    assert action.run() == {"started": True, "args": {"stage": "engine"}, "host": None}
    assert action.seen_vars == {}
    assert (Echo.TRANSFERS_FILES, Echo._requires_connection) == (False, False)


class Recorder(HostResultAction, FakeActionBase):
    arg_spec = {**RESULT_ARGS, "stage": {"type": "str", "default": "serve"}}

    def act_on(self, host, started, args, result):
        return dict(result, host=host, clock=started, stage=args["stage"])


class RecorderFor(Recorder):
    arg_spec = {**Recorder.arg_spec, "host": {"type": "str", "default": "n9"}}


def test_host_result_action_names_the_host_and_the_running_stage_clock():
    localhost_clock = {"hostvars": {"localhost": {"llmb_stage_started": "2026-01-02T00:00:00Z"}}}
    # the host is the task's inventory_hostname; the clock is the stage's (localhost), not the run's first
    got = Recorder().run(task_vars={"inventory_hostname": "n1", "llmb_stage_started": "first", **localhost_clock})
    assert got == {"started": True, "clock": "2026-01-02T00:00:00Z", "host": "n1", "stage": "serve"}
    assert Recorder().run(task_vars={"inventory_hostname": "n1"})["clock"] is None
    assert set(RESULT_ARGS) <= set(Recorder.arg_spec)
    # a `host` argument names the host the result is of
    assert RecorderFor().run(task_vars={"inventory_hostname": "n1"})["host"] == "n9"
