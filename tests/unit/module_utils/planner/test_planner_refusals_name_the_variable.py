"""Issue 26 point 7: every refusal of stage 0 names the inventory variable to change and, where the valid
values are a finite set, lists them. One case per refusal class (the ``[check]`` id the planner
emits), each from a sample inventory with the shape a new user would write; the ids of the code are
all covered here or exempted with the reason (test_every_check_id_of_the_code_is_swept)."""

from __future__ import annotations

import ast
import re

import pytest
from llmbctl.planner import PlanError, plan_inventory
from planner_helpers import REPO, load_inventory

DATA = str(REPO / "data")
VARIABLE = re.compile(r"\b(llmb_[a-z0-9_]+|serve_smoke_image)")
# the refusals whose "variable" is the inventory's group of accelerator nodes (hosts.yml)
GROUP_NAMED = {"hosts"}


def refused(name: str, change) -> list:
    """The problems of inventories/<name> after ``change`` (a dict set on every host, or a callable
    of (hostvars, groups))."""
    hv, groups = load_inventory(name)
    if callable(change):
        change(hv, groups)
    else:
        for v in hv.values():
            v.update(change)
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA)
    return err.value.problems


def on_host(host: str, **values):
    def change(hv, groups):
        hv[host].update(values)
    return change


def pd(path: str, value):
    def change(hv, groups):
        for v in hv.values():
            cur = v["llmb_disaggregation"]
            keys = path.split(".")
            for k in keys[:-1]:
                cur = cur.setdefault(k, {})
            if value is None:
                cur.pop(keys[-1], None)
            else:
                cur[keys[-1]] = value
    return change


def no_accel_nodes(hv, groups):
    groups["accel_nodes"] = []


def no_ib(hv, groups):
    for v in hv.values():
        v["llmb_disaggregation"].pop("ib_device", None)
        v.pop("llmb_ib_device", None)


