"""A --load-format whose loader vLLM imports only on demand brings its package to a host install."""

from __future__ import annotations


def _packages(plan) -> dict[str, list[str]]:
    return {h["host"]: [p for s in h["services"] for p in s.get("packages") or []] for h in plan.to_list()}


def test_fastsafetensors_is_installed_beside_vllm_on_every_node(planned):
    plan = planned("h200-2x8-k3")
    got = _packages(plan)
    assert len(got) == 2
    assert all(pkgs == ["fastsafetensors==0.5.0"] for pkgs in got.values()), got


def test_the_default_loader_needs_no_package(planned):
    hv_args = {"load-format": "auto"}
    plan = planned("h200-2x8-k3", llmb_engine_args=hv_args | {"max-model-len": 8192})
    got = _packages(plan)
    assert len(got) == 2 and all(pkgs == [] for pkgs in got.values()), got


def test_a_container_carries_its_own_loader(planned):
    plan = planned("h200-2x8-k3", llmb_install="container")
    got = _packages(plan)
    assert len(got) == 2 and all(pkgs == [] for pkgs in got.values()), got
