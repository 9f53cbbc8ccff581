"""The engine catalog: generated sets (llmbctl.enginecat), the hand-kept overlays, several releases per
engine, renames and release-named refusals, requirements (CUDA major -> driver)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from llmbctl import enginecat as E
from llmbctl.catalog import Catalog, CatalogError, version_key
from llmbctl.enginecat.requirements import CUDA_MIN_DRIVER, driver_problem, elf_needed
from llmbctl.engines.registry import option_strings
from llmbctl.planner.flags import EngineArgs

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "data"
CAT = Catalog(DATA)


def _extract_cli():
    spec = importlib.util.spec_from_file_location(
        "extract_cli", REPO / "lib" / "llmbctl" / "enginecat" / "extract_cli.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


XC = _extract_cli()


def _doc_text(path: Path) -> dict:
    return json.loads("\n".join(ln for ln in path.read_text().splitlines() if not ln.startswith("#")))


# --------------------------------------------------------------------------- shipped sets


# Sets that could not be generated on this machine, with the reason (docs/engines.md says the same).
NOT_GENERATED: dict[str, str] = {}  # none left: TensorRT-LLM 1.1.0 is generated in source mode


def test_every_shipped_set_is_generated_and_names_its_generator():
    names = CAT.flagset_names()
    assert names, "no engine sets shipped"
    for name in names:
        if name in NOT_GENERATED:
            assert "NOT GENERATED" in (DATA / "engines" / f"{name}.yml").read_text().splitlines()[0], name
            continue
        path = DATA / "engines" / f"{name}.yml"
        text = path.read_text()
        doc = CAT.flagset_doc(name)
        gen = doc["generator"]
        assert gen["command"].startswith("scripts/engine-catalog extract "), name
        assert f"# generator: {gen['command']}" in text.splitlines()[:4], name
        # the file is exactly what the generator renders from its content: no hand edit survives
        assert E.render(doc) == text, f"{name} differs from what the generator renders"
        assert doc["option_strings"] == len(option_strings(doc)), name
        fs = CAT.flagset(doc["engine"], doc["version"])
        assert fs is not None and fs.flags, name


@pytest.mark.parametrize("name, count", [("vllm-0.19.1", 314), ("sglang-0.5.5", 281)])
def test_real_parser_counts(name, count):
    """The testers' counts of the real parsers' option strings (help options apart)."""
    doc = CAT.flagset_doc(name)
    assert len(option_strings(doc)) == count
    assert set(doc["help_options"]) == {"-h", "--help"}


@pytest.mark.parametrize("name", CAT.flagset_names())
def test_every_set_holds_exactly_the_option_strings_its_generation_walked(name):
    """Each set records, at generation, the sha256 of the sorted option strings the real parser had
    (build_doc, from the walk); the flags in the file must give the same digest, so a flag, alias or
    --no- form added or dropped by hand (and the file re-rendered) fails here, not only a count."""
    doc = CAT.flagset_doc(name)
    strings = option_strings(doc)
    assert doc["option_strings"] == len(strings), name
    assert doc["option_strings_sha256"] == E.strings_sha256(strings), f"{name}: regenerate it, do not edit it"
    head = [ln for ln in (DATA / "engines" / f"{name}.yml").read_text().splitlines() if ln.startswith("#")]
    assert any(doc["option_strings_sha256"] in ln and f"option strings: {len(strings)}," in ln for ln in head)


def test_the_digest_catches_a_flag_edited_by_hand():
    doc = json.loads(json.dumps(CAT.flagset_doc("vllm-0.19.1")))
    recorded = doc["option_strings_sha256"]
    spec = doc["flags"].pop("--max-model-len")
    assert E.strings_sha256(option_strings(doc)) != recorded
    doc["flags"]["--max-model-len"] = dict(spec, aliases=sorted(spec.get("aliases", []) + ["--max-len"]))
    assert len(option_strings(doc)) == doc["option_strings"] + 1 and E.strings_sha256(option_strings(doc)) != recorded


def test_vllm_0_19_1_has_the_flags_the_hand_set_missed_and_none_of_its_phantoms():
    strings = option_strings(CAT.flagset_doc("vllm-0.19.1"))
    for real in ("--attention-backend", "--moe-backend", "--nnodes", "--node-rank", "--master-addr",
                 "--master-port", "--optimization-level", "--prefill-context-parallel-size",
                 "--kv-offloading-size", "-ep", "-dph"):
        assert real in strings, real
    for phantom in ("--swap-space", "--disable-frontend-multiprocessing",
                    "--no-disable-frontend-multiprocessing", "--logits-processor-pattern", "-O"):
        assert phantom not in strings, phantom
    doc = CAT.flagset_doc("vllm-0.19.1")
    assert doc["allow_abbrev"] is True
    assert any(r["from"] == "-O<N>" and r["sets"] == {"optimization_level": "3"} for r in doc["rewrites"])
    assert doc["underscore_equivalent"] is True
    assert "kimi_k2" in doc["parsers"]["tool_call"] and "DeepseekV3ForCausalLM" in doc["architectures"]


def test_sglang_0_5_5_phantom_gone_and_planner_spelling_kept():
    assert "--enable-deepep-moe" not in option_strings(CAT.flagset_doc("sglang-0.5.5"))
    fs = CAT.flagset("sglang", "0.5.5")
    assert "--tp-size" in fs.flags and "--tensor-parallel-size" in fs.flags["--tp-size"]["aliases"]
    assert fs.resolve("--tensor-parallel-size") == ("--tp-size", False)
    assert fs.images["nvidia"].startswith("lmsysorg/sglang")  # from the overlay


def test_versions_sort_and_default_is_newest():
    assert sorted(["0.23.0", "0.19.1", "0.20.2rc1", "0.20.2", "0.9.0"], key=version_key) == [
        "0.9.0", "0.19.1", "0.20.2rc1", "0.20.2", "0.23.0"]
    for engine in {r.engine for r in CAT.engine_releases()}:
        versions = CAT.flagset_versions(engine)
        assert CAT.newest_version(engine) == versions[-1]


# --------------------------------------------------------------------------- generator logic


def _toy_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toy")
    p.add_argument("model", nargs="?")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--enable-thing", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--dtype", choices=["auto", "bfloat16"], default="auto")
    p.add_argument("--config", type=json.loads, default=None)
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--headless", action="store_true")
    p.add_argument("--path", type=str, default=Path("/x"))
    p.add_argument("--obj", default=object())
    return p


def test_walk_and_build_doc_from_a_real_argparse_parser():
    raw = XC.walk_argparse(_toy_parser())
    raw["probes"] = XC.probes_of(_toy_parser())
    eng = E.ENGINES["vllm"]
    doc = E.build_doc(raw, eng, "9.9.9", {}, {"command": "scripts/engine-catalog extract vllm==9.9.9"})
    flags = doc["flags"]
    assert flags["--tensor-parallel-size"]["type"] == "int" and flags["--tensor-parallel-size"]["aliases"] == ["-tp"]
    assert flags["--enable-thing"]["type"] == "bool" and flags["--enable-thing"]["negation"] == ["--no-enable-thing"]
    assert flags["--dtype"] == {"action": "_StoreAction", "choices": ["auto", "bfloat16"], "default": "auto",
                                "dest": "dtype", "type": "choice"}
    assert flags["--config"]["type"] == "json"
    assert flags["--served-model-name"]["type"] == "list"
    assert flags["--headless"]["type"] == "flag"
    assert flags["--path"]["default"] == "/x" and flags["--obj"]["default"] == "<object>"
    assert doc["positional"] == {"name": "model", "required": False}
    assert doc["option_strings"] == 10 and doc["help_options"] == ["--help", "-h"]
    assert doc["underscore_equivalent"] is False  # plain argparse refuses --tensor_parallel_size
    text = E.render(doc)
    # deterministic: a second walk renders the same bytes (no object addresses, no timestamps)
    raw2 = XC.walk_argparse(_toy_parser())
    raw2["probes"] = XC.probes_of(_toy_parser())
    assert E.render(E.build_doc(raw2, eng, "9.9.9", {}, doc["generator"])) == text
    assert re.search(r"0x[0-9a-f]{6,}", text) is None


def test_regenerated_file_written_only_when_changed(tmp_path):
    path = tmp_path / "x.yml"
    assert E.write_atomic(path, "a\n") is True
    assert E.write_atomic(path, "a\n") is False
    assert path.read_text() == "a\n"


@pytest.mark.parametrize("spec", ["vllm", "vllm==", "vllm>=0.1", "nosuch==1.0", "vllm==1.0; rm -rf /"])
def test_bad_release_spec_is_refused(spec):
    with pytest.raises(E.ExtractError):
        E.parse_spec(spec)


def test_parse_spec_knows_pypi_names():
    assert E.parse_spec("tensorrt-llm==1.1.0")[0].engine == "trtllm"
    assert E.parse_spec("vllm==0.19.1") == (E.ENGINES["vllm"], "0.19.1")


def test_diff_sets_lists_removed_and_added():
    old = {"flags": {"--a": {"type": "bool", "negation": ["--no-a"]}, "--b": {"type": "int"}}}
    new = {"flags": {"--b": {"type": "int", "aliases": ["-b"]}, "--c": {"type": "str"}}}
    assert E.diff_sets(old, new) == {"removed": ["--a", "--no-a"], "added": ["--c", "-b"]}


def test_split_command_finds_the_engine_in_wrappers():
    from llmbctl.enginecat.check import split_command

    assert split_command(["/v/bin/vllm", "serve", "/m", "--port", "1"], ["vllm", "serve"]) == ["/m", "--port", "1"]
    assert split_command(["docker", "exec", "c", "python3", "-m", "sglang.launch_server", "--tp-size", "8"],
                         ["python", "-m", "sglang.launch_server"]) == ["--tp-size", "8"]
    assert split_command(["/v/bin/ray", "start", "--head"], ["vllm", "serve"]) is None


# --------------------------------------------------------------------------- overlays


def test_overlay_is_validated(tmp_path):
    shutil.copytree(DATA, tmp_path / "data")
    path = tmp_path / "data" / "engines" / "hand" / "vllm.yml"
    text = path.read_text().replace('"engine": "vllm",', '"engine": "vllm",\n "flags": {},', 1)
    path.write_text(text)
    with pytest.raises(CatalogError, match="flags: not an overlay key"):
        Catalog(tmp_path / "data").flagset("vllm", "0.19.1")


def test_overlay_rename_needs_a_source(tmp_path):
    shutil.copytree(DATA, tmp_path / "data")
    path = tmp_path / "data" / "engines" / "hand" / "vllm.yml"
    text = path.read_text()
    text = re.sub(r'"source": "vllm PR #21739[^"]*",\n', "", text)
    path.write_text(text)
    with pytest.raises(CatalogError, match="renamed.--disable-log-requests must be a mapping with 'to'"):
        Catalog(tmp_path / "data").flagset("vllm", "0.19.1")


def test_overlay_default_shadowing_a_generated_parser_default_is_refused(tmp_path):
    """The 0.9 the vLLM overlay used to carry for --gpu-memory-utilization is wrong for 0.23.0 (its
    parser says 0.92): parser defaults come from the generated sets, never from the overlay."""
    shutil.copytree(DATA, tmp_path / "data")
    path = tmp_path / "data" / "engines" / "hand" / "vllm.yml"
    text = path.read_text().replace('"engine": "vllm",', '"defaults": {"--gpu-memory-utilization": 0.9},\n'
                                    ' "engine": "vllm",', 1)
    path.write_text(text)
    with pytest.raises(CatalogError, match=r"defaults.--gpu-memory-utilization: .*0\.23\.0: 0\.92"):
        Catalog(tmp_path / "data").flagset("vllm", "0.23.0")


def test_no_shipped_overlay_contradicts_its_generated_sets():
    for engine in ("vllm", "sglang", "trtllm", "ray", "vllm-ascend"):
        overlay = CAT.engine_overlay(engine)  # raises on a contradicting default
        for versions in CAT.flagset_versions(engine):
            strings = option_strings(CAT.flagset_doc(f"{engine}-{versions}"))
            for flag in overlay.get("planner_owned", []):
                assert flag in strings, f"{engine} {versions}: planner-owned {flag} is not an option of the release"
            for old, rec in (overlay.get("renamed") or {}).items():
                if rec.get("to") and old not in strings:
                    assert rec["to"] in strings, f"{engine} {versions}: rename target {rec['to']} missing"
    # the defaults the planner uses for the memory estimate are the parsers'
    assert CAT.flagset("vllm", "0.23.0").flags["--gpu-memory-utilization"]["default"] == 0.92
    assert CAT.flagset("vllm", "0.19.1").flags["--gpu-memory-utilization"]["default"] == 0.9
    assert "--gpu-memory-utilization" not in CAT.flagset("vllm", "0.23.0").defaults


# --------------------------------------------------------------------------- renames and releases


def test_disable_log_requests_translated_for_every_vllm_release_that_lacks_it():
    versions = CAT.flagset_versions("vllm")
    lacking = [v for v in versions if "--disable-log-requests" not in option_strings(CAT.flagset_doc(f"vllm-{v}"))]
    # removed by PR #29402, back in 0.33.0 as the negation of --enable-log-requests (EnableDisableAction)
    assert lacking == [v for v in versions if version_key(v) < version_key("0.33.0")] and lacking
    for v in versions:
        ea = EngineArgs(CAT.flagset("vllm", v))
        ea.apply_argv(["--disable-log-requests"], "recipe", {})
        assert not ea.problems, (v, ea.problems)
        if v in lacking:
            assert ea.argv() == ["--no-enable-log-requests"], v
            assert any("translated" in n for n in ea.notes)
        else:
            assert ea.argv() == ["--disable-log-requests"], v  # the release's own negation


def test_vllm_0_33_booleans_are_enable_disable_pairs_with_the_old_negation_hidden():
    """vLLM 0.33.0's EnableDisableAction, as its own parser walked: --enable-x / --disable-x listed,
    --no-enable-x accepted but hidden; the set records both and the planner writes the listed one."""
    doc = CAT.flagset_doc("vllm-0.33.0")
    spec = doc["flags"]["--enable-prefix-caching"]
    assert spec["type"] == "bool" and spec["action"] == "EnableDisableAction"
    assert spec["negation"] == ["--disable-prefix-caching"]
    assert spec["negation_hidden"] == ["--no-enable-prefix-caching"]
    assert "--no-enable-prefix-caching" in option_strings(doc)
    fs = CAT.flagset("vllm", "0.33.0")
    for said, want in (("--no-enable-prefix-caching", ["--disable-prefix-caching"]),
                       ("--disable-prefix-caching", ["--disable-prefix-caching"]),
                       ("--enable-prefix-caching", ["--enable-prefix-caching"]),
                       ("--no-disable-custom-all-reduce", ["--enable-custom-all-reduce"]),
                       ("--enable-custom-all-reduce", ["--enable-custom-all-reduce"])):
        ea = EngineArgs(fs)
        ea.apply_argv([said], "recipe", {})
        assert not ea.problems and ea.argv() == want, (said, ea.problems, ea.argv())
    ea = EngineArgs(fs)
    ea.apply_mapping({"enable-prefix-caching": False}, "llmb_engine_args", {})
    assert ea.argv() == ["--disable-prefix-caching"]


def test_vllm_0_33_spellings_translated_onto_older_releases_from_the_generated_sets():
    """The other way: 0.33.0's --disable-x / --enable-x on a release that only has --no-enable-x /
    --no-disable-x, by the parser destination both sets record (no list kept by hand)."""
    older = [v for v in CAT.flagset_versions("vllm") if version_key(v) < version_key("0.33.0")]
    assert older
    for v in older:
        for said, want in (("--disable-prefix-caching", ["--no-enable-prefix-caching"]),
                           ("--enable-custom-all-reduce", ["--no-disable-custom-all-reduce"])):
            ea = EngineArgs(CAT.flagset("vllm", v))
            ea.apply_argv([said], "recipe", {})
            assert not ea.problems, (v, said, ea.problems)
            assert ea.argv() == want, (v, said)
            assert any(f"vllm 0.33.0 is {want[0]} in vllm {v}; translated" in n for n in ea.notes), ea.notes
    # a spelling no shipped release knows is still refused
    ea = EngineArgs(CAT.flagset("vllm", older[-1]))
    ea.apply_argv(["--disable-no-such-thing"], "recipe", {})
    assert ea.problems and ea.problems[0].check == "engine-flag-unknown"


def _with_newer_release(tmp_path: Path) -> Catalog:
    """A data copy with a synthetic newer vLLM set that has one more flag."""
    shutil.copytree(DATA, tmp_path / "data")
    newest = CAT.newest_version("vllm")
    doc = CAT.flagset_doc(f"vllm-{newest}")
    doc = json.loads(json.dumps(doc))
    doc["version"] = "99.0.0"
    doc["flags"]["--brand-new-knob"] = {"type": "int", "action": "_StoreAction", "dest": "brand_new_knob"}
    doc["option_strings"] += 1
    (tmp_path / "data" / "engines" / "vllm-99.0.0.yml").write_text(E.render(doc))
    return Catalog(tmp_path / "data")


def test_flag_of_a_newer_release_refused_on_an_older_one_naming_the_release(tmp_path):
    cat = _with_newer_release(tmp_path)
    assert cat.newest_version("vllm") == "99.0.0"
    ea = EngineArgs(cat.flagset("vllm", "0.19.1"))
    ea.apply_token("--brand-new-knob", 3, "llmb_engine_args", {})
    (p,) = ea.problems
    assert p.check == "engine-flag-unknown"
    assert "introduced in vllm 99.0.0" in p.message and "llmb_engine_version to 99.0.0" in p.fix
    ok = EngineArgs(cat.flagset("vllm", "99.0.0"))
    ok.apply_token("--brand-new-knob", 3, "llmb_engine_args", {})
    assert not ok.problems and ok.argv() == ["--brand-new-knob", "3"]


def test_real_newest_only_flag_refused_on_0_19_1():
    newest = CAT.newest_version("vllm")
    only_new = sorted(option_strings(CAT.flagset_doc(f"vllm-{newest}")) - option_strings(
        CAT.flagset_doc("vllm-0.19.1")))
    if newest == "0.19.1" or not only_new:
        pytest.skip("one vLLM release shipped")
    flag = next(f for f in only_new if f.startswith("--") and not f.startswith("--no-"))
    ea = EngineArgs(CAT.flagset("vllm", "0.19.1"))
    ea.apply_token(flag, "1", "llmb_engine_args", {})
    assert ea.problems and "introduced in vllm" in ea.problems[0].message


def test_flag_only_in_the_newest_release_refused_on_every_older_one_naming_the_newest():
    """Done-when of issue 9: a flag that exists only in the newest shipped release is refused on each
    older one with the release that introduced it."""
    versions = CAT.flagset_versions("vllm")
    newest = versions[-1]
    only = option_strings(CAT.flagset_doc(f"vllm-{newest}"))
    for v in versions[:-1]:
        only = only - option_strings(CAT.flagset_doc(f"vllm-{v}"))
    # a flag of the newest alone, not another spelling of an older release's (those are translated)
    flag = sorted(f for f in only if f.startswith("--") and not f.startswith("--no-")
                  and all(CAT.flagset("vllm", v).translate(f) is None for v in versions[:-1]))[0]
    for v in versions[:-1]:
        ea = EngineArgs(CAT.flagset("vllm", v))
        ea.apply_token(flag, "1", "llmb_engine_args", {})
        assert ea.problems, (flag, v)
        assert f"not a flag of vllm {v}: it was introduced in vllm {newest}" in ea.problems[0].message
    ok = EngineArgs(CAT.flagset("vllm", newest))
    ok.apply_token(flag, "1", "llmb_engine_args", {})
    assert not [p for p in ok.problems if "not a flag" in p.message]  # known there (its value is checked)


def test_flag_removed_in_a_later_release_names_it(tmp_path):
    cat = _with_newer_release(tmp_path)
    doc = json.loads(json.dumps(cat.flagset_doc("vllm-99.0.0")))
    doc["version"] = "100.0.0"
    del doc["flags"]["--brand-new-knob"]
    doc["option_strings"] -= 1
    (tmp_path / "data" / "engines" / "vllm-100.0.0.yml").write_text(E.render(doc))
    cat = Catalog(tmp_path / "data")
    ea = EngineArgs(cat.flagset("vllm", "100.0.0"))
    ea.apply_token("--brand-new-knob", 3, "x", {})
    assert "removed in vllm 100.0.0" in ea.problems[0].message


# --------------------------------------------------------------------------- requirements


def test_driver_570_cannot_run_a_cuda_13_release():
    assert CUDA_MIN_DRIVER[12] == "525.60.13" and CUDA_MIN_DRIVER[13] == "580.65.06"
    p = driver_problem("570.148.08", 13)
    assert p == {"expected": "NVIDIA driver >= 580.65.06 (CUDA 13)", "found": "570.148.08"}
    assert driver_problem("580.65.06", 13) is None
    assert driver_problem("570.148.08", 12) is None
    assert driver_problem(None, 13) is None


def test_elf_reader_reads_dt_needed_of_a_real_library():
    lib = Path(sys.executable).resolve()
    needed = elf_needed(lib)
    if not needed:
        pytest.skip("interpreter is statically linked")
    assert any(n.startswith("libc.so") for n in needed)
    assert elf_needed(Path(__file__)) == []


def test_shipped_requirements_name_a_cuda_major_and_its_driver():
    for rel in CAT.engine_releases():
        req = rel.doc.get("requirements") or {}
        if "cuda_major" in req:
            assert req["nvidia_driver_min"] == CUDA_MIN_DRIVER[req["cuda_major"]], rel.name
            assert req["cuda_libs"] == [f"libcudart.so.{req['cuda_major']}"] or len(req["cuda_libs"]) > 1


def test_h800_recipe_disable_log_requests_planned_for_every_shipped_vllm():
    """The h800 recipe (seed 002) passes --disable-log-requests: every shipped vLLM release plans
    it as --no-enable-log-requests (and the real parsers accepted those plans: docs/engines.md)."""
    from llmbctl.enginecat.check import planned_cases

    cases, summary = planned_cases(REPO, [REPO / "inventories" / "h800"])
    (inv,) = summary
    assert inv.allowed == CAT.flagset_versions("vllm") and not inv.refused
    vllm_cases = [c for c in cases if c.engine == "vllm"]
    assert {c.version for c in vllm_cases} == set(CAT.flagset_versions("vllm"))
    for c in vllm_cases:  # 0.33.0 lists --disable-log-requests as --enable-log-requests' negation again
        want, other = (("--disable-log-requests", "--no-enable-log-requests")
                       if version_key(c.version) >= version_key("0.33.0") else
                       ("--no-enable-log-requests", "--disable-log-requests"))
        assert want in c.args and other not in c.args, c.version
    assert {c.engine for c in cases} == {"vllm", "ray"}


def test_real_flag_removed_between_shipped_releases_names_the_release():
    versions = CAT.flagset_versions("vllm")
    checked = 0
    for older, newer in zip(versions, versions[1:], strict=False):
        gone = sorted(f for f in option_strings(CAT.flagset_doc(f"vllm-{older}"))
                      - option_strings(CAT.flagset_doc(f"vllm-{newer}")) if f.startswith("--") and not f.startswith("--no-"))
        for flag in gone[:3]:
            ea = EngineArgs(CAT.flagset("vllm", newer))
            ea.apply_token(flag, "1", "llmb_engine_args", {})
            assert ea.problems and f"removed in vllm {newer}" in ea.problems[0].message, (flag, newer)
            checked += 1
    assert checked or len(versions) < 2


def test_the_engine_double_orders_releases_as_the_catalog_does():
    """tests/enginesim runs on nodes with the stdlib only, so it keeps its own version_key: same order."""
    from enginesim.flagset import version_key as double_key
    from llmbctl.catalog import version_key

    versions = ["0.9", "0.19.1", "0.20.2rc1", "0.20.2", "0.23.0", "0.5.23", "1.0.0a1", "1.0.0b2", "2.51.1", "x"]
    assert sorted(versions, key=version_key) == sorted(versions, key=double_key)


# --------------------------------------------------------------------------- source mode (TensorRT-LLM)

TOY_CLICK_SOURCE = '''
import click
import torch
from tensorrt_llm.llmapi import BuildConfig
from tensorrt_llm.llmapi.reasoning_parser import ReasoningParserFactory


class ChoiceWithAlias(click.Choice):
    def __init__(self, choices, aliases):
        super().__init__(choices)
        self.aliases = aliases

    def convert(self, value, param, ctx):
        return super().convert(self.aliases.get(value, value), param, ctx)


@click.command("serve")
@click.argument("model", type=str)
@click.option("--backend", type=ChoiceWithAlias(["pytorch", "tensorrt"], {"trt": "tensorrt"}), default="pytorch")
@click.option("--max_batch_size", type=int, default=BuildConfig.max_batch_size)
@click.option("--reasoning_parser", type=click.Choice(ReasoningParserFactory.parsers.keys()), default=None)
@click.option("--trust_remote_code", is_flag=True, default=False)
def serve(model, backend, max_batch_size, reasoning_parser, trust_remote_code):
    """doc"""
'''


def test_source_mode_walks_a_click_command_with_its_imports_stubbed(tmp_path):
    """TensorRT-LLM cannot be installed here: its serve.py is walked with click real and the rest
    stubbed; values read from a stub are marked, never guessed (a stubbed registry's choices are
    unknown, not empty), and the check mode parses argv with that same command."""
    src = tmp_path / "serve.py"
    src.write_text(TOY_CLICK_SOURCE)
    venv = Path(sys.prefix)  # the controller venv has click; extract_cli runs in a subprocess
    raw = E.run_in_venv(venv, ["trtllm"], source=src)
    doc = E.build_doc(raw, E.ENGINES["trtllm"], "9.9.9", {}, {"command": "x"})
    E.apply_stubbed(doc, raw.get("stubbed") or {})
    flags = doc["flags"]
    assert sorted(flags) == ["--backend", "--max_batch_size", "--reasoning_parser", "--trust_remote_code"]
    assert flags["--backend"]["choices"] == ["pytorch", "tensorrt", "trt"]  # the alias is accepted too
    assert flags["--max_batch_size"]["default_from"] == "tensorrt_llm.llmapi.BuildConfig.max_batch_size"
    assert "default" not in flags["--max_batch_size"]
    assert flags["--reasoning_parser"]["choices_unknown"] is True and flags["--reasoning_parser"]["type"] == "str"
    assert flags["--trust_remote_code"]["type"] == "flag"
    assert doc["positional"] == {"name": "model", "required": True}
    cases = [{"id": "ok", "args": ["m", "--backend", "trt", "--reasoning_parser", "deepseek-r1"]},
             {"id": "bad", "args": ["m", "--no-such-flag"]}]
    got = {r["id"]: r for r in E.run_in_venv(venv, ["check", "trtllm"], stdin=json.dumps(cases), source=src)}
    assert got["ok"]["ok"] is True
    assert got["bad"]["ok"] is False and "--no-such-flag" in got["bad"]["error"]


def test_source_mode_needs_a_reference(tmp_path):
    src = tmp_path / "serve.py"
    src.write_text(TOY_CLICK_SOURCE)
    with pytest.raises(E.ExtractError, match="--source-ref"):
        E.extract("tensorrt-llm==9.9.9", tmp_path, source=src)


def test_shipped_trtllm_set_names_its_source_commit_and_the_tag_it_stands_for():
    text = (DATA / "engines" / "trtllm-1.1.0.yml").read_text()
    head = "\n".join(ln for ln in text.splitlines() if ln.startswith("#"))
    assert "GENERATED" in head.splitlines()[0] and "NOT GENERATED" not in head
    assert "--source-ref NVIDIA/TensorRT-LLM@4c05a74891e4df8066f08ed4ce14b0972abe4e25" in head
    assert "48b7b5d8b7ed" in head and "wheel_stub" in head  # the v1.1.0 tag commit, and why not installed


def test_trtllm_reasoning_parsers_come_from_the_overlay_only_where_the_walk_could_not_read_them():
    doc = CAT.flagset_doc("trtllm-1.1.0")
    assert doc["flags"]["--reasoning_parser"]["choices_unknown"] is True and doc["parsers"] == {}
    fs = CAT.flagset("trtllm", "1.1.0")
    assert fs.parsers["reasoning"] == ["deepseek-r1", "qwen3"] and "source" not in fs.parsers
    # a generated set that read its registries keeps its own
    assert CAT.flagset("vllm", "0.19.1").parsers == CAT.flagset_doc("vllm-0.19.1")["parsers"]


def test_hand_kept_parsers_need_a_source(tmp_path):
    shutil.copytree(DATA, tmp_path / "data")
    path = tmp_path / "data" / "engines" / "hand" / "sglang.yml"
    path.write_text(path.read_text().replace('"engine": "sglang",', '"engine": "sglang",\n "parsers": {"x": []},', 1))
    with pytest.raises(CatalogError, match="parsers: hand-kept parser names need a 'source'"):
        Catalog(tmp_path / "data").flagset("sglang", "0.5.5")


def test_generated_choices_are_sorted_whatever_order_the_parser_built():
    opt = {"option_strings": ["--b"], "dest": "b", "action": "_StoreAction", "nargs": None,
           "choices": ["pytorch", "ascend", "flashinfer"], "type": "str"}
    flags, _ = E.flags_from_options([opt])
    assert flags["--b"]["choices"] == ["ascend", "flashinfer", "pytorch"]


def test_rocm_build_requirements_are_the_seed_recipes_and_name_it():
    """What the x86 CUDA wheel cannot tell (the ROCm build's needs) is taken from seed 002 and says so."""
    rel = CAT.release_requirements("vllm", "0.23.0")
    amd = rel["by_vendor"]["amd"]
    assert (amd["rocm"], amd["glibc"], amd["python"]) == ("7.0", "2.35", "3.12")
    assert "seed 002_5854b3313ee63355.txt" in amd["source"]
    seed = (REPO.parent / "shared" / "seeds" / "002_5854b3313ee63355.txt")
    if seed.is_file():  # the fact is the seed's own sentence
        assert "requires Python 3.12, ROCm 7.0, and glibc >= 2.35" in seed.read_text()


def test_overlay_requirements_need_a_vendor_and_a_source(tmp_path):
    shutil.copytree(DATA, tmp_path / "data")
    path = tmp_path / "data" / "engines" / "hand" / "vllm.yml"
    path.write_text(re.sub(r'"source": "seed 002[^"]*"', '"rocm_note": "x"', path.read_text()))
    with pytest.raises(CatalogError, match="requirements.amd: must be one of"):
        Catalog(tmp_path / "data").flagset("vllm", "0.23.0")


def test_vllm_glibc_is_read_from_its_extensions_symbol_versions():
    for version in CAT.flagset_versions("vllm"):
        req = CAT.release_requirements("vllm", version)["requirements"]
        assert re.fullmatch(r"2\.\d+", req.get("glibc", "")), (version, req)


def test_elf_glibc_reads_the_newest_glibc_symbol_version_of_a_real_binary():
    from llmbctl.enginecat.requirements import elf_glibc

    assert elf_glibc(Path(sys.executable).resolve()) is not None
    assert elf_glibc(Path(__file__)) is None  # not an ELF file


# --------------------------------------------------------------------------- vllm-ascend, KTransformers


def test_vllm_ascend_set_records_the_plugin_it_could_not_load_and_its_wheel_requirements():
    doc = CAT.flagset_doc("vllm-ascend-0.20.2rc1")
    plugin = doc["plugin"]
    assert plugin["loaded"] is False and "torch_npu" in plugin["error"] and plugin["at"].startswith("vllm_ascend/")
    assert "vllm.platform_plugins:ascend=vllm_ascend:register" in plugin["entry_points"]
    assert doc["generator"]["release"] == "vllm-ascend==0.20.2rc1 with vllm==0.20.2"
    head = "\n".join(ln for ln in (DATA / "engines" / "vllm-ascend-0.20.2rc1.yml").read_text().splitlines()
                     if ln.startswith("#"))
    assert "without an x86 release" not in head and "x86 wheels on the package index" in " ".join(head.split())
    req = CAT.release_requirements("vllm-ascend", "0.20.2rc1")["requirements"]
    assert req["cann"] == "==9.0.0" and req["torch"] == "==2.10.0" and req["torch_npu"] == "==2.10.0"
    assert req["python"] == ">=3.10,<3.12" and req["glibc"] == "2.24"
    assert req["requirements_from"].startswith("vllm_ascend-0.20.2rc1.dist-info: METADATA")
    assert "cuda_major" not in req  # no NVIDIA driver finding for an Ascend release


def test_vllm_ascend_0_23_0_post1_set_is_vllm_0_23_0s_parser_with_the_plugin_from_its_sdist():
    """The index holds vllm-ascend 0.23.0.post1 as an sdist only: the set records the sdist's digest, the
    lines of the sdist that name the vLLM release it pairs with, the plugin it could not load, and the
    requirements of the sdist's PKG-INFO; its options are exactly those of the shipped vllm-0.23.0 set."""
    doc = CAT.flagset_doc("vllm-ascend-0.23.0.post1")
    gen = doc["generator"]
    assert gen["release"] == "vllm-ascend==0.23.0.post1 with vllm==0.23.0"
    assert "sdist mode" in gen["method"] and "vllm_ascend-0.23.0.post1.tar.gz sha256 " \
        "a3b9f4a5dd7aa50c37e03d1f35937c4ae5aeacc49b734cac74d59ce5757738e1" in gen["method"]
    assert 'docs/source/conf.py:86: "pip_vllm_version": "0.23.0"' in gen["method"]
    assert "Dockerfile:42: ARG VLLM_TAG=v0.23.0" in gen["method"]
    plugin = doc["plugin"]
    assert plugin["loaded"] is False and "torch_npu" in plugin["error"] and plugin["at"].startswith("vllm_ascend/")
    assert "vllm.platform_plugins:ascend=vllm_ascend:register" in plugin["entry_points"]
    assert doc["option_strings_sha256"] == CAT.flagset_doc("vllm-0.23.0")["option_strings_sha256"]
    req = CAT.release_requirements("vllm-ascend", "0.23.0.post1")["requirements"]
    assert (req["cann"], req["torch"], req["torch_npu"], req["python"]) == ("==9.1.0", "==2.10.0", "==2.10.0.post4",
                                                                         ">=3.10,<3.13")
    assert "glibc" not in req  # no wheel tag to read it from
    assert req["requirements_from"].startswith("vllm_ascend-0.23.0.post1.tar.gz PKG-INFO (copied as ")


def _fake_sdist(tmp_path: Path, conf_pin: str = "0.9.0", docker_pin: str = "v0.9.0") -> Path:
    import tarfile

    root = tmp_path / "src" / "vllm_ascend-9.9.9.post1"
    (root / "vllm_ascend").mkdir(parents=True)
    (root / "vllm_ascend" / "__init__.py").write_text("import torch_npu  # noqa\n")
    meta = ("Metadata-Version: 2.4\nName: vllm_ascend\nVersion: 9.9.9.post1\nRequires-Python: >=3.10\n"
            "Requires-Dist: torch==2.10.0\nRequires-Dist: torch-npu==2.10.0.post4\n\n## Prerequisites\n"
            "- Software:\n    - Python >= 3.10, < 3.13\n    - CANN == 9.1.0 (see ...)\n")
    (root / "PKG-INFO").write_text(meta)
    egg = root / "vllm_ascend.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text(meta)
    (egg / "top_level.txt").write_text("vllm_ascend\n")
    (egg / "entry_points.txt").write_text("[vllm.platform_plugins]\nascend = vllm_ascend:register\n")
    (root / "docs" / "source").mkdir(parents=True)
    (root / "docs" / "source" / "conf.py").write_text(f'x = {{\n    "pip_vllm_version": "{conf_pin}",\n}}\n')
    (root / "Dockerfile").write_text(f"FROM x\nARG VLLM_TAG={docker_pin}\n")
    path = tmp_path / "vllm_ascend-9.9.9.post1.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        tf.add(root, arcname=root.name)
    return path


def _sdist_entry(path: Path, sha: str | None = None) -> dict:
    import hashlib

    return {"filename": path.name, "url": path.as_uri(),
            "hashes": {"sha256": sha or hashlib.sha256(path.read_bytes()).hexdigest()}}


def test_sdist_mode_reads_the_paired_release_from_the_sdist_and_installs_its_plugin_metadata(tmp_path):
    from importlib import metadata

    eng, _ = E.parse_spec("vllm-ascend==9.9.9.post1")
    sd = E.fetch_sdist(eng, "9.9.9.post1", _sdist_entry(_fake_sdist(tmp_path)), tmp_path / "w")
    assert sd.base_version == "0.9.0"
    assert sd.pins == ('docs/source/conf.py:2: "pip_vllm_version": "0.9.0",', "Dockerfile:2: ARG VLLM_TAG=v0.9.0")
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    E.install_sdist_files(sd, venv)
    dist = next(d for d in metadata.distributions(path=[str(site)]) if d.metadata["Name"] == "vllm_ascend")
    assert [(ep.group, ep.name, ep.value) for ep in dist.entry_points] == [
        ("vllm.platform_plugins", "ascend", "vllm_ascend:register")]
    assert (site / "vllm_ascend" / "__init__.py").is_file()
    assert E.sdist_record(venv, "vllm-ascend", "9.9.9.post1")["sha256"] == sd.sha256
    assert E.sdist_record(venv, "vllm-ascend", "9.9.9") is None
    req = E.release_requirements_of(venv, eng, "9.9.9.post1")
    assert req["torch_npu"] == "==2.10.0.post4" and req["cann"] == "==9.1.0" and req["python"] == ">=3.10,<3.13"
    assert req["requirements_from"].startswith("vllm_ascend-9.9.9.post1.tar.gz PKG-INFO (copied as "
                                               "vllm_ascend-9.9.9.post1.dist-info/METADATA): ")


def test_sdist_mode_refuses_a_wrong_digest_and_pins_that_disagree(tmp_path):
    eng, _ = E.parse_spec("vllm-ascend==9.9.9.post1")
    path = _fake_sdist(tmp_path / "a")
    with pytest.raises(E.ExtractError, match="sha256 .* the package index says"):
        E.fetch_sdist(eng, "9.9.9.post1", _sdist_entry(path, "0" * 64), tmp_path / "w1")
    bad = _fake_sdist(tmp_path / "b", docker_pin="v0.8.0")
    with pytest.raises(E.ExtractError, match=r"pairs with is not read .*\['0.8.0', '0.9.0'\]"):
        E.fetch_sdist(eng, "9.9.9.post1", _sdist_entry(bad), tmp_path / "w2")


def test_sdist_mode_only_where_the_index_has_no_wheel(monkeypatch):
    files = [{"filename": "vllm_ascend-1.0.tar.gz", "url": "u", "hashes": {}}]
    monkeypatch.setattr(E, "index_files", lambda dist, version: files)
    assert E.sdist_only("vllm-ascend", "1.0") == files[0]
    files.append({"filename": "vllm_ascend-1.0-cp311-cp311-manylinux_2_24_x86_64.whl", "url": "u", "hashes": {}})
    assert E.sdist_only("vllm-ascend", "1.0") is None
    files.clear()
    with pytest.raises(E.ExtractError, match="lists no file"):
        E.sdist_only("vllm-ascend", "1.0")


def _fake_dist(site: Path, name: str, version: str, meta: str, tag: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(meta)
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")


def test_plugin_requirements_read_from_its_metadata(tmp_path):
    from llmbctl.enginecat.requirements import read_plugin_requirements

    site = tmp_path / "lib" / "python3.11" / "site-packages"
    _fake_dist(site, "vllm_ascend", "9.9.9", "Metadata-Version: 2.4\nName: vllm_ascend\nRequires-Python: >=3.10\n"
               "Requires-Dist: torch==2.10.0\nRequires-Dist: torch-npu==2.10.0\n"
               "Requires-Dist: pytest; extra == 'test'\n\n## Prerequisites\n- Software:\n"
               "    - Python >= 3.10, < 3.12\n    - CANN == 9.0.0 (For Ascend HDK version, see ...)\n",
               "cp311-cp311-manylinux_2_24_x86_64")
    got = read_plugin_requirements(tmp_path, "vllm-ascend", "9.9.9")
    assert got == {"torch": "==2.10.0", "torch_npu": "==2.10.0", "cann": "==9.0.0", "python": ">=3.10,<3.12",
                   "glibc": "2.24", "requirements_from": "vllm_ascend-9.9.9.dist-info: METADATA Requires-Dist "
                   "(torch, torch-npu); the Prerequisites section of its METADATA description (CANN, Python); "
                   "WHEEL tag (glibc)"}
    # without the Prerequisites section: Requires-Python, and no CANN is made up
    other = tmp_path / "o"
    _fake_dist(other / "lib" / "python3.11" / "site-packages", "vllm_ascend", "9.9.9",
               "Name: vllm_ascend\nRequires-Python: >=3.10\nRequires-Dist: torch==2.10.0\n", "py3-none-any")
    got = read_plugin_requirements(other, "vllm-ascend", "9.9.9")
    assert got["python"] == ">=3.10" and "cann" not in got and "glibc" not in got


def test_ktransformers_from_0_5_is_installed_and_walked_as_sglang_kt():
    """0.3.2: the seed's server, source mode only; 0.5+: the package index's ktransformers[sglang],
    walked with SGLang's extractor and launched as `python -m sglang.launch_server`."""
    old, _ = E.parse_spec("ktransformers==0.3.2")
    new, _ = E.parse_spec("ktransformers==0.7.2")
    assert (old.extractor, old.on_index, old.command[-1]) == ("ktransformers", False, "ktransformers.server.main")
    assert (new.extractor, new.on_index, new.command) == ("sglang", True, ("python", "-m", "sglang.launch_server"))
    assert new.install.format(version="0.7.2") == "ktransformers[sglang]==0.7.2"
    doc = CAT.flagset_doc("ktransformers-0.7.2")
    assert doc["command"] == list(new.command) and doc["generator"]["release"] == "ktransformers[sglang]==0.7.2"
    assert {"--kt-weight-path", "--kt-cpuinfer", "--kt-threadpool-count", "--kt-num-gpu-experts",
            "--kt-method"} <= set(doc["flags"])
    assert "kimi_k2" in doc["parsers"]["tool_call"] and "kimi_k2" in doc["parsers"]["reasoning"]


def test_a_release_not_on_the_index_is_refused_before_any_install(tmp_path):
    for spec in ("ktransformers==0.3.2", "tensorrt-llm==1.1.0"):
        eng, version = E.parse_spec(spec)
        with pytest.raises(E.ExtractError, match="--source"):
            E.make_venv(eng, version, tmp_path)
    assert not (tmp_path / "venv").exists()


TOY_KT_ARGS = """import argparse
from ktransformers.server.backend.args import ConfigArgs, default_args
from transformers import AutoConfig


class ArgumentParser:
    def __init__(self, cfg):
        self.cfg = cfg

    def parse_args(self):
        parser = argparse.ArgumentParser(prog="kvcache.ai")
        parser.add_argument("--port", type=int, default=self.cfg.server_port)
        parser.add_argument("--gguf_path", type=str, default=self.cfg.gguf_path)
        parser.add_argument("--cpu_infer", type=int, default=self.cfg.cpu_infer)
        return parser.parse_args()
"""


def _toy_kt_tree(root: Path) -> Path:
    server = root / "ktransformers" / "server"
    server.mkdir(parents=True)
    (server / "args.py").write_text(TOY_KT_ARGS)
    return root


def test_ktransformers_source_tree_walked_and_checked_with_its_own_argparse_parser(tmp_path, monkeypatch):
    """The KTransformers tree (no index wheel): extract --source DIR writes the set naming the commit,
    and the check parses planned argv with that argparse parser (not a click command)."""
    tree = _toy_kt_tree(tmp_path / "src")
    venv = Path(sys.prefix)
    out = tmp_path / "out"
    monkeypatch.delenv("LLMB_ENGINE_SOURCE", raising=False)
    path = E.extract("ktransformers==0.3.9", out, log=lambda m: None, venv=venv, source=tree,
                     source_ref="kvcache-ai/ktransformers@0123456789abcdef0123456789abcdef01234567:ktransformers/server")
    doc = _doc_text(path)
    assert sorted(doc["flags"]) == ["--cpu_infer", "--gguf_path", "--port"]
    assert doc["generator"]["release"].startswith("kvcache-ai/ktransformers@0123456789abcdef")
    assert "--source <dir> --source-ref kvcache-ai/ktransformers@0123456789abcdef" in path.read_text().splitlines()[1]
    cases = [{"id": "ok", "args": ["--gguf_path", "/m", "--cpu_infer", "60"]}, {"id": "bad", "args": ["--nope", "1"]}]
    got = {r["id"]: r for r in E.run_in_venv(venv, ["check", "ktransformers"], stdin=json.dumps(cases), source=tree)}
    assert got["ok"]["ok"] is True
    assert got["bad"]["ok"] is False and "--nope" in got["bad"]["error"]
    # the older spelling, LLMB_ENGINE_SOURCE=<tree>, reaches the walk too (it used to be dropped)
    monkeypatch.setenv("LLMB_ENGINE_SOURCE", str(tree))
    again = E.extract("ktransformers==0.3.9", out, log=lambda m: None, venv=venv,
                      source_ref="kvcache-ai/ktransformers@0123456789abcdef0123456789abcdef01234567:ktransformers/server")
    assert again.read_text() == path.read_text()


def test_shipped_ktransformers_set_names_the_commit_of_its_tag():
    text = (DATA / "engines" / "ktransformers-0.3.2.yml").read_text()
    head = " ".join(ln[2:] for ln in text.splitlines() if ln.startswith("#"))
    assert "--source-ref kvcache-ai/ktransformers@495ae374780bff7aeb4c5742b8a6a13ec1eca221" in head
    assert "v0.3.2" in head


def test_sglang_default_is_0_5_23_and_deepep_is_its_moe_a2a_backend():
    """SGLang's default release (the newest shipped) is 0.5.23; the recipes' --enable-deepep-moe,
    which 0.5.23's parser lacks, is planned as --moe-a2a-backend deepep, a choice of that parser."""
    assert CAT.newest_version("sglang") == "0.5.23"
    doc = CAT.flagset_doc("sglang-0.5.23")
    assert "--enable-deepep-moe" not in option_strings(doc)
    assert "deepep" in doc["flags"]["--moe-a2a-backend"]["choices"]
    ea = EngineArgs(CAT.flagset("sglang", "0.5.23"))
    ea.apply_argv(["--enable-deepep-moe"], "recipe", {})
    assert not ea.problems and ea.argv() == ["--moe-a2a-backend", "deepep"]


def test_pd_router_argv_is_a_case_for_the_router_release_its_service_installs():
    """The SGLang PD router (hand/sglang.yml pd_router: sglang-router==0.3.2) is checked by the router's
    own parser: make engine-check makes its argv a case of the pinned router release, whose set
    (walked from sglang_router.launch_router's parse_router_args) has every option the plan writes; its
    successor smg 1.13.0 has them too."""
    from llmbctl.enginecat.check import planned_cases
    from llmbctl.engines.registry import load_flagset

    cases, _ = planned_cases(REPO, [REPO / "inventories" / "h200-1p1d"])
    routers = [c for c in cases if c.engine == "sglang-router"]
    assert {c.version for c in routers} == {"0.3.2"} and len(routers) == len(CAT.flagset_versions("sglang"))
    assert not [c for c in cases if c.engine == "sglang" and "--pd-disaggregation" in c.args]
    for name in ("sglang-router-0.3.2", "smg-1.13.0"):
        doc = CAT.flagset_doc(name)
        assert doc["command"][-1].endswith(".launch_router")
        fs = load_flagset(CAT, doc["engine"], doc["version"])
        for c in routers:
            flags = [a for a in c.args if a.startswith("--")]
            assert flags and all(fs.resolve(a) for a in flags), (name, flags)
        assert fs.flags["--prefill"]["type"] == "list"  # URL [BOOTSTRAP_PORT]
