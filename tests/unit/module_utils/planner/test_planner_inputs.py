"""Every input checked (issue 12): the validator against the roles' argument specs, scripts/launch-plan's
exit statuses, YAML errors, vaulted values, and a property test of the planner over mutated inventories."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import unicodedata

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmbctl.planner import PlanError, plan_inventory
from llmbctl.planner.inventory import KNOB_BY_NAME, KNOBS, STAGE_PREFIXES, known_variables, stage_knobs
from planner_helpers import REPO, _load_script, load_inventory

SCRIPT = REPO / "scripts" / "launch-plan"
SPEC_TYPES = {"str": "str", "path": "str", "raw": "any", "int": "int", "float": "float", "bool": "bool",
              "list": "list", "dict": "dict"}


def _role_options():
    for spec_file in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        doc = yaml.safe_load(spec_file.read_text())
        for entry_name, entry in doc["argument_specs"].items():
            for opt, spec in (entry.get("options") or {}).items():
                yield spec_file.parent.parent.name, entry_name, opt, spec or {}


ROLE_OPTIONS = list(_role_options())


def test_every_stage_role_option_is_known_to_the_validator_with_its_type():
    known = known_variables()
    assert len(stage_knobs()) >= 80  # seven roles' options were read
    for role, entry, opt, spec in ROLE_OPTIONS:
        assert opt in known, f"{role}:{entry} option {opt} unknown to the validator"
        assert known[opt].type == SPEC_TYPES[spec.get("type", "str")], (role, opt)
        if spec.get("choices"):
            assert tuple(known[opt].allowed) == tuple(spec["choices"]), (role, opt)
        if not opt.startswith("llmb_"):
            assert opt.startswith(STAGE_PREFIXES), f"{opt}: not a stage prefix the validator checks"


def test_llmb_options_of_the_roles_agree_with_knobs():
    shared = [(r, o, s) for r, _, o, s in ROLE_OPTIONS if o.startswith("llmb_")]
    assert shared, "the weights role declares the shared llmb_* variables"
    for role, opt, spec in shared:
        knob = KNOB_BY_NAME[opt]
        assert knob.type == SPEC_TYPES[spec.get("type", "str")], (role, opt)
        assert bool(spec.get("required")) == knob.required or knob.per_host, (role, opt)
        if spec.get("choices"):
            assert tuple(spec["choices"]) == knob.allowed, (role, opt)


def test_every_knob_is_documented_in_the_launch_plan_doc():
    text = (REPO / "docs" / "launch-plan.md").read_text()
    missing = [k.name for k in KNOBS if f"`{k.name}`" not in text and k.name not in text]
    assert not missing, f"undocumented in docs/launch-plan.md: {missing}"


# scripts/launch-plan: exit statuses ---------------------------------------------------------


def run(*args, env=None):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


_SCRIPT = _load_script()


def main(capsys, *args):
    """scripts/launch-plan in-process (a subprocess costs seconds on a busy machine): (rc, out, err)."""
    rc = _SCRIPT.main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture
def inv(h100_inventory):
    return h100_inventory


def test_yaml_error_in_group_vars_names_file_and_line(inv, capsys):
    (inv / "group_vars" / "all" / "broken.yml").write_text("llmb_api_port: 8000\nllmb_engine_env: [a, b\n")
    rc, out, err = main(capsys, "-i", inv, "--check")
    assert rc == 2, err
    assert "[yaml]" in err and "group_vars/all/broken.yml:3" in err


def test_yaml_error_in_hosts_is_not_no_hosts(inv, capsys):
    (inv / "hosts.yml").write_text("all:\n  children:\n    accel_nodes:\n      hosts:\n        a: {\n")
    rc, out, err = main(capsys, "-i", inv, "--check")
    assert rc == 2, err
    assert "hosts.yml:6" in err and "no hosts in group" not in err


def test_host_level_cluster_knob_is_refused_naming_the_host(inv, capsys):
    hosts = inv / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    (name, entry), = doc["all"]["children"]["accel_nodes"]["hosts"].items()
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / f"{name}.yml").write_text("llmb_api_port: 8001\n")
    rc, out, err = main(capsys, "-i", inv, "--check")
    assert rc == 2, err
    assert f"[scope] (host {name}) llmb_api_port is set on host {name}" not in err  # one host: no host tag
    assert f"llmb_api_port is set on host {name}" in err and "move llmb_api_port" in err


def test_bad_input_exits_2_without_traceback(inv):
    serve = inv / "group_vars" / "all" / "serve.yml"
    serve.write_text(serve.read_text() + "\nllmb_tensor_paralel: 8\nllmb_engine_args: {gpu-memory-utilization: 0}\n")
    proc = run("-i", str(inv), "--format", "json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "did you mean llmb_tensor_parallel?" in proc.stderr
    assert '"ok": false' in proc.stdout


def test_internal_error_is_one_line_exit_1(monkeypatch, capsys):
    script = _load_script()

    def boom(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(script, "plan_inventory", boom)
    assert script.main(["-i", str(REPO / "inventories" / "h100")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "internal error: ZeroDivisionError" in err and "launch-plan:" in err


def test_help_states_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        _SCRIPT.main(["--help"])
    out = capsys.readouterr().out
    assert "2 the input has problems" in out and "1 an internal error" in out and "--vault-password-file" in out


# vaulted values --------------------------------------------------------------------------------

VAULT = REPO / ".venv" / "bin" / "ansible-vault"


@pytest.fixture(scope="module")
def vault_texts(tmp_path_factory):
    """Real `ansible-vault encrypt_string` output (the CLI, once): (password file, {name: text})."""
    password = tmp_path_factory.mktemp("vault") / "vault-pass"
    password.write_text("s3cret-pass\n")
    vault_exe = str(VAULT) if VAULT.exists() else "ansible-vault"
    texts = {}
    for name, secret in (("llmb_served_model_name", "kimi-k2-hidden-name"), ("weights_hf_token", "hf_tok")):
        texts[name] = subprocess.run(
            [vault_exe, "encrypt_string", "--vault-password-file", str(password), secret, "--name", name],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout
        assert "!vault" in texts[name] and "$ANSIBLE_VAULT" in texts[name]
    return password, texts


@pytest.fixture
def vaulted_inv(inv, vault_texts):
    password, texts = vault_texts
    serve = inv / "group_vars" / "all" / "serve.yml"
    serve.write_text(serve.read_text().replace("llmb_served_model_name:", "# llmb_served_model_name:"))
    (inv / "group_vars" / "all" / "vault.yml").write_text(texts["llmb_served_model_name"])
    return inv, password


def test_vaulted_value_without_secret_is_a_problem_never_shown(vaulted_inv, capsys):
    inv, _ = vaulted_inv
    rc, out, err = main(capsys, "-i", inv, "--format", "json")
    assert rc == 2, err
    assert "llmb_served_model_name is vaulted and no vault secret was given" in err
    assert "<vaulted>" in out and "--vault-password-file" in err
    assert "kimi-k2-hidden-name" not in out + err


def test_vaulted_value_is_decrypted_with_the_password_file(vaulted_inv, capsys):
    inv, password = vaulted_inv
    rc, out, err = main(capsys, "-i", inv, "--format", "json", "--vault-password-file", password)
    assert rc == 0, err
    assert '"kimi-k2-hidden-name"' in out


def test_vault_password_file_from_the_environment(vaulted_inv):
    inv, password = vaulted_inv
    proc = run("-i", str(inv), "--check", env={"ANSIBLE_VAULT_PASSWORD_FILE": str(password)})
    assert proc.returncode == 0 and proc.stdout.startswith("OK:"), proc.stderr


def test_wrong_vault_password_names_the_variable(vaulted_inv, tmp_path, capsys):
    inv, _ = vaulted_inv
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    rc, out, err = main(capsys, "-i", inv, "--check", "--vault-password-file", wrong)
    assert rc == 2
    assert "llmb_served_model_name is vaulted and the vault secret given does not open it" in err


def test_vaulted_stage_secret_is_opaque_and_fine(inv, vault_texts, capsys):
    (inv / "group_vars" / "all" / "vault.yml").write_text(vault_texts[1]["weights_hf_token"])
    rc, out, err = main(capsys, "-i", inv, "--check")
    assert rc == 0, err


def test_missing_vault_password_file_is_an_input_problem(inv, tmp_path, capsys):
    rc, out, err = main(capsys, "-i", inv, "--check", "--vault-password-file", tmp_path / "absent")
    assert rc == 2 and "[vault]" in err


# property: the planner never crashes and never emits a control character ---------------------

SAMPLES = ["h100", "h800", "h200-sglang", "h200-trtllm", "a3", "h800-dp-ep"]
_BASE = {name: load_inventory(name) for name in SAMPLES}
_NAMES = sorted(k.name for k in KNOBS) + ["llmb_tensor_paralel", "weights_strategy", "serve_smoke", "bench_x"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 8, 65536, 10**18]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.5, 0.9, 2.0, math.nan, math.inf]),
    st.text(max_size=12),
    st.sampled_from(["", "a\nb", "x\r", "\t", "../x", "/abs/path", "kimi k2", "--tensor-parallel-size", "-tp",
                     "0.0.0.0", "not an address", "\x1b[0m", "a\u2028b"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(["max-model-len", "A B", "X\n",
                                                                        "gpu-memory-utilization", "tp"])),
                        inner, max_size=3),
    ),
    max_leaves=6,
)
mutation = st.tuples(st.sampled_from(_NAMES), values, st.booleans())


def _clean(text: str) -> bool:
    return isinstance(text, str) and not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)


@settings(max_examples=120, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SAMPLES), st.lists(mutation, min_size=1, max_size=4))
def test_planner_returns_a_clean_plan_or_problems_naming_a_variable(name, mutations):
    import copy

    hv, groups = copy.deepcopy(_BASE[name])
    hosts = list(hv)
    for key, value, one_host in mutations:
        for host in hosts[:1] if one_host else hosts:
            hv[host][key] = copy.deepcopy(value)
    try:
        planned = plan_inventory(hv, groups, str(REPO / "data"))
    except PlanError as err:
        assert err.problems
        for p in err.problems:
            text = p.format()
            assert "llmb_" in text or any(pre in text for pre in STAGE_PREFIXES), text
        return
    for host_plan in planned.to_list():
        for svc in host_plan["services"]:
            for token in svc["argv"]:
                assert _clean(token), (svc["name"], token)
            for k, v in svc["env"].items():
                assert _clean(k) and _clean(v), (svc["name"], k, v)


def test_filter_refuses_a_cluster_knob_set_on_one_host_through_ansible_hostvars(tmp_path):
    """The preflight filter asks Ansible's inventory behind hostvars where a value was set."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "h800", inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "gpu-h800-02.yml").write_text("llmb_head: gpu-h800-02\nweights_seed: gpu-h800-02\n")
    sys.path.insert(0, str(REPO / "plugins" / "filter"))
    try:
        import llmb_deployment as llmb_plan
    finally:
        sys.path.pop(0)
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inv)])
    manager.restrict_to_hosts([manager.get_host("gpu-h800-01")])  # as a play does: the check sees every host
    hostvars = HostVars(manager, VariableManager(loader=loader, inventory=manager), loader)
    groups = {name: [h.name for h in g.get_hosts()] for name, g in manager.groups.items()}
    problems = llmb_plan.llmb_plan_problems(hostvars, groups)
    scoped = [p for p in problems if p["check"] == "scope"]
    assert [p["host"] for p in scoped] == ["gpu-h800-02"], problems
    assert "llmb_head is set on host gpu-h800-02" in scoped[0]["message"]  # weights_seed may be per host


