"""KTransformers (engines/ktransformers.py): seed 004's two command lines through scripts/launch-plan,
the AMX rules only where the node's CPU has AMX (lscpu flags of the real captures), one node only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llmb.hw.host import parse_lscpu
from llmbctl.catalog import Catalog
from llmbctl.hw.facts import build_facts
from llmbctl.planner import plan_inventory
from llmbctl.planner.model import PlanError
from planner_helpers import REPO, canonical_pairs, flagset_of, load_inventory, recipe_tokens, service

SCRIPT = REPO / "scripts" / "launch-plan"
FIXTURES = Path(os.environ.get("LLMB_FIXTURES", REPO.parent / "shared" / "fixtures"))
# seed 004 "KTransformers Deployment", quoted
SEED_004_KT = "python ktransformers/server/main.py  --model_path /path/to/K2 --gguf_path /path/to/K2 --cache_lens 30000"
SEED_004_KT_AMX = SEED_004_KT + (
    " --optimize_config_path ktransformers/optimize/optimize_rules/DeepSeek-V3-Chat-fp8-linear-ggml-experts-serve-amx.yaml"
)
VENV = "/opt/llmb/venvs/ktransformers-0.3.2"
RULES = f"{VENV}/lib/python3.11/site-packages/ktransformers/optimize/optimize_rules/"
EXTRAS = {"--model_name", "--host", "--port"}  # the planner's own: served name, bind address, port


def plan_of(inv: Path) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), "-i", str(inv), "--format", "json"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (host,) = json.loads(proc.stdout)
    return service(host, "llmb-ktransformers")


def assert_recipe(data, argv: list[str], recipe: str) -> None:
    fs = flagset_of(data, "ktransformers", "0.3.2")
    tokens = recipe_tokens(recipe, {"/path/to/K2": "/data/models/K2",
                                    "ktransformers/optimize/optimize_rules/": RULES})
    assert tokens[:2] == ["python", "ktransformers/server/main.py"]
    assert argv[:3] == [f"{VENV}/bin/python", "-m", "ktransformers.server.main"]
    want, _ = canonical_pairs(fs, tokens[2:])
    got, _ = canonical_pairs(fs, argv[3:])
    assert [p for p in want if p not in got] == []
    assert {p[0] for p in got if p not in want} <= EXTRAS, got


def test_seed_004_command_without_amx(data):
    svc = plan_of(REPO / "inventories" / "ktransformers")
    assert_recipe(data, svc["argv"], SEED_004_KT)
    assert "--optimize_config_path" not in svc["argv"]
    assert svc["health"]["url"].endswith(":8000/v1/models") and svc["api"]["base_url"].endswith(":8000/v1")


def test_seed_004_amx_command_where_the_node_has_amx(data, tmp_path):
    inv = tmp_path / "kt"
    shutil.copytree(REPO / "inventories" / "ktransformers", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["accel_nodes"]["hosts"]["kt-h200-01"]["llmb_cpu_amx"] = True
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    svc = plan_of(inv)
    assert_recipe(data, svc["argv"], SEED_004_KT_AMX)


@pytest.mark.parametrize("capture,amx", [
    ("real/h100/lscpu.txt", True),
    ("real/h200x2/lscpu.txt", True),
    ("public/lscpu/kunpeng920-4socket-8numa-a3-vllm-ascend-3002.txt", False),
    ("public/lscpu/xeon8480-kvm-vm-208vcpu-h100-dstack.txt", False),  # the VM hides AMX from its guest
])
def test_amx_from_the_real_lscpu_captures(capture, amx):
    path = FIXTURES / capture
    if not path.exists():
        pytest.skip(f"{path} not here")
    assert parse_lscpu(path.read_text())["amx"] is amx
    probe = {"name": "lscpu", "kind": "lscpu", "cmd": "lscpu", "rc": 0, "stdout": path.read_text(), "stderr": ""}
    assert build_facts([probe])["cpu_amx"] is amx


def _plan_with(accel=None, **host_vars):
    hv, groups = load_inventory("ktransformers")
    for vars_ in hv.values():
        vars_.update(host_vars)
        if accel is not None:
            vars_["llmb_accel"] = accel
    return plan_inventory(hv, groups, str(REPO / "data"))


def test_amx_rules_follow_the_verify_facts():
    (host,) = _plan_with(accel={"cpu_amx": True}).to_list()
    argv = service(host, "llmb-ktransformers")["argv"]
    assert argv[argv.index("--optimize_config_path") + 1].endswith("DeepSeek-V3-Chat-fp8-linear-ggml-experts-serve-amx.yaml")
    planned = _plan_with(accel={"cpu_amx": False})
    (host,) = planned.to_list()
    assert "--optimize_config_path" not in service(host, "llmb-ktransformers")["argv"]
    assert any("has no AMX" in n for n in planned.notes)
    # the inventory says no AMX: the facts do not override it
    (host,) = _plan_with(accel={"cpu_amx": True}, llmb_cpu_amx=False).to_list()
    assert "--optimize_config_path" not in service(host, "llmb-ktransformers")["argv"]


def test_bad_inputs_refused():
    with pytest.raises(PlanError) as err:
        _plan_with(llmb_cpu_amx="perhaps")
    assert any("llmb_cpu_amx" in p.message for p in err.value.problems)
    with pytest.raises(PlanError) as err:
        _plan_with(llmb_engine_args={"cache_lens": 30000, "optimize_config_path": "/tmp/x.yaml"})
    assert [p.check for p in err.value.problems] == ["engine-flag-owned"]
    hv, groups = load_inventory("ktransformers")
    hv["kt-h200-02"] = dict(hv["kt-h200-01"], ansible_host="10.0.5.12")
    groups["accel_nodes"].append("kt-h200-02")
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(REPO / "data"))
    assert any("KTransformers runs on one node" in p.message for p in err.value.problems)


# --------------------------------------------------------------------------- 0.7.2: under SGLang's server

KT_ARGS = {"kt-cpuinfer": 96, "kt-num-gpu-experts": 8, "kt-method": "RAWINT4", "kt-threadpool-count": 2}


def _kt_072(args: dict | None) -> list[dict]:
    hv, groups = load_inventory("ktransformers")
    for v in hv.values():
        v["llmb_engine_version"] = "0.7.2"
        if args is not None:
            v["llmb_engine_args"] = dict(args)
    return plan_inventory(hv, groups, str(REPO / "data"), source="test").to_list()


def test_kt_0_7_2_is_an_sglang_service_with_the_kt_options_of_its_own_parser():
    """KTransformers 0.7.2 (its generated set: sglang-kt's `python -m sglang.launch_server`) plans an
    SGLang server: the model folder is also the CPU experts' weights (RAWINT4), TP over the node's
    GPUs, the --kt-* values given; none of the seed's server/main.py options."""
    (host,) = _kt_072(KT_ARGS)
    svc = service(host, "llmb-ktransformers")
    argv = svc["argv"]
    assert argv[:3] == ["/opt/llmb/venvs/ktransformers-0.7.2/bin/python", "-m", "sglang.launch_server"]
    fs = flagset_of(Catalog(REPO / "data"), "ktransformers", "0.7.2")
    pairs, positionals = canonical_pairs(fs, argv[3:])
    got = dict(pairs)
    assert not positionals
    model = host["model"]["dir"]
    assert got["--model-path"] == model and got["--kt-weight-path"] == model
    assert got["--tp-size"] == 8
    assert (got["--kt-cpuinfer"], got["--kt-num-gpu-experts"], got["--kt-method"]) == (96, 8, "RAWINT4")
    assert not {"--model_path", "--gguf_path", "--optimize_config_path", "--cache_lens"} & set(argv)
    assert svc["health"]["path"] == "/health"
    assert svc["packages"] == ["ktransformers==0.7.2", "kt-kernel==0.7.2", "sglang-kt==0.7.2"]


def test_kt_0_7_2_without_the_cpu_expert_options_is_refused_naming_them():
    with pytest.raises(PlanError) as err:
        _kt_072(None)
    found = {p.message.split(" needs ")[1].split(":")[0] for p in err.value.problems if " needs --kt-" in p.message}
    assert found == {"--kt-cpuinfer", "--kt-num-gpu-experts"}
    assert all("llmb_engine_args" in p.fix for p in err.value.problems if " needs --kt-" in p.message)


def test_kt_0_7_2_refuses_the_seed_servers_options():
    args = dict(KT_ARGS, cache_lens=30000)
    with pytest.raises(PlanError) as err:
        _kt_072(args)
    assert any(p.check == "engine-flag-unknown" and "--cache_lens" in p.message for p in err.value.problems)