# (inventory, change, check id, what the text must list where the valid set is finite)
CASES = {
    "required": ("h100", lambda hv, g: [v.pop("llmb_model") for v in hv.values()], "required",
                 ["kimi-k2-instruct", "kimi-k2-thinking"]),
    "type": ("h800", {"llmb_pipeline_parallel": "two"}, "type", []),
    "range": ("h100", {"llmb_api_port": 70000}, "range", []),
    "choice": ("h100", {"llmb_install": "baremetal"}, "choice", ["host", "container"]),
    "format": ("h100", {"llmb_model_dir": "models/kimi"}, "format", []),
    "characters": ("h100", {"llmb_served_model_name": "kimi\nk2"}, "characters", []),
    "unknown-variable": ("h100", {"llmb_tensor_paralel": 8}, "unknown-variable", ["llmb_tensor_parallel"]),
    "consistency": ("h800", on_host("gpu-h800-02", llmb_engine_version="0.23.0"), "consistency", []),
    "hosts": ("h100", no_accel_nodes, "hosts", []),
    "head": ("h800", {"llmb_head": "gpu-9"}, "head", ["gpu-h800-01", "gpu-h800-02"]),
    "addresses": ("h800", on_host("gpu-h800-02", llmb_node_ip="192.168.100.11"), None, []),
    "network": ("h800", {"llmb_cluster_iface": None}, "network", []),
    "engine-version": ("h100", {"llmb_engine_version": "0.99.9"}, "engine-version", ["0.19.1", "0.23.0"]),
    "model": ("h100", {"llmb_model": "kimi-k9"}, None, ["kimi-k2-instruct", "kimi-k2-thinking"]),
    "platform": ("h100", {"llmb_platform": "h900-hgx8"}, None, ["h100-hgx8", "h200-hgx8"]),
    "preset": ("h100", {"llmb_preset": "fastest"}, None, ["long-context", "low-latency"]),
    "engine-platform": ("h100", {"llmb_engine": "vllm-ascend", "llmb_install": "container",
                                 "llmb_engine_version": None}, "engine-platform", []),
    "install": ("ktransformers", {"llmb_install": "container"}, "install", ["host"]),
    "container": ("mi300x", {"llmb_container_nvidia_gpus": "cdi"}, "container", []),
    "container-mounts": ("mi300x", {"llmb_container_mounts": ["/data"]}, "container", []),
    "engine-flag-unknown": ("h100", {"llmb_engine_args": {"no-such-flag": 1}}, "engine-flag-unknown", []),
    "engine-flag-owned": ("h100", {"llmb_engine_args": {"tensor-parallel-size": 8}}, "engine-flag-owned", []),
    "engine-flag-value": ("h200-sglang", {"llmb_engine_args": {"reasoning-parser": "kimi_k3"}},
                          "engine-flag-value", ["kimi_k2"]),
    "engine-parser": ("h100", {"llmb_engine_args": {"reasoning-parser": "kimi_k3"}}, "engine-parser", ["kimi_k2"]),
    "model-limit": ("h100", {"llmb_engine_args": {"max-model-len": 300000}}, "model-limit", []),
    "model-limit-heads": ("a3", {"llmb_tensor_parallel": 12}, "model-limit", []),
    "memory-fit": ("h100", {"llmb_engine_args": {"gpu-memory-utilization": 0.3}}, "memory-fit", []),
    "parallelism": ("h100", {"llmb_tensor_parallel": 16}, "parallelism", []),
    "parallelism-dcp": ("h100", {"llmb_decode_context_parallel": 3}, "parallelism", []),
    "pd-parallelism": ("h200-1p1d", pd("decode.tensor_parallel", 16), "parallelism", []),
    "pd-idle": ("h200-1p1d", lambda hv, g: g.__setitem__("decode_nodes", []), "disaggregation", []),
    "pd-instances": ("h200-1p1d", pd("prefill.instances", 2), "disaggregation", ["1"]),
    "ports": ("h800", {"llmb_ray_dashboard_port": 8000}, "ports", []),
    "exposure": ("ktransformers", {"llmb_api_key": "k"}, "exposure", []),
    "disaggregation": ("h200-1p1d", pd("router.host", "gw-1"), "disaggregation", ["gpu-h200-01", "gpu-h200-02"]),
    "ib-device": ("h200-1p1d", no_ib, "ib-device", []),
    "document-owned": ("h100", {"engine_host_version": "0.19.1"}, "document-owned", []),
    "engine-flag-removed": ("h100", {"llmb_engine_args": {"enable-reasoning": True}}, "engine-flag-removed", []),
    "engine-args-syntax": ("h100", {"llmb_engine_extra_args": ["8"]}, "engine-args-syntax", []),
    "pd-required": ("h200-1p1d", pd("decode", None), "required", []),
    "pd-type": ("h200-1p1d", pd("router", "gw-1"), "type", ["host", "port"]),
    "pd-unknown-key": ("h200-1p1d", pd("decode.tensr_parallel", 8), "unknown-variable", ["tensor_parallel"]),
    "pd-choice-role": ("h200-1p1d", pd("prefill.group", "decode_nodes"), "disaggregation", []),
    # issue 24: a model the release cannot run; an image smoke test on a text model (a stage variable)
    "model-engine": ("h200", {"llmb_model": "kimi-k3", "llmb_engine_version": "0.26.0"}, "model-engine",
                     ["0.32.0", "0.33.0"]),
    "modality": ("h200", {"serve_smoke_image": "always"}, "modality", ["auto", "never"]),
}
# checks whose case is elsewhere, or that are not about an inventory variable (with the reason)
ELSEWHERE = {
    "scope": "test_scope_names_the_variable (needs the names set on each host)",
    "vault": "test_planner_bad_inventories.py (a vaulted value; its message starts with the variable)",
    "read": "test_planner_bad_inventories.py (an unreadable value; its message starts with the variable)",
    "yaml-duplicate-key": "test_planner_issue26.py (names the file, line and the key, which is the variable)",
    "yaml": "scripts/launch-plan: a YAML syntax error names the file and line (no variable yet)",
    "inventory": "scripts/launch-plan: an inventory path that cannot be read (no variable yet)",
    "pins": "test_pins.py: llmb_model_revision / engine_image_pins / the lock file the pin is read from",
    "model-type": "the shipped catalog patches every model type a release lacks (fix names llmb_engine_version)",
    "model-config": "the shipped catalog patches every config a release rejects (fix names llmb_engine_version)",
    "platform": "covered by the case 'platform' (an unknown profile) and a broken profile (the catalog's file)",
    "model": "covered by the case 'model'",
    "preset": "covered by the case 'preset'",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_refusal_names_the_variable_to_change(case):
    name, change, check, listed = CASES[case]
    check = check or case
    problems = refused(name, change)
    mine = [p for p in problems if p.check == check]
    assert mine, f"no [{check}] problem: " + "\n".join(p.format() for p in problems)
    for p in mine:
        said = f"{p.message} {p.fix}"
        named = VARIABLE.search(said) or (check in GROUP_NAMED and "accel_nodes" in said)
        assert named, f"[{check}] names no llmb_* variable in its message or fix:\n{p.format()}"
    text = "\n".join(p.format() for p in mine)
    for value in listed:
        assert value in text, f"[{check}] does not list {value!r} of the valid set:\n{text}"


def test_scope_names_the_variable():
    hv, groups = load_inventory("h800")
    hv["gpu-h800-02"]["llmb_engine"] = "vllm"
    with pytest.raises(PlanError) as err:
        plan_inventory(hv, groups, DATA, host_set={"gpu-h800-02": {"llmb_engine"}})
    (p,) = [p for p in err.value.problems if p.check == "scope"]
    assert p.message.startswith("llmb_engine is set on host gpu-h800-02") and "llmb_engine" in p.fix


def _check_ids() -> set[str]:
    """Every [check] id the planner, stage 0 and scripts/launch-plan can emit: the literal check of each
    Problem(...) and of each helper call that passes one (check="..." or its first argument)."""
    files = [*(REPO / "lib/llmbctl").rglob("*.py"), REPO / "scripts/launch-plan"]
    ids: set[str] = set()
    for f in files:
        src = f.read_text()
        if "Problem" not in src:
            continue
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            for kw in node.keywords:
                if kw.arg == "check" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    ids.add(kw.value.value)
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and re.fullmatch(r"[a-z]+(-[a-z]+)*", first.value):
                if fn == "Problem" or fn.startswith(("_given_in", "_catalog_record", "_bad_file")):
                    ids.add(first.value)
    return ids


def test_every_check_id_of_the_code_is_swept():
    ids = _check_ids()
    assert {"parallelism", "engine-version", "document-owned", "yaml-duplicate-key", "ports"} <= ids  # the reader works
    swept = {c[2] or k for k, c in CASES.items()} | set(ELSEWHERE)
    assert not ids - swept, f"check ids with no case here: {sorted(ids - swept)}"


def test_every_check_id_is_in_the_launch_plan_doc():
    """docs/launch-plan.md "Preflight checks" lists every check stage 0 makes, by id."""
    text = (REPO / "docs/launch-plan.md").read_text()
    section = text.split("## Preflight checks", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| ([a-z-]+(?: / [a-z-]+)*(?:, [a-z-]+)*) \|", section, re.M))
    named = {i.strip() for cell in listed for part in cell.split(",") for i in part.split("/")}
    missing = _check_ids() - named
    assert not missing, f"checks not in docs/launch-plan.md: {sorted(missing)}"
