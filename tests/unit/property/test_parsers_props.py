"""Property tests of the hardware-capture parsers (llmb.hw): damage never crashes them, a cut capture is
never reported clean, and what the simulators render parses back to what they were told.

Deterministic (derandomize=True) and bounded so the file runs in a few seconds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llmb.hw import KINDS, ParseError, parse, split_capture
from llmbctl.hw.check import ParseResult, decode_capture, parse_checked

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = (ROOT / ".." / "shared" / "fixtures").resolve()
sys.path.insert(0, str(ROOT / "tests" / "unit" / "module_utils" / "hw"))
import hwsynth  # noqa: E402

FAST = settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _captures() -> list[tuple[str, str]]:
    """(relative path, text) of every shared capture that parses with no error finding."""
    if not FIXTURES.is_dir():
        return []
    out = []
    for p in sorted(FIXTURES.rglob("*.txt")):
        text = p.read_text(encoding="utf-8")
        if parse_checked(text).ok:
            out.append((str(p.relative_to(FIXTURES)), text))
    return out


CAPTURES = _captures()
needs_fixtures = pytest.mark.skipif(not CAPTURES, reason=f"shared fixtures not present at {FIXTURES}")

# Kinds whose output has an end the parser can see (a count in a header, a closing border, a matrix whose
# rows answer its columns, a fixed diagonal): cutting them anywhere is never reported clean. Field lists
# (lscpu, os-release, --query-gpu rows, nvlink link lists) end wherever they end and are left out.
CUT_DETECTABLE = {"nvidia-smi-q", "nvidia-smi-q-xml", "nvidia-smi", "npu-smi-info", "nvidia-smi-topo",
                  "nvidia-smi-topo-p2p", "npu-smi-topo", "numactl", "lscpu-json"}


def _parse_only_parse_error(text: str, kind: str | None) -> None:
    try:
        parse(text, kind)
    except ParseError:
        pass


def _checked(text: str, kind: str | None = None) -> ParseResult:
    res = parse_checked(text, kind)  # must not raise at all
    assert isinstance(res, ParseResult)
    for f in res.findings:
        assert f.severity in ("error", "warning") and (f.line is None or f.line >= 1)
    if res.facts is None:
        assert res.errors, "refused without an error finding"
    return res


# --------------------------------------------------------------------------- arbitrary input


@FAST
@given(kind=st.sampled_from(sorted(KINDS)), text=st.text(max_size=400))
def test_arbitrary_text_raises_only_parse_error(kind, text):
    _parse_only_parse_error(text, kind)
    _checked(text, kind)
    _checked(text)


@FAST
@given(kind=st.sampled_from(sorted(KINDS)),
       lines=st.lists(st.sampled_from(["GPU0\t X \tNV18", "NIC0\tPIX", "| 0  Ascend910 | OK | 1.0 2 |", "Legend:",
                                       "Attached GPUs : 2", "GPU 00000000:18:00.0", "    Processes : None",
                                       "available: 2 nodes (0-1)", "node 0 cpus: 0 1", "0:  10  21", "\x1b[1m",
                                       "+-----+", "{", "[", "<nvidia_smi_log>", "\r", "\ufeff", "", "x : y"]),
                      max_size=12))
def test_tool_shaped_garbage_raises_only_parse_error(kind, lines):
    text = "\n".join(lines)
    _parse_only_parse_error(text, kind)
    _checked(text, kind)


# --------------------------------------------------------------------------- damaged real captures


def _damage(text: str, how: str, pos: float, junk: str) -> str:
    i = int(pos * len(text))
    if how == "cut":
        return text[:i]
    if how == "flip":
        return text[:i] + junk[:1] + text[i + 1:]
    if how == "insert":
        return text[:i] + junk + text[i:]
    if how == "drop-line":
        lines = text.split("\n")
        k = int(pos * len(lines))
        return "\n".join(lines[:k] + lines[k + 1:])
    if how == "dup-line":
        lines = text.split("\n")
        k = int(pos * len(lines))
        return "\n".join(lines[: k + 1] + lines[k:])
    if how == "lose-tab":
        j = text.find("\t", i)
        return text if j < 0 else text[:j] + text[j + 1:]
    raise AssertionError(how)


@needs_fixtures
@FAST
@given(cap=st.sampled_from(CAPTURES or [("", "")]),
       how=st.sampled_from(["cut", "flip", "insert", "drop-line", "dup-line", "lose-tab"]),
       pos=st.floats(0, 1, exclude_max=True), junk=st.text(min_size=1, max_size=8))
def test_damaged_capture_raises_only_parse_error(cap, how, pos, junk):
    _path, text = cap
    bad = _damage(text, how, pos, junk)
    _parse_only_parse_error(bad, None)
    kind = parse_checked(text).kind
    _parse_only_parse_error(bad, kind)
    _checked(bad, kind)


@needs_fixtures
@FAST
@given(cap=st.sampled_from(CAPTURES or [("", "")]), pos=st.integers(0, 2**31), junk=st.binary(min_size=1, max_size=4))
def test_byte_damage_is_reported_or_harmless(cap, pos, junk):
    _path, text = cap
    data = text.encode("utf-8")
    i = pos % len(data)
    bad = data[:i] + junk + data[i + 1:]
    decoded, findings = decode_capture(bad)
    res = _checked(decoded, parse_checked(text).kind)
    if findings:  # bytes that are not UTF-8: an error naming the line (hwfacts exits 2 on it) ...
        line = bad[:i].count(b"\n") + 1
        assert findings[0].severity == "error" and findings[0].line == line
        meta, body = split_capture(text)
        if line > text.count("\n") - body.count("\n"):  # ... and in the output itself, the capture refused
            assert not res.ok


def _cut_cases():
    return [c for c in CAPTURES if parse_checked(c[1]).kind in CUT_DETECTABLE]


@needs_fixtures
@FAST
@given(cap=st.sampled_from(_cut_cases() or [("", "")]), pos=st.floats(0, 1, exclude_min=True, exclude_max=True))
def test_a_cut_capture_is_never_reported_clean_with_other_facts(cap, pos):
    """Cutting a capture short either leaves its facts as they were (only a trailer was lost), or the
    result is not clean: an error (refused or inconsistent) or a warning names what is missing.

    The cut falls anywhere from the start of the output to the start of its last line: a cut inside the
    last line can leave a shorter value that is still valid (a NIC name in the legend)."""
    _path, text = cap
    full = parse_checked(text)
    _meta, body = split_capture(text)
    body_start = len(text) - len(body)
    body_end = text.rstrip().rfind("\n") + 1
    cut = text[: body_start + int(pos * (body_end - body_start))]
    res = _checked(cut, full.kind)
    if res.facts is not None and res.facts != full.facts:
        assert not res.clean, f"cut at {len(cut)} of {len(text)}: other facts, no finding"


@needs_fixtures
def test_real_captures_have_no_error_findings():
    real = [c for c in CAPTURES if c[0].startswith("real/")]
    assert len(real) >= 20
    every = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.txt"))
    refused = [p for p in every if p not in dict(CAPTURES)]
    # Only the serve / bench stage outputs (parsed elsewhere) are not capture kinds of this parser set.
    assert all(p.startswith(("public/vllm-bench/", "public/vllm-serve-log/")) for p in refused), refused


# --------------------------------------------------------------------------- render -> parse round trips


def _parse_probes(probes: list[dict]) -> dict:
    out = {}
    for pr in probes:
        res = parse_checked(pr["stdout"], pr["kind"], command=pr["cmd"])
        if pr["rc"] not in pr["ok_rcs"] or not pr["stdout"].strip():
            continue
        assert res.ok, (pr["name"], [str(f) for f in res.findings])
        out[pr["name"]] = res.facts
    return out


@FAST
@given(n=st.integers(1, 8), nlinks=st.integers(1, 18), nics=st.integers(0, 8), data=st.data())
def test_nvidia_render_round_trips(n, nlinks, nics, data):
    missing = data.draw(st.sets(st.integers(0, n - 1), max_size=n - 1))
    gpus = [g for g in range(n) if g not in missing]
    down = data.draw(st.sets(st.tuples(st.sampled_from(gpus), st.integers(0, nlinks - 1)), max_size=3))
    numa = data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    facts = _parse_probes(hwsynth.nvidia(n=n, nlinks=nlinks, nics=nics, missing=missing, link_down=down, numa=numa))
    assert len(facts["query"]["gpus"]) == len(gpus) == len(facts["smi-qx"]["gpus"]) == facts["smi-qx"]["attached_gpus"]
    assert [g["index"] for g in facts["topo"]["gpus"]] == list(range(len(gpus)))
    assert [g["numa_affinity"] for g in facts["topo"]["gpus"]] == [[numa[g]] for g in gpus]
    assert len(facts["topo"]["nics"]) == nics
    inactive = {(gpus[g["index"]], lk["link"]) for g in facts["nvlink-s"]["gpus"] for lk in g["links"] if not lk["active"]}
    assert inactive == set(down)
    assert all(len(g["links"]) == nlinks for g in facts["nvlink-s"]["gpus"])


@FAST
@given(cards=st.integers(1, 8), chips=st.integers(1, 2), data=st.data())
def test_ascend_render_round_trips(cards, chips, data):
    phys = list(range(cards * chips))
    missing = data.draw(st.sets(st.sampled_from(phys), max_size=len(phys) - 1))
    facts = _parse_probes(hwsynth.ascend(cards=cards, chips=chips, missing=missing, numa_nodes=2))
    want = [p for p in phys if p not in missing]
    assert [n["phy_id"] for n in facts["npu-smi"]["npus"]] == want
    assert [d["index"] for d in facts["npu-topo"]["devices"]] == want


@FAST
@given(n=st.integers(1, 8), data=st.data())
def test_amd_render_round_trips(n, data):
    missing = data.draw(st.sets(st.integers(0, n - 1), max_size=n - 1))
    facts = _parse_probes(hwsynth.amd(n=n, missing=missing, numa=[0] * n))
    assert len(facts["amd-smi-static"]["gpus"]) == n - len(missing)


# The simulator (tests/sim/accelsim) renders every profile in the byte layout of the real tools.
SIM_COMMANDS = [
    ["nvidia-smi"], ["nvidia-smi", "-q"], ["nvidia-smi", "-q", "-x"], ["nvidia-smi", "topo", "-m"],
    ["nvidia-smi", "nvlink", "-s"],
    ["nvidia-smi", "--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total", "--format=csv"],
    ["npu-smi", "info"], ["npu-smi", "info", "-t", "topo"],
    ["amd-smi", "static", "--json"], ["amd-smi", "topology", "--json"], ["amd-smi", "list", "--json"],
    ["rocm-smi", "--showtopo"], ["numactl", "-H"], ["lscpu"],
]


@pytest.fixture(scope="module")
def sim_root(tmp_path_factory):
    pytest.importorskip("sim.accelsim")
    old = {k: os.environ.get(k) for k in ("ACCELSIM_ROOT", "ACCELSIM_HOSTNAME")}
    os.environ["ACCELSIM_ROOT"] = str(tmp_path_factory.mktemp("accelsim"))
    os.environ["ACCELSIM_HOSTNAME"] = "node1"
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _sim_profiles() -> list[str]:
    d = ROOT / "tests" / "sim" / "accelsim" / "profiles"
    return sorted(p.stem for p in d.glob("*.json") if not p.stem.startswith("_"))


@pytest.mark.parametrize("profile", _sim_profiles())
def test_simulator_renders_parse_clean(sim_root, profile):
    from sim.accelsim import cli, main, state

    state.write_profile_name(profile)
    state.write_faults([])
    cli.sync_derived()
    parsed = 0
    for argv in SIM_COMMANDS:
        rc, out, _err = main.run(argv[0], argv[1:])
        if rc != 0:  # another vendor's tool: not installed on this simulated node
            continue
        res = parse_checked(f"# command: {' '.join(argv)}\n\n{out}")  # as a bundle file holds it
        assert res.ok, (argv, [str(f) for f in res.findings])
        assert res.kind in KINDS
        parsed += 1
    assert parsed >= 4
