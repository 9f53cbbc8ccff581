"""Unit and EnvironmentFile rendering (llmb.quoting, llmb.serve, the serve role's templates).

Every rendered file is read back by a reader of systemd's syntax (tests/units_samples.py, written
from the man pages, independent of the renderer) and must give exactly the plan's argv and
environment; values no line can hold are refused naming the service and the field.
tests/integration/test_units_verify.py checks the same files with systemd itself.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llmb.quoting import SAFE_BARE, QuotingError, bad_char, env_assignment, systemd_exec
from llmb.serve import environment_file, systemd_unit
from llmbctl.planner.engines import trtllm
from units_samples import (
    ANSIBLE_MANAGED,
    HOSTILE_ARGS,
    SyntaxProblem,
    exec_argv,
    read_env_file,
    read_unit,
    render,
    sample_services,
)

CONTROL = ["\n", "\r", "\0", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\ufeff"]


def svc(argv=None, env=None, name="llmb-vllm", role="api", stop_argv=None) -> dict:
    return {
        "name": name,
        "kind": "systemd",
        "role": role,
        "argv": argv if argv is not None else ["/opt/v/bin/vllm", "serve", "/m"],
        "env": env if env is not None else {"A": "1"},
        "stop_argv": stop_argv,
    }


def unit_settings(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for _section, key, value in read_unit(text):
        out.setdefault(key, []).append(value)
    return out


# ------------------------------------------------------------------------- the sample inventories

SAMPLES = sample_services()


def test_every_sample_with_a_plan_has_units():
    names = {inv for inv, _h, _s in SAMPLES}
    assert {"h100", "h200", "h800", "h800-dp-ep", "h200-sglang", "h200-trtllm", "sim"} <= names
    assert any(s["kind"] == "mpirun" and s["stop_argv"] for _i, _h, s in SAMPLES)


@pytest.mark.parametrize("inv,host,service", SAMPLES, ids=[f"{i}/{h}/{s['name']}" for i, h, s in SAMPLES])
def test_sample_units_read_back_as_the_plan(inv, host, service):
    unit, envfile = render(service)
    settings_ = unit_settings(unit)
    assert unit.startswith(f"# {ANSIBLE_MANAGED} - from the launch plan; do not edit on the node.\n[Unit]\n")
    assert exec_argv(settings_["ExecStart"][0]) == service["argv"]
    assert [k for k in settings_ if k.startswith("Exec")] == (
        ["ExecStart", "ExecStop"] if service.get("stop_argv") else ["ExecStart"]
    )
    if service.get("stop_argv"):
        assert exec_argv(settings_["ExecStop"][0]) == service["stop_argv"]
    assert settings_["EnvironmentFile"] == [f"/etc/llm-bringup/{service['name']}.env"]
    assert settings_["SyslogIdentifier"] == [service["name"]]
    assert read_env_file(envfile) == service["env"]
    # where no argument needs quoting the line is the plain join (what the template wrote before)
    if all(a and set(a) <= SAFE_BARE for a in service["argv"]):
        assert settings_["ExecStart"] == [" ".join(service["argv"])]


# ------------------------------------------------------------------------------ hostile values


@pytest.mark.parametrize("arg", HOSTILE_ARGS)
def test_hostile_argument_round_trips_through_the_unit(arg):
    argv = ["/opt/v/bin/vllm", "serve", arg, "--served-model-name", arg]
    unit, _env = render(svc(argv=argv, stop_argv=["/usr/bin/docker", "exec", "x", arg]))
    settings_ = unit_settings(unit)
    assert exec_argv(settings_["ExecStart"][0]) == argv
    assert exec_argv(settings_["ExecStop"][0]) == ["/usr/bin/docker", "exec", "x", arg]
    assert sorted(settings_) == sorted(
        ["Description", "After", "Wants", "StartLimitIntervalSec", "Type", "EnvironmentFile", "ExecStart",
         "ExecStop", "Restart", "RestartForceExitStatus", "RestartSec", "KillMode", "TimeoutStopSec", "LimitNOFILE", "LimitMEMLOCK",
         "StandardOutput", "StandardError", "SyslogIdentifier", "WantedBy"]
    )
    assert all(len(v) == 1 for v in settings_.values())


@pytest.mark.parametrize("value", HOSTILE_ARGS)
def test_hostile_environment_value_round_trips(value):
    env = {"A": value, "HF_HOME": "/srv/hf", "Z_LAST": value + "x"}
    _unit, text = render(svc(env=env))
    assert read_env_file(text) == env
    assert len(text.splitlines()) == 1 + len(env)  # header + one line per variable


def test_executable_path_with_a_space_and_specifier_round_trips():
    argv = ["/opt/my venv/100%/bin/vllm", "serve", "/models/Kimi K2"]
    assert exec_argv(systemd_exec(argv, "s")) == argv


def test_specifiers_and_variables_are_escaped_bare_and_quoted():
    assert systemd_exec(["/bin/x", "100%", "$HOME", "a b$%"], "s") == '/bin/x "100%%" "$$HOME" "a b$$%%"'


@pytest.mark.parametrize("ch", CONTROL)
@pytest.mark.parametrize("field", ["ExecStart", "ExecStop"])
def test_control_characters_in_an_argument_are_refused_naming_service_and_index(ch, field):
    argv = ["/opt/v/bin/vllm", "serve", "/m", "--served-model-name", f"kimi{ch}ExecStartPre=/bin/sh"]
    good = ["/usr/bin/docker", "exec", "x", "true"]
    s = svc(argv=argv, stop_argv=argv) if field == "ExecStop" else svc(argv=argv, stop_argv=good)
    if field == "ExecStop":
        s["argv"] = good
    with pytest.raises(QuotingError) as err:
        systemd_unit(s, "/etc/llm-bringup")
    msg = str(err.value)
    assert f"service llmb-vllm: {field} argument 4" in msg
    assert f"U+{ord(ch):04X}" in msg and "offset 4" in msg


def test_the_template_fails_instead_of_writing_a_broken_unit():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=r"service llmb-vllm: ExecStart argument 2: newline U\+000A"):
        render(svc(argv=["/opt/v/bin/vllm", "serve", "m\nExecStartPre=/bin/touch /tmp/x"]))
    with pytest.raises(AnsibleFilterError, match=r"environment variable name 'BAD KEY'"):
        render(svc(env={"BAD KEY": "1"}))


@pytest.mark.parametrize(
    "key", ["BAD KEY", "NL\nX", "1ABC", "", "A=B", "A-B", "é", "PATH\r", " A", "A\0"]
)
def test_environment_names_outside_the_portable_set_are_refused(key):
    with pytest.raises(QuotingError, match="service s: environment variable name"):
        env_assignment(key, "v", "s")


@pytest.mark.parametrize("ch", CONTROL)
def test_control_characters_in_an_environment_value_are_refused(ch):
    with pytest.raises(QuotingError, match=f"service llmb-ray: environment variable NCCL_DEBUG: .*U\\+{ord(ch):04X}"):
        environment_file(svc(name="llmb-ray", env={"NCCL_DEBUG": f"INFO{ch}LD_PRELOAD=/tmp/x.so"}))


@pytest.mark.parametrize(
    "argv0", ["vllm", "./vllm", "/opt//vllm", "/opt/./vllm", "/opt/../vllm", "/opt/bin/", "/", ""]
)
def test_program_must_be_a_normalized_absolute_path(argv0):
    with pytest.raises(QuotingError, match="service s: ExecStart argument 0: needs an absolute path"):
        systemd_exec([argv0, "serve"], "s")


@pytest.mark.parametrize("argv", [[], "/bin/sh -c x", None, ["/bin/x", None], ["/bin/x", {"a": 1}], ["/bin/x", True]])
def test_argv_must_be_a_list_of_strings(argv):
    with pytest.raises(QuotingError, match="service s: ExecStart"):
        systemd_exec(argv, "s")


@pytest.mark.parametrize("name", ["../../etc/cron.d/x", "a/b", "x y", "a\nb", ".hidden", "", "tmpl@x", "a%n", "x" * 250])
def test_unit_names_are_checked_before_they_become_file_names(name):
    with pytest.raises(QuotingError, match="not a systemd unit name|U\\+000A"):
        systemd_unit(svc(name=name), "/etc/llm-bringup")
    with pytest.raises(QuotingError):
        environment_file(svc(name=name))


@pytest.mark.parametrize("etc_dir", ["relative/dir", "/etc/x\ny", "/etc//x", "/etc/../x"])
def test_environment_file_directory_is_checked(etc_dir):
    with pytest.raises(QuotingError, match="EnvironmentFile"):
        systemd_unit(svc(), etc_dir)


def test_description_escapes_specifiers_and_refuses_control_characters():
    unit = systemd_unit(svc(role="api-%n"), "/etc/llm-bringup")
    assert "Description=llm-bringup api-%%n (llmb-vllm)\n" in unit
    with pytest.raises(QuotingError, match="Description"):
        systemd_unit(svc(role="api\n[Service]"), "/etc/llm-bringup")


def test_bad_char_finds_the_first_offender():
    assert bad_char("abc") is None
    assert bad_char("Kimi-思考 ü \U0001f680") is None
    assert bad_char("ab\ncd\r") == (2, "newline U+000A")
    assert bad_char("x\ufdd0") == (1, "character U+FDD0")
    assert bad_char("x\U0010ffff") == (1, "character U+10FFFF")


# ---------------------------------------------------------------------------------- properties

_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")).filter(lambda c: bad_char(c) is None)
    | st.sampled_from(list('"\\$%;\'` #=' + string.whitespace[:1])),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, max_size=6))
def test_any_printable_argv_round_trips(args):
    argv = ["/opt/llmb/venvs/vllm-0.19.1/bin/vllm", *args]
    assert exec_argv(systemd_exec(argv, "s")) == argv


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True), _TEXT, max_size=5))
def test_any_printable_environment_round_trips(env):
    assert read_env_file(environment_file(svc(env=env))) == env


def test_reader_is_not_the_renderer():
    """The reader refuses what systemd would read differently (so a renderer bug cannot pass)."""
    with pytest.raises(SyntaxProblem):
        exec_argv("/bin/x %n")
    with pytest.raises(SyntaxProblem):
        exec_argv("/bin/x $HOME")
    with pytest.raises(SyntaxProblem):
        exec_argv("/bin/x ; /bin/y")
    assert exec_argv('/bin/x "a\\"b" c\\x20d') == ["/bin/x", 'a"b', "c d"]
    assert read_env_file('A="x\\n"\nB=\'$y\'\n') == {"A": "x\\n", "B": "$y"}
    assert read_unit("[S]\nExecStart=/bin/x \\\n  y\n") == [("S", "ExecStart", "/bin/x    y")]


# ---------------------------------------------------------------------- TRT-LLM sshd (no shell)


@pytest.mark.parametrize("mesh", ["/etc/llmb/ssh-mesh", "/srv/x; touch /tmp/x; #", "/srv/my mesh", "/srv/$(id)"])
def test_trtllm_sshd_script_is_constant_and_the_directory_a_parameter(mesh):
    argv = trtllm.sshd_argv(mesh)
    assert argv == ["/bin/sh", "-c", trtllm.SSHD_SCRIPT, "sh", mesh]
    assert trtllm.SSHD_SCRIPT == 'mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f "$1/sshd_config"'


# ------------------------------------------------------------ ssh_mesh's stand-in sshd unit


def _ssh_mesh_unit(config: str) -> str:
    import jinja2
    from units_samples import REPO, _jinja

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(REPO / "roles" / "ssh_mesh" / "templates")),
        trim_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(_jinja().filters)
    return env.get_template("llmb-ssh-mesh-sshd.service.j2").render(
        ansible_managed=ANSIBLE_MANAGED, ssh_mesh_container_port=2233, _ssh_mesh_sshd_config=config
    )


@pytest.mark.parametrize("mesh", ["/etc/llmb/ssh-mesh", "/srv/my mesh", "/srv/x; touch /tmp/x; #", "/srv/$HOME/%n"])
def test_ssh_mesh_sshd_unit_passes_the_config_path_as_one_argument(mesh):
    config = f"{mesh}/sshd_config"
    settings_ = unit_settings(_ssh_mesh_unit(config))
    assert [exec_argv(v) for v in settings_["ExecStartPre"]] == [
        ["/bin/mkdir", "-p", "/run/sshd"],
        ["/usr/sbin/sshd", "-t", "-f", config],
    ]
    assert [exec_argv(v) for v in settings_["ExecStart"]] == [["/usr/sbin/sshd", "-D", "-e", "-f", config]]
    if mesh == "/etc/llmb/ssh-mesh":  # unchanged where nothing needs quoting
        assert settings_["ExecStart"] == ["/usr/sbin/sshd -D -e -f /etc/llmb/ssh-mesh/sshd_config"]


def test_ssh_mesh_sshd_unit_refuses_a_newline_in_the_path():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="service llmb-ssh-mesh-sshd: ExecStartPre argument 3: newline"):
        _ssh_mesh_unit("/srv/x\nExecStartPre=/bin/touch /tmp/pwned/sshd_config")
