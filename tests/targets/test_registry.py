"""Target naming, presets, config files and overrides; the `retarget targets` command."""
from __future__ import annotations

import argparse
import json

import pytest

from retarget.errors import TargetError
from retarget.targets.base import Support, Target
from retarget.targets.cpu.target import CpuConfig, CpuTarget
from retarget.targets.registry import (describe_targets, get_target, register_target,
                                       target_names)


def test_cpu_is_registered_with_its_default_config():
    t = get_target("cpu")
    assert isinstance(t, CpuTarget) and t.config == CpuConfig()
    assert "cpu" in target_names()


def test_preset_by_name_colon_preset():
    t = get_target("cpu:reference")
    assert t.config.fast is False and t.spec == "cpu:reference"


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(TargetError, match=r"unknown target 'nope'.*known targets: .*cpu"):
        get_target("nope")


def test_unknown_preset_lists_presets():
    with pytest.raises(TargetError, match=r"no preset 'big'; presets: reference"):
        get_target("cpu:big")


def test_overrides_are_checked_and_coerced():
    assert get_target("cpu", {"fast": "false"}).config.fast is False
    with pytest.raises(TargetError, match=r"unknown config field\(s\) \['speed'\].*known: \['fast'\]"):
        get_target("cpu", {"speed": 3})
    with pytest.raises(TargetError, match="expects bool"):
        get_target("cpu", {"fast": "maybe"})


def test_json_and_toml_config_files(tmp_path):
    j = tmp_path / "t.json"
    j.write_text(json.dumps({"target": "cpu", "preset": "reference", "fast": True}))
    t = get_target(j)
    assert t.config.fast is True and t.preset_name == "reference"
    toml = tmp_path / "t.toml"
    toml.write_text('target = "cpu"\nfast = false\n')
    assert get_target(str(toml)).config.fast is False


def test_bad_config_files(tmp_path):
    with pytest.raises(TargetError, match="does not exist"):
        get_target(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TargetError, match="not valid JSON"):
        get_target(bad)
    no_target = tmp_path / "nt.json"
    no_target.write_text(json.dumps({"fast": True}))
    with pytest.raises(TargetError, match='needs a "target" key'):
        get_target(no_target)
    unknown = tmp_path / "unk.toml"
    unknown.write_text('target = "cpu"\nclock_mhz = 200\n')
    with pytest.raises(TargetError, match="unknown config field"):
        get_target(unknown)


def test_register_target_from_outside_and_conflicts():
    from dataclasses import dataclass

    @dataclass(frozen=True, slots=True)
    class Cfg:
        width: int = 4

    class Widget(Target):
        name = "widget_test"
        config_class = Cfg
        rules = {"Relu": lambda t, n, g: Support.yes()}

    register_target(Widget)
    assert get_target("widget_test", {"width": "8"}).config.width == 8
    assert any(d["name"] == "widget_test" and d["config"] == {"width": 4} for d in describe_targets())

    class Other(Target):
        name = "widget_test"
        config_class = Cfg

    with pytest.raises(TargetError, match="already registered"):
        register_target(Other)
    with pytest.raises(TargetError, match="Target subclass"):
        register_target(object)  # type: ignore[arg-type]


def test_rule_table_refuses_unknown_ops_with_a_reason():
    from retarget.ir.graph import Graph, Node, Value

    class Only(Target):
        name = "only_relu"
        config_class = CpuConfig
        rules = {"Relu": lambda t, n, g: Support.yes("fine")}

    t = Only()
    x = Value("x")
    add = Node("Add", "a", [x, x], [Value("y")])
    s = t.supports(add, Graph([add], [x], add.outputs))
    assert not s.ok and "only_relu has no kernel for Add" in s.reason


def test_targets_command_lists_targets(capsys):
    from retarget.cli import targets_cmd
    parser = argparse.ArgumentParser()
    targets_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["targets"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "cpu:" in out and "presets: reference" in out and "fast = True" in out
    args = parser.parse_args(["targets", "--json"])
    args.func(args)
    listed = json.loads(capsys.readouterr().out)
    assert {"name": "cpu"}.items() <= listed[[d["name"] for d in listed].index("cpu")].items()
