"""`retarget demo --target`: the targets it offers and the preset it compiles each at come from
the registry (Target.in_demo, Target.demo_preset), not from a table in the cli."""
from __future__ import annotations

import pytest

from retarget import cli
from retarget.cli.demo_cmd import _demo_targets, _target_spec
from retarget.errors import InputError
from retarget.targets.registry import register_target
from retarget.targets.vta.target import VTATarget


def test_builtin_demo_targets_and_presets():
    offered = _demo_targets()
    assert list(offered)[0] == "vta" and "cpu" not in offered
    assert {n: c.demo_preset for n, c in offered.items()} == {
        "vta": "pynq", "dnnvm": "zu2", "nvdla": "nv_small", "c": None, "sunway": "sw26010"}
    assert _target_spec("vta", None) == "vta:pynq" and _target_spec("c", None) == "c"
    assert _target_spec("vta,c", None) == "vta:pynq,c"


def test_a_registered_target_joins_the_demo(monkeypatch, capsys):
    class DemoVTA(VTATarget):
        name, in_demo, demo_preset = "demo_vta", True, "ultra96"

    monkeypatch.setattr("retarget.targets.registry._TARGETS", {})   # the built-ins, afresh
    register_target(DemoVTA)
    assert _target_spec("demo_vta", None) == "demo_vta:ultra96"
    with pytest.raises(InputError, match="cpu is not one of vta, .*demo_vta"):
        _target_spec("cpu", None)
    assert cli.main(["demo", "--target", "cpu"]) == 2
    assert "not one of" in capsys.readouterr().err
