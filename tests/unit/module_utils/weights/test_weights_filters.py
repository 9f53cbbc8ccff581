"""plugins/filter/llmb_weights.py: the role's view of the plan and of the profile's patches."""

from __future__ import annotations

import importlib.util

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from weights_helpers import ROOT

spec = importlib.util.spec_from_file_location("llmb_weights_filter", ROOT / "plugins" / "filter" / "llmb_weights.py")
flt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(flt)
F = flt.FilterModule().filters()


def profile(name):
    return yaml.safe_load((ROOT / "data" / "models" / f"{name}.yml").read_text())


@pytest.mark.parametrize(
    ("model", "engine", "platform", "expected"),
    [
        ("kimi-k2-thinking", "vllm-ascend", "a3-16npu",
         [{"path": "quantization_config.config_groups.group_0.targets", "value": ["MoE"], "expect": ["Linear"],
           "key": "vllm-ascend"}]),
        ("kimi-k2-thinking", "trtllm", "h200-hgx8",
         [{"path": "model_type", "value": "deepseek_v3", "expect": "kimi_k2", "key": "trtllm"}]),
        ("kimi-k2-thinking", "vllm", "h100-hgx8", []),
        ("kimi-k2-sim", "vllm", "h800-hgx8", []),
    ],
)
def test_patches_from_the_profiles(model, engine, platform, expected):
    assert F["llmb_weights_patches"](profile(model), engine, platform) == expected


def test_platform_key_after_engine_key():
    prof = {"config_patches": {"vllm": [{"path": "a", "value": 1}], "a3-16npu": [{"path": "b", "value": 2}]}}
    assert [p["key"] for p in F["llmb_weights_patches"](prof, "vllm", "a3-16npu")] == ["vllm", "a3-16npu"]
    with pytest.raises(AnsibleFilterError, match="needs path and value"):
        F["llmb_weights_patches"]({"config_patches": {"vllm": [{"path": "a"}]}}, "vllm")


def test_plan_filters():
    plan = F["llmb_weights_plan"]("relay", ["a", "b", "c"], [], None)
    assert F["llmb_weights_hub_fetchers"](plan) == ["a"]
    assert F["llmb_weights_senders"](plan) == ["a"]
    assert F["llmb_weights_relay_servers"](plan) == ["a", "b"]
    with pytest.raises(AnsibleFilterError, match="weights plan: weights_strategy 'x'"):
        F["llmb_weights_plan"]("x", ["a"])
