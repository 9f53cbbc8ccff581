"""Test helpers for the serve role's unit and environment files (tests/unit and tests/integration).

- sample_services(): every systemd/mpirun/exec service of every sample inventory's launch plan.
- render(svc, etc_dir): (unit, env file) text rendered by the role's real templates and filter
  plugin, the way Ansible's template module renders them (trim_blocks, no trailing newline kept).
- A reader of systemd's syntax, written from systemd.syntax(7), systemd.service(5) "Command
  lines" and systemd.exec(5) "EnvironmentFile=" (and the state machine of systemd's env-file.c),
  independent of llmb.quoting: read_unit(), exec_argv(), read_env_file(). The container test
  (tests/integration/test_units_verify.py) checks the renderer against systemd itself.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "roles" / "serve" / "templates"
ANSIBLE_MANAGED = "Ansible managed"
UNIT_KINDS = ("systemd", "mpirun", "exec")  # llmb.serve.UNIT_KINDS

# Values a unit or environment file must carry through unchanged (quoting, specifiers, variables,
# separators, comment and continuation characters, unicode).
HOSTILE_ARGS = [
    "$HOME",
    "${HOME}",
    "$$",
    "a$",
    "%n",
    "%%",
    "100%",
    "%",
    '"quoted"',
    "it's",
    "'",
    "back\\slash",
    "trailing\\",
    "\\",
    "\\n",
    "\\x41",
    "\\;",
    "two words",
    " lead and trail ",
    ";",
    "a;b",
    "#not-a-comment",
    "",
    "Kimi-K2-思考-ü",
    "emoji-\U0001f680",
    '--hf-overrides={"rope": {"factor": 2.0}, "x": "a b"}',
    "`id`",
    "ExecStartPre=/bin/touch /tmp/pwned",
]


def hostile_services() -> list[dict]:
    """Plan-shaped services whose every argument and environment value is one of HOSTILE_ARGS."""
    out = []
    for i, arg in enumerate(HOSTILE_ARGS):
        out.append({
            "name": f"llmb-hostile-{i}",
            "kind": "mpirun",
            "role": "api",
            "argv": ["/opt/llmb/venvs/vllm-0.19.1/bin/vllm", "serve", arg, "--served-model-name", arg],
            "stop_argv": ["/usr/bin/docker", "exec", "llmb-x", arg],
            "env": {"LLMB_HOSTILE": arg, "HF_HOME": "/srv/hf"},
        })
    out.append({
        "name": "llmb-hostile-path",
        "kind": "systemd",
        "role": "api",
        "argv": ["/opt/my venv/100%/bin/vllm", *HOSTILE_ARGS],
        "env": {f"V{i}": a for i, a in enumerate(HOSTILE_ARGS)},
    })
    return out


def _load(name: str, path: Path):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@lru_cache(maxsize=1)
def _launch_plan_script():
    return _load("llmb_launch_plan_script_units", REPO / "scripts" / "launch-plan")


def sample_inventories() -> list[str]:
    """Sample inventories that have a launch plan (local-* are verify-only: no model, no engine)."""
    return sorted(
        p.name
        for p in (REPO / "inventories").iterdir()
        if p.is_dir() and not p.name.startswith("local-")
    )


def sample_services() -> list[tuple[str, str, dict]]:
    """(inventory, host, service) of every unit the serve role writes for the sample inventories."""
    from llmbctl.planner import plan_inventory

    out = []
    for name in sample_inventories():
        hv, groups = _launch_plan_script().load_inventory(str(REPO / "inventories" / name))
        plan = plan_inventory(hv, groups, str(REPO / "data"))
        for host in plan.to_list():
            for svc in host["services"]:
                if svc["kind"] in UNIT_KINDS:
                    out.append((name, host["host"], svc))
    return out


GROUP_TOOL = ["/usr/bin/python3", "/opt/llmb/bin/llmb-group"]  # the serve role's defaults


def sample_groups() -> list[tuple[str, str, dict, list[dict]]]:
    """(inventory, host, group view, unit services) of every sample host that is part of a serving
    group of several nodes (llmb.serve.group_view on the deployment document, as the role computes it)."""
    from llmb.serve import group_view
    from llmbctl import deployment

    out = []
    for name in sample_inventories():
        hv, groups = _launch_plan_script().load_inventory(str(REPO / "inventories" / name))
        doc = deployment.resolve(hv, groups, data_dir=str(REPO / "data"))
        for host, entry in sorted(doc["hosts"].items()):
            group = group_view(doc, host, GROUP_TOOL, "/etc/llmb/ssh-mesh/ssh_config")
            if group:
                units = [s for s in entry["plan"]["services"] if s["kind"] in UNIT_KINDS]
                out.append((name, host, group, units))
    return out


def render_group(group: dict, units: list[dict], etc_dir: str = "/etc/llmb") -> dict[str, str]:
    """{file name: text} of a group host's units, its llmb-group.target and (head) restart unit,
    rendered by the role's real templates."""
    env = _jinja()
    ctx = {"serve_etc_dir": etc_dir, "ansible_managed": ANSIBLE_MANAGED, "_serve_group": group}
    out = {f"{svc['name']}.service": env.get_template("service.unit.j2").render(dict(ctx, item=svc))
           for svc in units}
    out["llmb-group.target"] = env.get_template("group.target.j2").render(ctx)
    if group["is_head"]:
        out["llmb-group-restart.service"] = env.get_template("group-restart.service.j2").render(ctx)
    return out


