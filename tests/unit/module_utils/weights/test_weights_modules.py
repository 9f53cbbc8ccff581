"""The four module shims: documented options equal the argument specs (types, defaults, choices)."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest
import yaml
from weights_helpers import ROOT


class _Stop(Exception):
    pass


def argument_spec(name, monkeypatch):
    for mod in ("llmb", "llmb.jsonpatch", "llmb.weights", "llmb.weights.fetch", "llmb.weights.manifest",
                "llmb.weights.verify", "llmb.weights.relay"):
        monkeypatch.setitem(sys.modules, "ansible.module_utils." + mod, importlib.import_module(mod))
    captured = {}

    def fake(argument_spec, **kwargs):
        captured.update(argument_spec)
        raise _Stop

    import ansible.module_utils.basic as basic

    monkeypatch.setattr(basic, "AnsibleModule", fake)
    spec = importlib.util.spec_from_file_location(f"w4_{name}", ROOT / "plugins" / "modules" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(_Stop):
        mod.main()
    return captured, yaml.safe_load(mod.DOCUMENTATION), yaml.safe_load(mod.RETURN)


def _compare(spec, doc, where):
    assert set(spec) == set(doc), f"{where}: documented {sorted(doc)} vs spec {sorted(spec)}"
    for key, s in spec.items():
        d = doc[key]
        assert d.get("type", "str") == s.get("type", "str"), f"{where}.{key} type"
        assert d.get("required", False) == s.get("required", False), f"{where}.{key} required"
        assert d.get("default") == s.get("default"), f"{where}.{key} default"
        assert d.get("choices") == s.get("choices"), f"{where}.{key} choices"
        assert d.get("elements") == s.get("elements"), f"{where}.{key} elements"
        if "options" in s:
            _compare(s["options"], d["suboptions"], f"{where}.{key}")


@pytest.mark.parametrize("name", ["json_patch", "model_fetch", "model_verify", "weights_relay"])
def test_documentation_matches_argument_spec(name, monkeypatch):
    spec, doc, ret = argument_spec(name, monkeypatch)
    assert doc["module"] == name
    assert doc["attributes"]["check_mode"]["support"] == "full"
    _compare(spec, doc["options"], name)
    assert ret
