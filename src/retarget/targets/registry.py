"""The one place targets are registered, and how a target is named.

A target is named as
- `name`                       its default config,
- `name:preset`                a named preset of its config,
- a path to a `.toml` / `.json` config file: {"target": "vta", "preset": "pynq", "clock_mhz": 200}
  (`target` required, `preset` optional, every other key overrides a config field).

Built-in targets are listed in `_BUILTIN` below. Targets written outside retarget (see
examples/toy_accelerator.py and docs/adding-a-target.md) call `register_target(cls)`.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

from ..errors import TargetError
from .base import Target


def _builtin() -> dict[str, type[Target]]:
    # Imported when a target is first looked up, not to dodge a cycle (none of these imports
    # the registry) but so that `import retarget` does not load every backend's lowering
    # (about 0.8 s of the package's import time).
    from .c.target import CTarget
    from .cpu.target import CpuTarget
    from .dnnvm.target import DNNVMTarget
    from .nvdla.target import NvdlaTarget
    from .sunway.target import SunwayTarget
    from .vta.target import VTATarget
    return {CpuTarget.name: CpuTarget, DNNVMTarget.name: DNNVMTarget, VTATarget.name: VTATarget,
            CTarget.name: CTarget, SunwayTarget.name: SunwayTarget, NvdlaTarget.name: NvdlaTarget}


_TARGETS: dict[str, type[Target]] = {}


def _table() -> dict[str, type[Target]]:
    if not _TARGETS:
        _TARGETS.update(_builtin())
    return _TARGETS


def register_target(cls: type[Target], *, replace: bool = False) -> type[Target]:
    """Make a Target subclass available by its `name` (usable as a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, Target)) or not cls.name:
        raise TargetError(f"register_target needs a Target subclass with a name, got {cls!r}")
    table = _table()
    if cls.name in table and table[cls.name] is not cls and not replace:
        raise TargetError(f"a different target named {cls.name!r} is already registered")
    table[cls.name] = cls
    return cls


def load_plugin(path: str | Path) -> ModuleType:
    """Import a target file written outside retarget (e.g. examples/toy_accelerator.py), whose
    import registers its target(s). A file the user names on the command line runs as
    `python FILE` would; loading the same file again returns the module already loaded, so its
    Target classes (and their registration) stay the same objects."""
    path = Path(path).resolve()
    if not path.is_file():
        raise TargetError(f"plugin {path} does not exist")
    name = f"retarget_plugin_{path.stem}_{abs(hash(str(path))):x}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def target_names() -> list[str]:
    return sorted(_table())


def target_class(name: str) -> type[Target]:
    table = _table()
    if name not in table:
        raise TargetError(f"unknown target {name!r}; known targets: {', '.join(sorted(table))} "
                          "(a target defined outside retarget is registered by loading its file "
                          "with --plugin FILE.py)")
    return table[name]


def get_target(spec: "str | Path | Target", overrides: Mapping[str, Any] | None = None) -> Target:
    """The Target named by `spec` (see the module docstring), with config `overrides` applied."""
    if isinstance(spec, Target):
        return spec.with_overrides(overrides or {})
    text = str(spec)
    if text.endswith((".toml", ".json")):
        fields = _read_config_file(Path(text))
        name = fields.pop("target", None)
        if not isinstance(name, str):
            raise TargetError(f"target config {text}: needs a \"target\" key naming the target "
                              f"(known: {', '.join(target_names())})")
        preset = fields.pop("preset", None)
        if preset is not None and not isinstance(preset, str):
            raise TargetError(f"target config {text}: \"preset\" must be a string")
        fields.update(overrides or {})
        return target_class(name)(preset=preset).with_overrides(fields)
    name, _, preset = text.partition(":")
    return target_class(name)(preset=preset or None).with_overrides(overrides or {})


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise TargetError(f"target config file {path} does not exist")
    try:
        if path.suffix == ".toml":
            import tomllib   # Python 3.11+; 3.10 reads JSON config files only
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        else:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, TOMLDecodeError
        raise TargetError(f"target config file {path}: not valid {path.suffix[1:].upper()} ({e})") from None
    if not isinstance(data, dict):
        raise TargetError(f"target config file {path}: expected a table/object of fields")
    return dict(data)


def describe_targets() -> list[dict[str, Any]]:
    """Every registered target with its description, presets and default config (for the CLI)."""
    out = []
    for name in target_names():
        cls = _table()[name]
        t = cls()
        out.append({"name": name, "description": cls.description, "presets": list(cls.presets),
                    "config": t.config_dict()})
    return out


__all__ = ["register_target", "get_target", "target_class", "target_names", "describe_targets"]
