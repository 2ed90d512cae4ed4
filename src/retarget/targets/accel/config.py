"""What every accelerator config shares: a frozen dataclass with a dict / JSON form, and the
way a preset name or a JSON file of fields names one (`retarget disasm --config`)."""
from __future__ import annotations

import json
from dataclasses import asdict, fields, replace
from typing import ClassVar, Mapping

from ...errors import TargetError


class ConfigFields:
    """Mixin for a target's config dataclass; `label` names the target in messages."""
    __slots__ = ()
    label: ClassVar[str] = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise TargetError(f"unknown {cls.label} config field(s) {sorted(unknown)}; "
                              f"known: {sorted(known)}")
        return cls(**d)

    def with_(self, **changes):
        return replace(self, **changes)


def config_from_spec(cls: type, presets: Mapping, default: str, spec: str | None):
    """A preset name, or the path of a JSON file of config fields (as to_dict writes them);
    None is the `default` preset."""
    label = cls.label
    if spec is None:
        return presets[default]
    if spec in presets:
        return presets[spec]
    if spec.endswith(".json"):
        try:
            with open(spec, encoding="utf-8") as fh:
                d = json.load(fh)
        except json.JSONDecodeError as e:
            raise TargetError(f"{label} config file {spec}: not valid JSON ({e})") from None
        except OSError as e:
            raise TargetError(f"{label} config file {spec}: unreadable ({e})") from None
        if not isinstance(d, dict):
            raise TargetError(f"{label} config file {spec}: expected a JSON object of config "
                              f"fields")
        return cls.from_dict(d)
    raise TargetError(f"unknown {label} config {spec!r}: give a preset ({', '.join(presets)}) "
                      "or a .json file")


__all__ = ["ConfigFields", "config_from_spec"]
