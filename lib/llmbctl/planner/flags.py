"""Engine flag sets: which flags a pinned engine release accepts, and how recipe flags map to them.

A flag set is one data/engines/<engine>-<version>.yml. The planner uses it to
- canonicalise what an inventory asks for (short forms like ``-dcp``, ``--x_y`` spellings,
  ``--no-x`` negations) into ``--long-name`` keys,
- translate flags the release renamed (``--disable-log-requests`` -> ``--no-enable-log-requests``),
- refuse flags the release does not have, before any host is touched,
- render the final argv.
"""

from __future__ import annotations

import math
from typing import Any

from ..engines.registry import NO_VALUE_TYPES, FlagSet, engine_caps
from .model import Problem

# planner-owned flags -> the inventory variable that controls them (for error messages)
OWNER_HINT = {
    "--model": "llmb_model_dir",
    "--model-path": "llmb_model_dir",
    "--host": "llmb_api_host",
    "--port": "llmb_api_port",
    "--served-model-name": "llmb_served_model_name",
    "--tensor-parallel-size": "llmb_tensor_parallel",
    "--tp-size": "llmb_tensor_parallel",
    "--tp_size": "llmb_tensor_parallel",
    "--pipeline-parallel-size": "llmb_pipeline_parallel",
    "--pp-size": "llmb_pipeline_parallel",
    "--pp_size": "llmb_pipeline_parallel",
    "--ep_size": "llmb_expert_parallel_size",
    "--decode-context-parallel-size": "llmb_decode_context_parallel",
    "--data-parallel-size": "llmb_data_parallel",
    "--data-parallel-size-local": "llmb_data_parallel_local",
    "--data-parallel-start-rank": "llmb_data_parallel / the host order",
    "--data-parallel-rank": "llmb_data_parallel / the host order",
    "--data-parallel-address": "llmb_head / llmb_node_ip",
    "--data-parallel-rpc-port": "llmb_dp_rpc_port",
    "--headless": "the host order (every host after the head is headless)",
    "--distributed-executor-backend": "llmb_pipeline_parallel / llmb_tensor_parallel (Ray is used when "
    "TP x PP spans nodes)",
    "--enable-expert-parallel": "llmb_expert_parallel",
    "--dist-init-addr": "llmb_head / llmb_sglang_dist_port",
    "--nnodes": "the number of hosts in accel_nodes",
    "--node-rank": "the host order",
    "--extra_llm_api_options": "llmb_trtllm_extra_llm_api_options",
}


