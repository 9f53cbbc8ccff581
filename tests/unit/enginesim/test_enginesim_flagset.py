"""The double parses argv like the real CLIs, from the same flag sets the planner uses."""

from __future__ import annotations

import pytest
from enginesim import flagset
from enginesim_helpers import REPO  # noqa: I001
from llmbctl.planner import plan_inventory


@pytest.fixture(autouse=True)
def _data(monkeypatch):
    monkeypatch.setenv("LLMB_ENGINESIM_DATA", str(REPO / "data"))
    for engine in ("VLLM", "SGLANG", "TRTLLM", "RAY", "VLLM_ASCEND"):
        monkeypatch.delenv(f"LLMB_ENGINESIM_VERSION_{engine}", raising=False)


def test_vllm_accepts_recipe_spellings():
    fs = flagset.load("vllm")
    args, pos = flagset.parse(
        fs,
        [
            "/m",
            "-tp",
            "8",
            "-dcp=8",
            "--no-enable-prefix-caching",
            "--max_model_len",
            "2k",
            "--served-model-name",
            "a",
            "b",
            "--trust-remote-code",
        ],
    )
    assert pos == ["/m"]
    assert args == {
        "--tensor-parallel-size": 8,
        "--decode-context-parallel-size": 8,
        "--enable-prefix-caching": False,
        "--max-model-len": "2k",
        "--served-model-name": ["a", "b"],
        "--trust-remote-code": True,
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--disable-log-requests"], "unrecognized arguments: --disable-log-requests"),
        (["--port"], "argument --port: expected one argument"),
        (["--port", "http"], "argument --port: invalid int value: 'http'"),
        (["--dtype", "fp4"], "argument --dtype: invalid choice: 'fp4'"),
        (["--headless=yes"], "ignored explicit argument"),
    ],
)
def test_vllm_refuses_like_argparse(argv, message):
    with pytest.raises(flagset.UsageError, match=message.replace("(", r"\(")):
        flagset.parse(flagset.load("vllm", "0.32.0"), argv)


def test_vllm_0_33_enable_disable_pairs_parsed_as_its_parser_does():
    """vLLM 0.33.0's EnableDisableAction: --disable-x and the hidden --no-enable-x set x False,
    --enable-custom-all-reduce and the hidden --no-disable-custom-all-reduce set disable_... False."""
    fs = flagset.load("vllm", "0.33.0")
    args, _ = flagset.parse(fs, ["--disable-log-requests", "--no-enable-prefix-caching",
                                 "--enable-custom-all-reduce", "--enable-chunked-prefill"])
    assert args == {"--enable-log-requests": False, "--enable-prefix-caching": False,
                    "--disable-custom-all-reduce": False, "--enable-chunked-prefill": True}
    args, _ = flagset.parse(fs, ["--no-disable-custom-all-reduce"])
    assert args == {"--disable-custom-all-reduce": False}
    with pytest.raises(flagset.UsageError, match="unrecognized arguments: --no-disable-prefix-caching"):
        flagset.parse(dict(fs, allow_abbrev=False), ["--no-disable-prefix-caching"])  # not registered


def test_click_style_errors():
    fs = flagset.load("trtllm")
    with pytest.raises(flagset.UsageError, match="No such option: --tp-size"):
        flagset.parse(fs, ["--tp-size", "8", "/m"])
    with pytest.raises(flagset.UsageError, match="Option '--port' requires an argument"):
        flagset.parse(fs, ["/m", "--port"])


def test_vllm_ascend_extends_vllm():
    fs = flagset.load("vllm-ascend")
    assert fs["engine"] == "vllm-ascend" and "--prefill-context-parallel-size" in fs["flags"]
    assert "--tensor-parallel-size" in fs["flags"] and fs["config_checks"]




@pytest.mark.parametrize(
    "name",
    ["h100", "h200", "h800", "h800-dp-ep"]
    + ["a3", "a3-2x16", "mi300x", "mi300x-2x8", "h200-sglang", "h200-trtllm", "sim"],
)
def test_every_planned_argv_parses_in_the_double(name):
    """Planner and double read the same data: whatever the planner emits, the stand-in accepts."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "unit" / "module_utils" / "planner"))
    try:
        from planner_helpers import load_inventory
    finally:
        sys.path.pop(0)
    hv, groups = load_inventory(name)
    plan = plan_inventory(hv, groups, str(REPO / "data"))
    engine = plan.ctx.engine
    for hp in plan.to_list():
        for svc in hp["services"]:
            argv = svc["argv"]
            if svc["role"] == "sshd":
                continue
            if svc["role"] in ("ray-head", "ray-worker"):
                fs, rest = flagset.load("ray"), argv[2:]
            elif svc["kind"] == "mpirun":
                fs, rest = flagset.load("trtllm"), argv[argv.index("trtllm-serve") + 2 :]
            elif svc["kind"] == "exec":
                fs, rest = flagset.load(engine), argv[argv.index("vllm") + 2 :]
            elif engine == "sglang":
                fs, rest = flagset.load("sglang"), argv[3:]
            else:
                fs, rest = flagset.load(engine), argv[2:]
            args, pos = flagset.parse(fs, rest)
            assert args


def test_unknown_flag_and_its_value_are_both_unrecognized_like_argparse():
    """vLLM 0.23.0 on the lent H100: `vllm serve M --max-num-seqz 64` ->
    "vllm: error: unrecognized arguments: --max-num-seqz 64" (the value is an extra positional)."""
    fs = flagset.load("vllm")
    with pytest.raises(flagset.UsageError, match=r"unrecognized arguments: --max-num-seqz 64$"):
        flagset.parse(fs, ["/models/m", "--max-num-seqz", "64", "--port", "8000"], max_positionals=1)
    # without a limit the value stays a positional (callers that take several)
    with pytest.raises(flagset.UsageError, match=r"unrecognized arguments: --max-num-seqz$"):
        flagset.parse(fs, ["/models/m", "--max-num-seqz", "64"])