@lru_cache(maxsize=1)
def _jinja():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        trim_blocks=True,
        keep_trailing_newline=False,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    filters = _load("llmb_serve_filter_plugin", REPO / "plugins" / "filter" / "llmb_serve.py")
    env.filters.update(filters.FilterModule().filters())
    return env


def render(svc: dict, etc_dir: str = "/etc/llm-bringup") -> tuple[str, str]:
    """(service.unit.j2, service.env.j2) rendered for one plan service."""
    env = _jinja()
    ctx = {"item": svc, "serve_etc_dir": etc_dir, "ansible_managed": ANSIBLE_MANAGED}
    return (
        env.get_template("service.unit.j2").render(ctx),
        env.get_template("service.env.j2").render(ctx),
    )


# ------------------------------------------------------------------------------ systemd reader
WHITESPACE = " \t\n\r"
_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
              "\\": "\\", '"': '"', "'": "'", "s": " "}


class SyntaxProblem(AssertionError):
    pass


def read_unit(text: str) -> list[tuple[str, str, str]]:
    """(section, key, raw value) of every assignment, in order: lines end at \\n or \\r, a line
    ending in an unescaped backslash continues on the next, '#'/';' lines are comments."""
    out = []
    section = ""
    pending = ""
    for raw in re.split(r"\r\n|\n|\r", text):
        if not pending and raw.lstrip(WHITESPACE)[:1] in ("#", ";"):
            continue
        line = pending + raw
        escaped = False
        for c in line:
            escaped = (not escaped) and c == "\\"
        if escaped:
            pending = line[:-1] + " "
            continue
        pending = ""
        line = line.strip(WHITESPACE)
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise SyntaxProblem(f"line without '=': {line!r}")
        out.append((section, key.strip(WHITESPACE), value.strip(WHITESPACE)))
    if pending:
        raise SyntaxProblem("file ends in a continuation")
    return out


def specifiers(value: str) -> str:
    """Resolve specifiers: %% is %; any other specifier is an error here (we never write one)."""
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "%":
            nxt = value[i + 1 : i + 2]
            if nxt != "%":
                raise SyntaxProblem(f"specifier %{nxt} would be expanded in {value!r}")
            out.append("%")
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _unescape(text: str, i: int) -> tuple[str, int]:
    """One C-style escape starting after the backslash at text[i-1]; (char, next index)."""
    c = text[i : i + 1]
    if c in _C_ESCAPES:
        return _C_ESCAPES[c], i + 1
    if c == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[i + 1 : i + 3]):
        return chr(int(text[i + 1 : i + 3], 16)), i + 3
    if c == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 1 : i + 5]):
        return chr(int(text[i + 1 : i + 5], 16)), i + 5
    if c == "U" and re.fullmatch(r"[0-9a-fA-F]{8}", text[i + 1 : i + 9]):
        return chr(int(text[i + 1 : i + 9], 16)), i + 9
    if re.fullmatch(r"[0-7]{3}", text[i : i + 3]):
        return chr(int(text[i : i + 3], 8)), i + 3
    raise SyntaxProblem(f"invalid escape \\{c} in {text!r}")