class EngineArgs:
    """Ordered canonical flag -> value, filled from several sources with provenance.

    Later sources override earlier ones. Problems (unknown flags, removed flags, flags the
    planner owns) are collected, not raised, so preflight can list every one of them.
    """

    def __init__(self, flagset: FlagSet, unchecked: list[str] | None = None):
        self.fs = flagset
        self.values: dict[str, Any] = {}
        self.origin: dict[str, str] = {}
        self.unchecked: dict[str, Any] = {}  # raw spelling -> value, passed through verbatim
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        self.allow_unchecked: set[str] = set()
        for raw in unchecked or []:
            spelled = str(raw) if str(raw).startswith("-") else "--" + str(raw)
            owned = self._owned_spelling(spelled.partition("=")[0])
            if owned is not None or "=" in spelled:
                if owned:
                    why, fix = f"it is {owned}, which the planner sets from the inventory", f"remove it and set {_owner(owned)} instead"
                else:
                    why, fix = "it holds a name, not a value", f"list {spelled.partition('=')[0]} and give its value in llmb_engine_args"
                self.problems.append(_not_unchecked(
                    "engine-flag-owned" if owned else "engine-flag-value", spelled,
                    f"{spelled} may not be given in llmb_engine_flags_unchecked: {why}", fix))
                continue
            known = self.fs.resolve(spelled)
            if known is not None:  # the flag set has it: its value is checked (memory fit included)
                self.problems.append(_not_unchecked(
                    "engine-flag-value", spelled,
                    f"{spelled} is a flag of {self.fs.engine} {self.fs.version} ({known[0]}); "
                    "llmb_engine_flags_unchecked is for flags the pinned flag set lacks",
                    f"remove {spelled} from llmb_engine_flags_unchecked; give its value in llmb_engine_args"))
                continue
            self.allow_unchecked.add(spelled)

    def _owned_spelling(self, spelled: str) -> str | None:
        """The planner-owned flag this spelling means (any alias, _ or -, renamed), else None."""
        bare = spelled.lstrip("-")
        candidates = [spelled, "--" + bare.replace("_", "-"), "--" + bare.replace("-", "_")]
        for cand in candidates:
            renamed = self.fs.rename_of(cand)
            if renamed and renamed[1].get("to"):
                cand = renamed[1]["to"]
            resolved = self.fs.resolve(cand)
            if resolved and resolved[0] in self.fs.planner_owned:
                return resolved[0]
            if cand in self.fs.planner_owned:
                return cand
        return None

    def _unknown(self, spelled: str, origin: str, why: str, fix: str) -> Problem:
        """engine-flag-unknown: ``spelled`` (in ``origin``) is no flag of the pinned release; ``why`` adds
        what the flag set knows of it."""
        message = (f"{spelled} is not a flag of {self.fs.engine} {self.fs.version}{why}; "
                   "the engine would exit at start with 'unrecognized arguments'")
        expected = f"one of the flags in data/engines/{self.fs.name}.yml"
        return _given_in("engine-flag-unknown", spelled, origin, message, expected, fix)

    def set(self, canon: str, value: Any, origin: str) -> None:
        if canon not in self.fs.flags:
            raise KeyError(f"{canon} is not a flag of {self.fs.name}")
        self.values[canon] = value
        self.origin[canon] = origin

    def get(self, canon: str, default: Any = None) -> Any:
        return self.values.get(canon, default)

    def _check_owned(self, canon: str, origin: str, owner_hint: dict[str, str]) -> bool:
        if canon in self.fs.planner_owned:
            hint = owner_hint.get(canon, "the matching llmb_* variable")
            self.problems.append(_given_in(
                "engine-flag-owned", canon, origin,
                f"{canon} is set by the planner from the inventory; it may not be given in {origin}",
                f"no {canon} in {origin}", f"remove it and set {hint} instead"))
            return True
        return False

    def apply_token(self, token: str, value: Any, origin: str, owner_hint: dict[str, str]) -> None:
        """Apply one flag given by name (with or without dashes) and a value."""
        spelled = token if token.startswith("-") else "--" + token
        renamed = self.fs.rename_of(spelled)
        if renamed is not None:
            old, rec = renamed
            target = rec.get("to")
            if target is None:
                self.problems.append(_given_in(
                    "engine-flag-removed", old, origin,
                    f"{old} was removed from {self.fs.engine} (since {rec.get('since', '?')}); {self.fs.name} rejects it",
                    f"a flag of {self.fs.name}", rec.get("note", "remove it")))
                return
            if "value" in rec:  # a switch that became a choice (--enable-deepep-moe -> --moe-a2a-backend deepep)
                value = rec["value"] if value in (None, True) else value
            self.notes.append(
                f"{old} ({origin}) is {target}{' ' + str(rec['value']) if 'value' in rec else ''} in "
                f"{self.fs.engine} {self.fs.version} [{rec.get('since', '?')}]; translated"
            )
            spelled = target
        if spelled in self.allow_unchecked:
            if isinstance(value, dict) or (
                isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple, dict)) for v in value)
            ):
                self.problems.append(_bad_value(
                    spelled, value, origin, f"{spelled} (unchecked) needs a scalar value or a list of scalars",
                    f"give {spelled[2:]} one value (JSON text for structured values)",
                    "a string, a number, true/false or a list of them"))
                return
            self.unchecked[spelled] = value
            self.notes.append(f"{spelled} ({origin}) passed through unchecked (llmb_engine_flags_unchecked)")
            return
        resolved = self.fs.resolve(spelled)
        moved = self.fs.translate(spelled) if resolved is None else None
        if moved is not None:  # another shipped release's spelling of a destination this one has
            canon, negated, release = moved
            said = canon if not negated else self.fs.render(canon, False)[0]
            self.notes.append(f"{spelled} ({origin}) of {self.fs.engine} {release} is {said} in "
                              f"{self.fs.engine} {self.fs.version}; translated")
            resolved = (canon, negated)
        if resolved is None and self.fs.changed_in(spelled) is not None:
            how, release = self.fs.changed_in(spelled)  # type: ignore[misc]
            if how == "introduced":
                fix = (f"set llmb_engine_version to {release} or newer (data/engines/{self.fs.engine}-"
                       f"{release}.yml), or remove it")
            else:
                fix = "remove it, or pin a release before " + release
            self.problems.append(self._unknown(spelled, origin, f": it was {how} in {self.fs.engine} {release}", fix))
            return
        if resolved is None:
            fix = _suggest(self.fs, spelled) + " If the pinned release does have it, add it to llmb_engine_flags_unchecked."
            self.problems.append(self._unknown(spelled, origin, "", fix))
            return
        canon, negated = resolved
        if self._check_owned(canon, origin, owner_hint):
            return
        kind = self.fs.flags[canon]["type"]
        if negated:
            if value is False:
                said = token if token.startswith("-") else "--" + token
                self.problems.append(_given_in(
                    "engine-flag-value", f"{said}=false", origin,
                    f"{said}: false is a double negation; {spelled} turns {canon} off and takes no value",
                    f"{canon[2:]}: true or {canon[2:]}: false",
                    f"to turn it on write {canon[2:]}: true (renders {canon}); to turn it off write "
                    f"{canon[2:]}: false (renders {spelled})"))
                return
            if value not in (True, None):
                self.problems.append(_bad_value(
                    spelled, value, origin, f"{spelled} takes no value", f"write {canon[2:]}: false (or {spelled}: true)"))
                return
            value = False
        elif kind in NO_VALUE_TYPES:
            if value is None:
                value = True
            if not isinstance(value, bool):
                self.problems.append(_bad_value(
                    canon, value, origin, f"{canon} is a switch; its value must be true or false",
                    f"write {canon[2:]}: true" + (" or false" if kind == "bool" else "")))
                return
            if kind == "flag" and value is False:
                self.values.pop(canon, None)
                return
        else:
            problem = _check_value(self.fs, canon, value, origin)
            if problem:
                self.problems.append(problem)
                return
        self.set(canon, value, origin)

    def apply_mapping(self, mapping: dict[str, Any] | None, origin: str, owner_hint: dict[str, str]) -> None:
        for key, value in (mapping or {}).items():
            self.apply_token(str(key), value, f"{origin}[{key!r}]", owner_hint)

    def apply_argv(self, tokens: list[str], origin: str, owner_hint: dict[str, str]) -> None:
        """Apply a raw token list like ['--max-model-len', '2048', '--enable-chunked-prefill']."""
        i = 0
        while i < len(tokens):
            tok = str(tokens[i])
            if not tok.startswith("-"):
                self.problems.append(
                    Problem(
                        check="engine-args-syntax",
                        message=f"stray value {tok!r} without a flag in front of it",
                        found=f"{tokens} in {origin}",
                        fix=f"write flags as '--name value' pairs in {origin}",
                    )
                )
                i += 1
                continue
            name, eq, inline = tok.partition("=")
            target = name
            renamed = self.fs.rename_of(name)
            if renamed and renamed[1].get("to"):
                target = renamed[1]["to"]
            resolved = self.fs.resolve(target) if target not in self.allow_unchecked else None
            if resolved is None and target not in self.allow_unchecked:
                moved = self.fs.translate(target)  # another shipped release's spelling
                resolved = moved[:2] if moved else None
            takes = False
            if renamed and "value" in renamed[1]:
                takes = False  # the old switch takes no value; the rename supplies it
            elif resolved and not resolved[1]:
                takes = self.fs.takes_value(resolved[0])
            elif target in self.allow_unchecked:
                takes = not eq and i + 1 < len(tokens) and not str(tokens[i + 1]).startswith("-")
            if eq:
                value: Any = inline
                i += 1
            elif takes:
                kind = self.fs.flags[resolved[0]]["type"] if resolved else "str"
                if kind == "list":
                    j = i + 1
                    items = []
                    while j < len(tokens) and not str(tokens[j]).startswith("--"):
                        items.append(tokens[j])
                        j += 1
                    value, i = items, j
                elif kind == "optional" and (i + 1 >= len(tokens) or str(tokens[i + 1]).startswith("-")):
                    value, i = None, i + 1
                else:
                    value = tokens[i + 1] if i + 1 < len(tokens) else None
                    i += 2
            else:
                value = None
                i += 1
            self.apply_token(name, value, origin, owner_hint)

    def argv(self, values: dict[str, Any] | None = None) -> list[str]:
        """Render flags (``values`` replaces the collected ones, e.g. with per-rank flags added)."""
        out: list[str] = []
        for canon, value in (self.values if values is None else values).items():
            out.extend(self.fs.render(canon, value))
        for raw, value in self.unchecked.items():
            if value is None or value is True:
                out.append(raw)
            elif value is False:
                continue
            elif isinstance(value, (list, tuple)):
                out.extend([raw, *(str(v) for v in value)])
            else:
                out.extend([raw, str(value)])
        return out


