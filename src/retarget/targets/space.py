"""Design spaces: which config fields of a target vary, their legal values, the constraints a
point must meet before it is compiled, and a resource model per point (MACs per cycle, on-chip
bytes, DSP slices, 18 Kb block RAMs) checked against named FPGA parts.

A target declares its space with `Target.design_space()` (targets/<name>/space.py). The
formulas and the part figures are documented, with their sources, in docs/explore.md.

    space = VTATarget.design_space()
    for point in space.points():             # dicts of the varied fields, in a fixed order
        why = space.violation(point)         # None, or the reason the point is illegal
        res = space.resources(point)         # Resources(macs_per_cycle, onchip_bytes, dsp, bram18)
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping, Sequence

from ..errors import InputError, RetargetError


# ---- FPGA parts ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Part:
    """An FPGA part's budget for the resource model: DSP slices and 18 Kb block RAMs (a 36 Kb
    block RAM counts as two), with where the figures come from."""
    name: str
    dsp: int
    bram18: int
    family: str
    source: str


# Device totals (docs/explore.md cites each): Zynq-7000 (DS190) and Zynq UltraScale+ (DS891).
PARTS: dict[str, Part] = {
    "xc7z020": Part("xc7z020", 220, 2 * 140, "Zynq-7000 (DSP48E1, RAMB36E1)",
                    "Xilinx DS190 Zynq-7000 SoC overview, device table: Z-7020 220 DSP slices, "
                    "140 x 36 Kb block RAM (4.9 Mb); Vivado report_utilization on xc7z020: "
                    "DSPs available 220, RAMB18 available 280"),
    "xczu2eg": Part("xczu2eg", 240, 2 * 150, "Zynq UltraScale+ (DSP48E2, RAMB36E2)",
                    "Xilinx DS891 Zynq UltraScale+ MPSoC overview, device table: ZU2EG 240 DSP "
                    "slices, 150 x 36 Kb block RAM (5.3 Mb), no UltraRAM"),
    "xczu9eg": Part("xczu9eg", 2520, 2 * 912, "Zynq UltraScale+ (DSP48E2, RAMB36E2)",
                    "Xilinx DS891 Zynq UltraScale+ MPSoC overview, device table: ZU9EG 2,520 DSP "
                    "slices, 912 x 36 Kb block RAM (32.1 Mb), no UltraRAM"),
}


def get_part(name: str) -> Part:
    try:
        return PARTS[name.lower()]
    except KeyError:
        raise InputError(f"unknown FPGA part {name!r}; known: {', '.join(PARTS)}") from None


# ---- the resource model --------------------------------------------------------------------------
# An 18 Kb block RAM's aspect ratios (depth x width in bits): RAMB18E1 (7-series, UG473) and
# RAMB18E2 (UltraScale, UG573) offer the same; x36 is the simple-dual-port width.
BRAM18_SHAPES: tuple[tuple[int, int], ...] = ((16384, 1), (8192, 2), (4096, 4), (2048, 9),
                                               (1024, 18), (512, 36))


def bram18(depth: int, width_bits: int) -> int:
    """18 Kb block RAMs for one buffer of `depth` entries of `width_bits` bits: the buffer is
    built as a grid of identical blocks in one aspect ratio, ceil(depth / d) x ceil(width / w),
    with the ratio (d, w) that needs the fewest blocks."""
    if depth <= 0 or width_bits <= 0:
        return 0
    return min(math.ceil(depth / d) * math.ceil(width_bits / w) for d, w in BRAM18_SHAPES)


@dataclass(frozen=True, slots=True)
class Buffer:
    """One on-chip memory of a design point: entries x bits per entry (its read width)."""
    name: str
    depth: int
    width_bits: int

    @property
    def bytes(self) -> int:
        return self.depth * self.width_bits // 8

    @property
    def bram18(self) -> int:
        return bram18(self.depth, self.width_bits)


@dataclass(frozen=True, slots=True)
class Resources:
    """What one design point costs on an FPGA (docs/explore.md: the formulas)."""
    macs_per_cycle: int
    onchip_bytes: int
    dsp: int
    bram18: int
    buffers: tuple[Buffer, ...] = ()
    note: str = ""

    def fits(self, part: Part) -> bool:
        return self.dsp <= part.dsp and self.bram18 <= part.bram18

    def why_not(self, part: Part) -> str | None:
        """None when the point fits `part`, else what exceeds it."""
        over = []
        if self.dsp > part.dsp:
            over.append(f"{self.dsp} DSP > {part.dsp}")
        if self.bram18 > part.bram18:
            over.append(f"{self.bram18} BRAM18 > {part.bram18}")
        return f"does not fit {part.name}: " + ", ".join(over) if over else None

    def to_dict(self) -> dict:
        return {"macs_per_cycle": self.macs_per_cycle, "onchip_bytes": self.onchip_bytes,
                "dsp": self.dsp, "bram18": self.bram18,
                "buffers": {b.name: {"depth": b.depth, "width_bits": b.width_bits,
                                     "bram18": b.bram18} for b in self.buffers}}


# ---- the space -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Param:
    """One config field that varies: the values swept by default, and which values are legal
    (a predicate; a space file may only choose legal values)."""
    name: str
    values: tuple
    legal: Callable[[Any], bool] = lambda v: True
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Constraint:
    """A predicate on a point (a dict of config fields, the base config's values filled in)
    that returns None when the point is legal, else the reason it is not."""
    name: str
    check: Callable[[Any], str | None]


@dataclass(slots=True)
class DesignSpace:
    """A target's design space around a base config (a preset).

    params: the varied fields in sweep order; constraints: checked on the whole config before
    a point is compiled; resource_model: config -> Resources; make_config(base, point) -> the
    config (raises RetargetError when the point cannot be expressed)."""
    target: str
    base: Any                                   # the base config (a frozen dataclass)
    params: dict[str, Param]
    constraints: list[Constraint]
    resource_model: Callable[[Any], Resources]
    preset: str | None = None
    fixed: dict[str, Any] = field(default_factory=dict)    # fields set for every point

    # ---- points ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return math.prod(len(p.values) for p in self.params.values())

    @property
    def spec(self) -> str:
        return f"{self.target}:{self.preset}" if self.preset else self.target

    def points(self):
        """Every point of the grid (dicts of the varied fields), in a fixed order."""
        names = list(self.params)
        for combo in itertools.product(*(self.params[n].values for n in names)):
            yield dict(zip(names, combo))

    def overrides(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """Config overrides for `point`: the space's fixed fields, then the point's."""
        return {**self.fixed, **point}

    def config(self, point: Mapping[str, Any]):
        """The full config of `point` (RetargetError when it cannot be built)."""
        changes = self.overrides(point)
        try:
            return replace(self.base, **changes)
        except (TypeError, ValueError) as e:
            raise InputError(f"invalid point {dict(point)}: {e}") from None

    def violation(self, point: Mapping[str, Any]) -> str | None:
        """None when `point` meets every constraint, else the first reason it does not."""
        try:
            cfg = self.config(point)
        except RetargetError as e:
            return f"config: {e}"
        for c in self.constraints:
            why = c.check(cfg)
            if why:
                return f"{c.name}: {why}"
        return None

    def resources(self, point: Mapping[str, Any]) -> Resources:
        return self.resource_model(self.config(point))

    # ---- space files -----------------------------------------------------------------------
    def restricted(self, spec: Mapping[str, Any]) -> "DesignSpace":
        """This space narrowed/changed by a space file's JSON object:

            {"params": {"log_block_in": [4, 5], "clock_mhz": [100, 200]},   # values to sweep
             "fixed": {"bus_bytes": 16}}                                    # set for every point

        A field in "params" replaces that field's values (each must be legal); a field the
        space knows but "params" omits keeps its default values unless "only" is true, when
        the omitted fields are held at the base config's value."""
        if not isinstance(spec, Mapping):
            raise InputError("space file: expected a JSON object with \"params\" (and "
                             "optionally \"fixed\", \"only\")")
        unknown = sorted(set(spec) - {"params", "fixed", "only", "preset"})
        if unknown:
            raise InputError(f"space file: unknown key(s) {unknown}; known: params, fixed, "
                             f"only")
        names = {f.name for f in fields(self.base)}
        given = spec.get("params", {}) or {}
        if not isinstance(given, Mapping):
            raise InputError("space file: \"params\" must map field names to lists of values")
        params = {} if spec.get("only") else dict(self.params)
        for name, values in given.items():
            if name not in names:
                raise InputError(f"space file: {self.target} has no config field {name!r}")
            if not isinstance(values, list) or not values:
                raise InputError(f"space file: params.{name} must be a non-empty list")
            proto = self.params.get(name)
            legal = proto.legal if proto else (lambda v: True)
            cur = getattr(self.base, name)
            vals = []
            for v in values:
                v = _coerce_value(name, cur, v)
                if not legal(v):
                    raise InputError(f"space file: params.{name}: {v!r} is not a legal value")
                vals.append(v)
            params[name] = Param(name, tuple(dict.fromkeys(vals)), legal,
                                 proto.doc if proto else "")
        fixed = dict(self.fixed)
        for name, v in (spec.get("fixed", {}) or {}).items():
            if name not in names:
                raise InputError(f"space file: {self.target} has no config field {name!r}")
            fixed[name] = _coerce_value(name, getattr(self.base, name), v)
            params.pop(name, None)
        return DesignSpace(self.target, self.base, params, list(self.constraints),
                           self.resource_model, self.preset, fixed)

    def describe(self) -> str:
        lines = [f"{self.spec}: {len(self.params)} field(s), {self.size:,} point(s) in the grid"]
        for p in self.params.values():
            lines.append(f"  {p.name}: {', '.join(map(str, p.values))}")
        for k, v in self.fixed.items():
            lines.append(f"  {k} = {v} (fixed)")
        return "\n".join(lines)


def _coerce_value(name: str, current: Any, v: Any) -> Any:
    """A JSON value as the type of the field (ints stay ints, 100 -> 100.0 for a float)."""
    if isinstance(current, bool):
        if isinstance(v, bool):
            return v
        raise InputError(f"space file: {name} expects true/false, got {v!r}")
    if isinstance(current, int):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer():
            return int(v)
        raise InputError(f"space file: {name} expects an integer, got {v!r}")
    if isinstance(current, float):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
        raise InputError(f"space file: {name} expects a number, got {v!r}")
    return v


def load_space_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as e:
        raise InputError(f"space file {path}: not valid JSON ({e})") from None
    return data


def canonical_key(config: Mapping[str, Any]) -> str:
    """The resume key of a point: its config as canonical JSON (sorted keys, no spaces)."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


# ---- Pareto fronts -------------------------------------------------------------------------------
def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a dominates b (every objective minimised): no worse anywhere, better somewhere."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def pareto_front(items: Sequence, key: Callable[[Any], Sequence[float]]) -> list:
    """The non-dominated items (points with equal objective vectors are all kept), in input
    order."""
    vecs = [tuple(key(it)) for it in items]
    return [it for it, v in zip(items, vecs)
            if not any(dominates(w, v) for w in vecs)]


__all__ = ["BRAM18_SHAPES", "Buffer", "Constraint", "DesignSpace", "PARTS", "Param", "Part",
           "Resources", "bram18", "canonical_key", "dominates", "get_part", "load_space_file",
           "pareto_front"]
