#!/usr/bin/env python3
"""How straight the planner runs: module transitions while planning one sample inventory.

    .venv/bin/python tests/perf/planner_flow.py [inventory ...]   (default: h800)

With sys.setprofile it follows the planner's code (llmbctl.planner.*) while it plans the inventory
and prints, per inventory:
- stages: the functions plan_inventory calls itself, in order, and how often it comes back to a
  module it had already left;
- deep, each call edge once: the sequence of planner modules whose module-level functions run
  (methods and properties of data objects count for their caller, a repeated caller -> callee
  call is followed once, as a static walk would), its returns to a module already left, and how
  often each module is entered;
- deep, every call: the same counting every call (loops over nodes included).
Prints figures only; it never fails.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(ROOT / "tests" / "unit" / "module_utils" / "planner"),
]
sys.path.insert(1, str(ROOT / "tests"))

from llmbctl.planner import plan_inventory  # noqa: E402
from planner_helpers import load_inventory  # noqa: E402

PKG = "llmbctl.planner."


def _returns(seq: list[str]) -> tuple[int, collections.Counter]:
    left: set[str] = set()
    entries: collections.Counter = collections.Counter()
    returns, prev = 0, None
    for mod in seq:
        if mod == prev:
            continue
        entries[mod] += 1
        returns += mod in left
        if prev:
            left.add(prev)
        prev = mod
    return returns, entries


def _module(frame) -> str:
    code = frame.f_code
    if code.co_argcount and code.co_varnames[0] in ("self", "cls"):
        return ""  # a method of a data object: counted for its caller
    if code.co_name.startswith("<"):
        return ""  # lambda / comprehension
    name = frame.f_globals.get("__name__", "")
    return name[len(PKG) :] if name.startswith(PKG) else ""


def trace(inventory: str, each_edge_once: bool) -> tuple[list[str], list[str]]:
    hv, groups = load_inventory(inventory)
    plan_inventory(hv, groups, str(ROOT / "data"))  # imports and data cache warm
    stack: list[tuple[str, object, bool]] = []
    seq: list[str] = []
    stages: list[str] = []
    edges: set = set()
    hidden = [0]

    def prof(frame, event, arg):
        if event == "call":
            caller = stack[-1][1] if stack else None
            hide = hidden[0] > 0 or (each_edge_once and (caller, frame.f_code) in edges)
            edges.add((caller, frame.f_code))
            mod = _module(frame)
            back = frame.f_back
            if back is not None and back.f_code.co_name == "plan_inventory" and mod:
                stages.append(f"{mod}.{frame.f_code.co_name}")
            stack.append((mod, frame.f_code, hide))
            hidden[0] += hide
            if hide:
                return
        elif event == "return":
            if stack and stack.pop()[2]:
                hidden[0] -= 1
            if hidden[0]:
                return
        else:
            return
        inner = next((m for m, _, _ in reversed(stack) if m), "")
        if inner and (not seq or seq[-1] != inner):
            seq.append(inner)

    sys.setprofile(prof)
    try:
        plan_inventory(hv, groups, str(ROOT / "data"))
    finally:
        sys.setprofile(None)
    return seq, stages


def main(argv: list[str]) -> int:
    for inventory in argv or ["h800"]:
        seq, stages = trace(inventory, each_edge_once=True)
        stage_returns, _ = _returns([s.rsplit(".", 1)[0] for s in stages])
        print(
            f"{inventory}: {len(stages)} stages, {stage_returns} returns to a module left: "
            + " -> ".join(stages)
        )
        for label, once in (("each call edge once", True), ("every call", False)):
            seq, _ = trace(inventory, each_edge_once=once)
            returns, entries = _returns(seq)
            counts = ", ".join(f"{m} {c}" for m, c in entries.most_common())
            print(
                f"  deep, {label}: {len(seq) - 1} transitions, {returns} returns to a module left; entries: {counts}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