def test_every_llmb_variable_the_toolkit_uses_is_known():
    """Names playbooks, scripts and docs set (-e, set_fact, generated inventories) are not 'unknown'."""
    import re

    known = known_variables()
    used = set()
    for folder in ("playbooks", "scripts", "roles", "docs", "inventories"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and path.suffix in ("", ".yml", ".md", ".py"):
                text = path.read_text(errors="replace")
                used |= set(re.findall(r"(?:-e |set_fact:\s*\n\s*|\"|^\s*)(llmb_[a-z0-9_]+)(?:=|\"\s*:|:\s)", text, re.M))
    modules = {p.stem for p in (REPO / "plugins").rglob("llmb_*.py")}
    filters = set(re.findall(r"\"(llmb_[a-z0-9_]+)\":", "".join(
        p.read_text() for p in (REPO / "plugins" / "filter").glob("*.py"))))
    unknown = sorted(used - set(known) - modules - filters)
    assert not unknown, unknown


def test_facts_the_toolkit_caches_are_not_unknown_variables():
    """The verify stage's llmb_accel fact comes back from the fact cache in hostvars on the next run."""
    from llmbctl.planner import plan_inventory

    hv, groups = load_inventory("sim")
    for host in hv.values():
        host["llmb_accel"] = {"vendor": "nvidia", "devices": 8}
    assert plan_inventory(hv, groups).to_list()


@pytest.mark.parametrize(("name", "text", "value"), [
    ("serve_health_timeout_s", "20", 20),
    ("bench_concurrency", "4", 4),
    ("serve_smoke", "false", False),
])
def test_a_role_variable_given_as_extra_var_text_is_taken_as_its_role_takes_it(name, text, value):
    """`-e serve_health_timeout_s=20` gives the string '20'; the role's argument_spec converts it."""
    from llmbctl.planner import plan_inventory
    from llmbctl.planner.inventory import check_value, known_variables

    knob = known_variables()[name]
    assert check_value(knob, text) == []
    hv, groups = load_inventory("sim")
    for host in hv.values():
        host[name] = text
    assert plan_inventory(hv, groups).to_list()
    assert check_value(knob, "not-a-value")  # still refused