def _check_value(fs: FlagSet, canon: str, value: Any, origin: str) -> Problem | None:
    spec = fs.flags[canon]
    kind = spec["type"]
    bad = None
    if value is None and kind != "optional":
        bad = "a value"
    elif isinstance(value, dict) and kind != "json":
        bad = "one value, not a mapping"
    elif isinstance(value, (list, tuple)) and kind not in ("list", "json"):
        bad = "one value, not a list (a list would reach argv as Python text)"
    elif kind == "list" and any(isinstance(v, (list, tuple, dict)) or v is None for v in (
        value if isinstance(value, (list, tuple)) else [value]
    )):
        bad = "a list of single values (strings or numbers)"
    elif isinstance(value, bool) and kind not in ("json",):
        bad = "a value, not true/false"
    elif kind == "int":
        try:
            int(str(value))
        except ValueError:
            bad = "an integer"
    elif kind == "float":
        try:
            number = float(str(value))
        except ValueError:
            bad = "a number"
        else:
            if not math.isfinite(number):
                bad = "a finite number"
            elif canon == _fraction_flag(fs.engine) and not 0 < number <= 1:
                bad = "a fraction of device memory greater than 0 and at most 1"
    elif kind == "choice" and str(value) not in spec.get("choices", []):
        bad = f"one of {spec.get('choices')}"
    if bad is None:
        return None
    return _bad_value(canon, value, origin, f"{canon} of {fs.engine} {fs.version} needs {bad}",
                      f"give {canon[2:]} {bad}", bad)


