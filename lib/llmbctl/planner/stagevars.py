"""The stage roles' variables (weights_*, verify_*, ...), read from roles/*/meta/argument_specs.yml,
and the names the toolkit knows: an unknown name is refused with the closest known one."""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from pathlib import Path

from llmbctl import REPO_ROOT

from .knobs import KNOB_BY_NAME, TOOLKIT_KNOBS
from .model import Problem
from .values import Knob

# variable name prefixes of the stages whose roles declare their options in meta/argument_specs.yml
STAGE_PREFIXES = ("weights_", "verify_", "ssh_mesh_", "engine_host_", "engine_image_", "bench_", "serve_",
                  "accuracy_")
ROLES_DIR = REPO_ROOT / "roles"


# role options the planner reads (a stage decides nothing the plan already says): serve_smoke_image
# decides the plan's api.vision, which the serve role's smoke test follows
PLANNER_READ_STAGE_KNOBS = ("serve_smoke_image",)

# stage variables, from the roles' argument specs -------------------------------------------
_SPEC_TYPES = {"str": "str", "path": "str", "raw": "any", "int": "int", "float": "float", "bool": "bool",
               "list": "list", "dict": "dict"}


@lru_cache(maxsize=4)
def stage_knobs(roles_dir: str | None = None) -> dict[str, Knob]:
    """Knobs of the stage roles' options (every entry point of roles/*/meta/argument_specs.yml).

    Options named llmb_* are the toolkit's shared variables and stay in KNOBS (a test holds the two
    to agree). Ports get 1-65535, and timeouts, fan-outs (_radix) and parallelism (_parallel) a positive value
    on top of the declared type.
    Empty when the roles are not beside this file (llmbctl installed elsewhere).
    """
    root = Path(roles_dir) if roles_dir else ROLES_DIR
    out: dict[str, Knob] = {}
    if not root.is_dir():
        return out
    import yaml  # controller side only

    for spec_file in sorted(root.glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        doc = yaml.safe_load(spec_file.read_text()) or {}
        for entry in (doc.get("argument_specs") or {}).values():
            for opt, spec in ((entry or {}).get("options") or {}).items():
                if opt.startswith("llmb_") or opt in out:
                    continue
                spec = spec or {}
                kind = _SPEC_TYPES.get(str(spec.get("type", "str")), "any")
                lo = hi = None
                if kind == "int" and opt.endswith("_port"):
                    lo, hi = 1, 65535
                elif kind in ("int", "float") and re.search(r"_timeout(_s)?$", opt):
                    lo = 1
                elif kind == "int" and re.search(r"_(radix|parallel)$", opt):
                    lo = 1
                elements = spec.get("elements")
                out[opt] = Knob(
                    opt,
                    kind,
                    spec.get("default"),
                    str(spec.get("description") or "").strip(),
                    choices=tuple(spec["choices"]) if spec.get("choices") else None,
                    min=lo,
                    max=hi,
                    elements=_SPEC_TYPES.get(elements) if elements in ("int", "dict") else None,
                    stage=role,
                    needs_plain=False,
                )
    return out


def known_variables(roles_dir: str | None = None) -> dict[str, Knob]:
    """Every variable name the toolkit knows, llmb_* and stage-prefixed."""
    known = {k.name: k for k in TOOLKIT_KNOBS}
    known.update(stage_knobs(roles_dir))
    known.update(KNOB_BY_NAME)
    return known


def is_checked_name(name: str) -> bool:
    return name.startswith("llmb_") or name.startswith(STAGE_PREFIXES)


def _unknown(name: str, known: dict[str, Knob]) -> Problem:
    prefix = "llmb_" if name.startswith("llmb_") else next(p for p in STAGE_PREFIXES if name.startswith(p))
    pool = [n for n in known if n.startswith(prefix)] or list(known)
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    if close:
        fix = f"did you mean {close[0]}? ({known[close[0]].doc})"
    else:
        fix = (
            "remove it (the known names are listed in docs/launch-plan.md and the roles' "
            "meta/argument_specs.yml)"
        )
    return Problem(
        check="unknown-variable",
        message=f"{name} is not a variable of llm-bringup; it would be ignored without a word",
        found=name,
        expected=f"one of the {prefix}* variables",
        fix=fix,
    )
