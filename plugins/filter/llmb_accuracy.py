"""Filters of the accuracy gate (controller side): thin shims over llmbctl.accuracy."""

from __future__ import annotations

from llmbctl.accuracy import problems


def llmb_accuracy_problems(args, model=None, platform=None, dcp=1):
    """Every reason the accuracy stage would refuse its inputs, as sentences naming the variable
    ([] when the gate can run or is not configured): preflight runs it before any host is touched."""
    return problems(dict(args or {}), model, platform, int(dcp or 1))


class FilterModule:
    def filters(self):
        return {"llmb_accuracy_problems": llmb_accuracy_problems}