def _bad_value(flag: str, value: Any, origin: str, message: str, fix: str, expected: Any = None) -> Problem:
    """engine-flag-value: ``flag`` was given ``value`` in ``origin`` (the inventory key it came from)."""
    return Problem(check="engine-flag-value", message=message, found=f"{flag}={value!r} in {origin}",
                   expected=expected, fix=_in_origin(fix, origin))


def _given_in(check: str, flag: str, origin: str, message: str, expected: Any, fix: str) -> Problem:
    """A flag that may not be given where it was (``origin``: the inventory key)."""
    return Problem(check=check, message=message, found=f"{flag} in {origin}", expected=expected,
                   fix=_in_origin(fix, origin))


def _in_origin(fix: str, origin: str) -> str:
    """The fix, naming the inventory key the flag came from (the variable to change) when it does not."""
    key = origin.split("[", 1)[0]
    return fix if not key or key in fix else f"{fix} (in {origin})"


def _not_unchecked(check: str, spelled: str, message: str, fix: str) -> Problem:
    """A name llmb_engine_flags_unchecked may not hold (a flag the planner owns or the flag set has)."""
    return _given_in(check, spelled, "llmb_engine_flags_unchecked", message,
                     "names of flags the pinned flag set lacks", fix)


def _owner(canon: str | None) -> str:
    return OWNER_HINT.get(canon or "", "the matching llmb_* variable")


def _fraction_flag(engine: str) -> str | None:
    """The flag whose value is a fraction of device memory (finite, in (0, 1]): the engine's
    capabilities record says which (engines/<engine>.py CAPS.memory_fraction_flag)."""
    try:
        return engine_caps(engine).memory_fraction_flag
    except KeyError:
        return None


def _suggest(fs: FlagSet, token: str) -> str:
    import difflib

    close = difflib.get_close_matches(token, list(fs.flags), n=3, cutoff=0.6)
    if close:
        return f"Did you mean {', '.join(close)}?"
    return "Remove it."
