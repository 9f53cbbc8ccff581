"""Prefill/decode disaggregation (planner/disagg.py, engines/sglang.py pd_*): seed 004's 4P12D golden
through scripts/launch-plan, the 1P1D sample, the router of the release, and the stage-0 refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from llmbctl.catalog import Catalog
from llmbctl.planner import plan_inventory
from llmbctl.planner.engines import sglang
from llmbctl.planner.model import PlanError
from planner_helpers import REPO, canonical_pairs, flagset_of, load_inventory, recipe_tokens, service

SCRIPT = REPO / "scripts" / "launch-plan"
SEED_004 = Path(os.environ.get("LLMB_SEEDS", REPO.parent / "shared" / "seeds")) / "004_d57e3f74c4f6f619.txt"

# seed 004 "Data Parallelism + Expert Parallelism" (4P12D H200), quoted; read from the seed when present
PREFILL_ENV = (
    "MC_TE_METRIC=true SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL=10000000 "
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=100000 SGLANG_DISAGGREGATION_WAITING_TIMEOUT=100000 PYTHONUNBUFFERED=1"
)
PREFILL = (
    "python -m sglang.launch_server --model-path $MODEL_PATH --trust-remote-code --disaggregation-mode prefill "
    "--dist-init-addr $PREFILL_NODE0$:5757 --tp-size 32 --dp-size 32 --enable-dp-attention --host $LOCAL_IP "
    "--decode-log-interval 1 --disable-radix-cache --enable-deepep-moe --moe-dense-tp-size 1 --enable-dp-lm-head "
    "--disable-shared-experts-fusion --watchdog-timeout 1000000 --enable-two-batch-overlap "
    "--disaggregation-ib-device $IB_DEVICE --chunked-prefill-size 131072 --mem-fraction-static 0.85 "
    "--deepep-mode normal --ep-dispatch-algorithm dynamic --eplb-algorithm deepseek --max-running-requests 1024 "
    "--nnodes 4 --node-rank $RANK --tool-call-parser kimi_k2"
)
DECODE_ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=480 " + PREFILL_ENV
DECODE = (
    "python -m sglang.launch_server --model-path $MODEL_PATH --trust-remote-code --disaggregation-mode decode "
    "--dist-init-addr $DECODE_NODE0:5757 --tp-size 96 --dp-size 96 --enable-dp-attention --host $LOCAL_IP "
    "--decode-log-interval 1 --context-length 2176 --disable-radix-cache --enable-deepep-moe --moe-dense-tp-size 1 "
    "--enable-dp-lm-head --disable-shared-experts-fusion --watchdog-timeout 1000000 --enable-two-batch-overlap "
    "--disaggregation-ib-device $IB_DEVICE  --deepep-mode low_latency --mem-fraction-static 0.8 --cuda-graph-bs 480 "
    "--max-running-requests 46080 --ep-num-redundant-experts 96 --nnodes 12 --node-rank $RANK --tool-call-parser kimi_k2"
)
PDLB = "python -m sglang.srt.disaggregation.launch_lb --prefill http://${PREFILL_NODE0}:30000 --decode http://${DECODE_NODE0}:30000"
IB = "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"
# what the plan adds to the recipe's command: the served name and SGLang's default port, said explicitly
PLANNER_EXTRAS = {("--served-model-name", "moonshotai/Kimi-K2-Instruct"), ("--port", "30000")}


def test_the_quoted_recipe_is_seed_004s():
    if not SEED_004.exists():
        pytest.skip(f"{SEED_004} not here")
    text = " ".join(SEED_004.read_text().replace("\\\n", " ").split())
    for line in (PREFILL_ENV, PREFILL, DECODE_ENV, " ".join(DECODE.split()), PDLB):
        assert line in text, line


def launch_plan(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def plan_4p12d() -> dict[str, dict]:
    proc = launch_plan("-i", "inventories/h200-4p12d", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {h["host"]: h for h in json.loads(proc.stdout)}


def translated(fs, tokens: list[str]) -> list[str]:
    """A switch the release turned into a choice (data/engines/hand: renamed with a value) as its successor."""
    out: list[str] = []
    for tok in tokens:
        rec = fs.rename_of(tok) if tok.startswith("--") else None
        out += [rec[1]["to"], str(rec[1]["value"])] if rec and "value" in rec[1] else [tok]
    return out


def env_pairs(text: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in text.split())


@pytest.mark.parametrize("role,recipe,env,count,head", [
    ("prefill", PREFILL, PREFILL_ENV, 4, "h200-p00"),
    ("decode", DECODE, DECODE_ENV, 12, "h200-d00"),
])
def test_4p12d_reproduces_seed_004_per_node(plan_4p12d, data, role, recipe, env, count, head):
    fs = flagset_of(data, "sglang", "0.5.5")
    prefix = "h200-p" if role == "prefill" else "h200-d"
    hosts = [h for h in plan_4p12d.values() if h["host"].startswith(prefix)]
    assert len(hosts) == count
    head_addr = plan_4p12d[head]["address"]
    for rank, hp in enumerate(sorted(hosts, key=lambda h: h["host"])):
        svc = service(hp, f"llmb-sglang-{role}")
        assert svc["argv"][:3] == ["/opt/llmb/venvs/sglang-0.5.5/bin/python", "-m", "sglang.launch_server"]
        subst = {"$MODEL_PATH": "/data/models/Kimi-K2-Instruct", "$PREFILL_NODE0$": head_addr,
                 "$DECODE_NODE0": head_addr, "$LOCAL_IP": hp["address"], "$IB_DEVICE": IB, "$RANK": str(rank)}
        want, _ = canonical_pairs(fs, translated(fs, recipe_tokens(recipe, subst)[3:]))
        got, _ = canonical_pairs(fs, svc["argv"][3:])
        missing = [p for p in want if p not in got]
        assert not missing, f"{hp['host']}: recipe flags missing: {missing}"
        extra = [p for p in got if p not in want and (p[0], str(p[1])) not in PLANNER_EXTRAS]
        assert not extra, f"{hp['host']}: flags beyond the recipe: {extra}"
        # --enable-deepep-moe is rejected by 0.5.5: it is written as its successor
        assert "--enable-deepep-moe" not in svc["argv"]
        i = svc["argv"].index("--moe-a2a-backend")
        assert svc["argv"][i + 1] == "deepep"
        for key, value in env_pairs(env).items():
            assert svc["env"].get(key) == value, (hp["host"], key)
        assert (svc["order"] == 10) == (rank == 0)
        assert svc["api"] is None  # clients use the router
        if rank == 0:
            assert svc["health"]["url"] == f"http://{head_addr}:30000/health"
            assert svc["ready"] == {"type": "tcp", "host": head_addr, "port": 5757, "timeout_s": 300}
        else:
            assert svc["depends_on"] == [f"{head}/llmb-sglang-{role}"] and svc["health"] is None


def test_4p12d_router_is_the_releases_own_after_both_groups(plan_4p12d):
    p0, d0 = plan_4p12d["h200-p00"], plan_4p12d["h200-d00"]
    router = service(p0, "llmb-sglang-router")
    # seed 004's launch_lb, for SGLang 0.5.5: the sglang-router package's PD mode, same prefill/decode URLs
    assert router["argv"] == [
        "/opt/llmb/venvs/sglang-0.5.5/bin/python", "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", f"http://{p0['address']}:30000", "8998", "--decode", f"http://{d0['address']}:30000",
        "--host", "0.0.0.0", "--port", "8000",
    ]
    assert router["order"] > max(s["order"] for h in plan_4p12d.values() for s in h["services"]
                                 if s["name"] != "llmb-sglang-router")
    assert router["depends_on"] == ["h200-p00/llmb-sglang-prefill", "h200-d00/llmb-sglang-decode"]
    assert [h["url"] for h in router["after_healthy"]] == [
        f"http://{p0['address']}:30000/health", f"http://{d0['address']}:30000/health"]
    apis = [s["api"] for h in plan_4p12d.values() for s in h["services"] if s["api"]]
    assert apis == [router["api"]] and router["api"]["base_url"] == f"http://{p0['address']}:8000/v1"
    assert {"port": 8998, "purpose": "disaggregation-bootstrap"} in service(p0, "llmb-sglang-prefill")["ports"]


def test_plans_without_disaggregation_have_no_after_healthy_key(planned):
    for hp in planned("h200-sglang").to_list():
        for svc in hp["services"]:
            assert "after_healthy" not in svc


def test_router_rule_is_chosen_by_release(data):
    def rule(version):
        return sglang.router_rule(SimpleNamespace(data=data, engine="sglang", version=version))

    assert rule("0.4.9")["module"] == "sglang.srt.disaggregation.launch_lb"
    assert rule("0.5.5")["module"] == "sglang_router.launch_router"
    assert rule("0.5.23")["package"] == "sglang-router==0.3.2"


def test_1p1d_sample(planned):
    hosts = {h["host"]: h for h in planned("h200-1p1d").to_list()}
    p, d = service(hosts["gpu-h200-01"], "llmb-sglang-prefill"), service(hosts["gpu-h200-02"], "llmb-sglang-decode")
    assert p["argv"][p["argv"].index("--disaggregation-mode") + 1] == "prefill"
    assert d["argv"][d["argv"].index("--disaggregation-mode") + 1] == "decode"
    for svc in (p, d):
        assert "--nnodes" not in svc["argv"] and "--dist-init-addr" not in svc["argv"]
        assert svc["argv"][svc["argv"].index("--disaggregation-ib-device") + 1] == "mlx5_0"
    router = service(hosts["gpu-h200-01"], "llmb-sglang-router")
    assert router["argv"][1:4] == ["-m", "sglang_router.launch_router", "--pd-disaggregation"]


def test_packages_each_host_runs_come_from_the_catalog():
    """The router's package on the router host, the transfer library of the backend on every group
    node (the release's default backend, or the inventory's); none in a container (the image has them)."""
    from llmbctl import deployment as D

    data = Catalog(REPO / "data")
    router_pkg = sglang.router_rule(SimpleNamespace(data=data, engine="sglang", version="0.5.23"))["package"]
    moon = data.engine_overlay("sglang")["transfer_packages"]["mooncake"]
    nixl = data.engine_overlay("sglang")["transfer_packages"]["nixl"]
    doc = D.resolve(*load_inventory("h200-1p1d"))
    assert doc["hosts"]["gpu-h200-01"]["packages"] == [moon, router_pkg]
    assert doc["hosts"]["gpu-h200-02"]["packages"] == [moon]
    router = service(doc["hosts"]["gpu-h200-01"]["plan"], "llmb-sglang-router")
    assert router["packages"] == [router_pkg] and router_pkg == "sglang-router==0.3.2"

    hv, groups = load_inventory("h200-1p1d")
    for v in hv.values():
        v["llmb_disaggregation"] = dict(v["llmb_disaggregation"], transfer_backend="nixl")
    assert D.resolve(hv, groups)["hosts"]["gpu-h200-02"]["packages"] == [nixl]
    hv, groups = load_inventory("h200-1p1d")
    for v in hv.values():
        v["llmb_install"] = "container"
    doc = D.resolve(hv, groups)
    assert doc["planned"] and all(h["packages"] == [] for h in doc["hosts"].values())


# --------------------------------------------------------------------------- refused in stage 0
def plan_with(name: str, change) -> list:
    hv, groups = load_inventory(name)
    for host, vars_ in hv.items():
        change(host, vars_)
    try:
        plan_inventory(hv, groups, str(REPO / "data"))
    except PlanError as err:
        return err.problems
    return []


def _set(path: str, value):
    def change(host, hv):
        cur = hv["llmb_disaggregation"]
        keys = path.split(".")
        for k in keys[:-1]:
            cur = cur[k]
        if value is None:
            cur.pop(keys[-1], None)
        else:
            cur[keys[-1]] = value
    return change


def test_a_node_without_ib_device_is_refused_naming_host_and_group():
    def change(host, hv):
        hv["llmb_disaggregation"].pop("ib_device", None)
        if host != "h200-d05":
            hv["llmb_ib_device"] = "mlx5_0"
    problems = plan_with("h200-4p12d", change)
    assert [(p.check, p.host) for p in problems] == [("ib-device", "h200-d05")]
    assert "decode node h200-d05 (group 'decode_nodes')" in problems[0].message
    assert "llmb_ib_device" in problems[0].fix


def test_ib_device_from_verify_facts_and_checked_against_them():
    def change(host, hv):
        hv["llmb_disaggregation"].pop("ib_device", None)
        hv["llmb_accel"] = {"rdma_devices": ["mlx5_2", "mlx5_3"]}
    hv, groups = load_inventory("h200-4p12d")
    for host, vars_ in hv.items():
        change(host, vars_)
    hosts = {h["host"]: h for h in plan_inventory(hv, groups, str(REPO / "data")).to_list()}
    argv = service(hosts["h200-d03"], "llmb-sglang-decode")["argv"]
    assert argv[argv.index("--disaggregation-ib-device") + 1] == "mlx5_2,mlx5_3"

    def wrong(host, hv):
        change(host, hv)
        if host == "h200-p01":
            hv["llmb_ib_device"] = "mlx5_9"
    problems = plan_with("h200-4p12d", wrong)
    assert [(p.check, p.host) for p in problems] == [("ib-device", "h200-p01")]
    assert "mlx5_9" in problems[0].message


@pytest.mark.parametrize("path,value,needle", [
    ("decode.tensor_parallel", 64, "TP 64 (DP 96 is DP attention inside it) = 64 devices do not fill its 12"),
    ("prefill.tensor_parallel", 64, "prefill group 'prefill_nodes'"),
    ("decode.data_parallel", 7, "DP 7 does not divide TP 96"),
])
def test_tp_dp_not_matching_a_group_is_refused(path, value, needle):
    problems = plan_with("h200-4p12d", _set(path, value))
    assert problems and all(p.check == "parallelism" for p in problems), [p.format() for p in problems]
    assert any(needle in p.message for p in problems), [p.message for p in problems]


def test_without_dp_attention_tp_times_dp_counts():
    def change(host, hv):
        hv["llmb_engine_args"].pop("enable-dp-attention")
    problems = plan_with("h200-4p12d", change)
    assert any("TP x DP = 32 x 32 = 1024 devices" in p.message for p in problems)


@pytest.mark.parametrize("path,value,variable", [
    ("decode.tensor_parallel", "96", "llmb_disaggregation.decode.tensor_parallel"),
    ("prefill.memory_fraction", 1.5, "llmb_disaggregation.prefill.memory_fraction"),
    ("router.port", 0, "llmb_disaggregation.router.port"),
    ("decode.tensr_parallel", 8, "llmb_disaggregation.decode.tensr_parallel"),
    ("ib_device", "mlx5_0 mlx5_1", "llmb_disaggregation.ib_device"),
    ("decode.engine_env", {"BAD KEY": 1}, "llmb_disaggregation.decode.engine_env"),
])
def test_bad_values_name_the_variable(path, value, variable):
    problems = plan_with("h200-4p12d", _set(path, value))
    assert problems and any(variable in p.message for p in problems), [p.format() for p in problems]


def test_group_flags_are_checked_against_the_release():
    problems = plan_with("h200-4p12d", _set("decode.engine_args", {"cuda-graph-bss": [480]}))
    assert [p.check for p in problems] == ["engine-flag-unknown"]
    assert "llmb_disaggregation.decode.engine_args" in problems[0].found


def test_hosts_outside_or_in_both_groups_and_a_foreign_router_host():
    hv, groups = load_inventory("h200-4p12d")
    groups["decode_nodes"] = groups["decode_nodes"] + ["h200-p03"]
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, str(REPO / "data"))
    assert any("h200-p03 is in both the prefill and the decode group" in p.message for p in err.value.problems)
    problems = plan_with("h200-4p12d", _set("router.host", "elsewhere"))
    assert [p.check for p in problems] == ["disaggregation"] and "router.host" in problems[0].message


def test_ports_distinct_per_host():
    problems = plan_with("h200-4p12d", _set("router.port", 30000))
    assert [(p.check, p.host) for p in problems] == [("ports", "h200-p00")]


def test_bad_inventory_exits_2_through_the_script(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(REPO / "inventories" / "h200-4p12d", inv)
    serve = inv / "group_vars" / "all" / "serve.yml"
    doc = yaml.safe_load(serve.read_text())
    doc["llmb_disaggregation"].pop("ib_device")
    doc["llmb_disaggregation"]["decode"]["tensor_parallel"] = 64
    serve.write_text(yaml.safe_dump(doc))
    proc = launch_plan("-i", str(inv), "--check")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out
    assert "[parallelism]" in out and "decode group 'decode_nodes'" in out
    assert "[ib-device] (host h200-p00)" in out


def test_catalog_overlay_with_pd_router_loads(data: Catalog):
    assert data.engine_overlay("sglang")["pd_router"]


def test_verify_facts_of_another_inventorys_host_of_the_same_name_are_not_read():
    """Ansible's fact cache is keyed by host name: a node2 verified under another inventory on this
    controller (its ibstat showing no active port) must not refuse this inventory's plan."""
    def planted(inventory_dir):
        def change(host, hv):
            hv["inventory_dir"] = "/srv/clusters/this"
            hv["llmb_accel"] = {"rdma_devices": [], "inventory_dir": inventory_dir}
        return change
    assert plan_with("h200-4p12d", planted("/srv/clusters/this"))  # its own facts: refused (no active port)
    assert plan_with("h200-4p12d", planted("/srv/clusters/other")) == []