def _dollars(word: str) -> str:
    """Exec-time variable expansion: $$ is $; $NAME / ${NAME} is an error here."""
    out, i = [], 0
    while i < len(word):
        if word[i] == "$":
            if word[i + 1 : i + 2] == "$":
                out.append("$")
                i += 2
                continue
            if re.match(r"\{?[A-Za-z_]", word[i + 1 :]):
                raise SyntaxProblem(f"variable would be expanded in {word!r}")
        out.append(word[i])
        i += 1
    return "".join(out)


def exec_argv(value: str) -> list[str]:
    """The argv systemd runs for an Exec*= value (one command, no ';' separator)."""
    text = specifiers(value)
    words: list[str] = []
    i = 0
    while True:
        while i < len(text) and text[i] in WHITESPACE:
            i += 1
        if i >= len(text):
            break
        rest = text[i:]
        if rest[0] == ";" and (len(rest) == 1 or rest[1] in WHITESPACE):
            raise SyntaxProblem(f"';' separates a second command in {value!r}")
        word, quote = [], None
        while i < len(text):
            c = text[i]
            if quote and c == quote:
                quote = None
                i += 1
            elif not quote and c in WHITESPACE:
                break
            elif not quote and c in "\"'":
                quote = c
                i += 1
            elif c == "\\":  # escapes are read alike inside and outside quotes
                ch, i = _unescape(text, i + 1)
                word.append(ch)
            else:
                word.append(c)
                i += 1
        if quote:
            raise SyntaxProblem(f"unterminated quote in {value!r}")
        words.append(_dollars("".join(word)))
    return words


def read_env_file(text: str) -> dict[str, str]:
    """Assignments of an EnvironmentFile, by the state machine of systemd's env-file.c."""
    out: dict[str, str] = {}
    state, key, value = "PRE_KEY", [], []
    last_ws = None  # index in value of the start of trailing whitespace (unquoted values)

    def emit():
        k = "".join(key).rstrip(WHITESPACE)
        v = "".join(value if last_ws is None else value[:last_ws])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise SyntaxProblem(f"invalid variable name {k!r} (systemd ignores the line)")
        out[k] = v

    for c in text + "\n":
        if state == "PRE_KEY":
            if c in "#;":
                state = "COMMENT"
            elif c not in WHITESPACE:
                state, key, value, last_ws = "KEY", [c], [], None
        elif state == "KEY":
            if c in "\n\r":
                raise SyntaxProblem(f"line without '=': {''.join(key)!r}")
            if c == "=":
                state = "PRE_VALUE"
            else:
                key.append(c)
        elif state == "PRE_VALUE":
            if c in "\n\r":
                emit()
                state = "PRE_KEY"
            elif c == "'":
                state = "SQ"
            elif c == '"':
                state = "DQ"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in WHITESPACE:
                state, last_ws = "VALUE", None
                value.append(c)
        elif state == "VALUE":
            if c in "\n\r":
                emit()
                state = "PRE_KEY"
            elif c == "\\":
                state, last_ws = "VALUE_ESCAPE", None
            else:
                if c in WHITESPACE:
                    if last_ws is None:
                        last_ws = len(value)
                else:
                    last_ws = None
                value.append(c)
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in "\n\r":
                value.append(c)
        elif state == "SQ":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value.append(c)
        elif state == "DQ":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DQ_ESCAPE"
            else:
                value.append(c)
        elif state == "DQ_ESCAPE":
            state = "DQ"
            if c in '"\\`$':
                value.append(c)
            elif c != "\n":
                value += ["\\", c]
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in "\n\r":
                state = "PRE_KEY"
        elif state == "COMMENT_ESCAPE":
            state = "COMMENT"
    if state not in ("PRE_KEY", "COMMENT"):
        raise SyntaxProblem(f"file ends inside a value (state {state})")
    return out
