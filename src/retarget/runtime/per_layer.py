"""Per-layer debugging of a bit-exact target (`retarget run D --check --per-layer`): every
offloaded region is run once more on the reference's own inputs, with its kernel reporting
what each hardware layer wrote, and each layer's output is compared with the reference value
it computes. A region starts from correct inputs, so the first layer that differs is where
the compiled code (or the compiler) went wrong, not where an earlier error surfaced.

A kernel takes part by implementing `layer_outputs(device, inputs)` (targets/base.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..errors import TargetError


@dataclass(frozen=True, slots=True)
class LayerCheck:
    region: str
    index: int               # the layer's position in its region's kernel
    layer: str               # the kernel's name for it (the graph nodes it runs)
    value: str               # the graph value it computes
    elements: int
    differing: int
    max_abs_diff: int
    output: np.ndarray       # what the layer wrote

    @property
    def ok(self) -> bool:
        return self.differing == 0


def check_layers(module, inputs: Mapping[str, np.ndarray]) -> list[LayerCheck]:
    """Every hardware layer of every offloaded region against the integer reference."""
    from ..targets.cpu.reference import run_graph
    ref = run_graph(module.graph, inputs, intermediates=True)
    devices = {}    # one per target of the module
    checks = []
    for region in module.offloaded:
        if region.target not in devices:
            devices[region.target] = module.target_of(region).make_device()
        device = devices[region.target]
        kernel = module.kernels[region.name]
        kernel.upload(device)
        try:
            dumps = kernel.layer_outputs(device, [ref[v.name] for v in region.inputs])
        finally:
            kernel.release(device)
        for i, (layer, value, ch0, data) in enumerate(dumps):
            if value not in ref:
                raise TargetError(f"region {region.name!r}, layer {i} ({layer}): the kernel "
                                  f"says it computes {value!r}, which the graph does not have")
            expect = _as_written(ref[value], data, ch0, f"{region.name} layer {i} ({layer})")
            diff = np.abs(expect.astype(np.int64) - data.astype(np.int64))
            checks.append(LayerCheck(region.name, i, layer, value, int(data.size),
                                     int(np.count_nonzero(diff)),
                                     int(diff.max()) if diff.size else 0, data))
    return checks


def _as_written(expect: np.ndarray, data: np.ndarray, ch0: int, where: str) -> np.ndarray:
    """The reference value in the layout the layer wrote: (N, C, H, W) with its channel slice
    [ch0, ch0 + C) (a dense layer's (rows, features) as (rows, features, 1, 1))."""
    n, c, h, w = data.shape
    if expect.size % (n * h * w):
        raise TargetError(f"{where}: wrote {list(data.shape)}, the reference value is "
                          f"{list(expect.shape)}")
    e = expect.reshape(n, -1, h, w)
    if not 0 <= ch0 <= e.shape[1] - c:
        raise TargetError(f"{where}: wrote channels [{ch0}, {ch0 + c}) of a value with "
                          f"{e.shape[1]}")
    return e[:, ch0:ch0 + c]


def format_checks(checks: list[LayerCheck]) -> str:
    from ..report.table import format_table
    rows = [(c.region, c.index, c.layer if len(c.layer) <= 60 else c.layer[:57] + "...",
             "ok" if c.ok else "MISMATCH", f"{c.differing}/{c.elements}", c.max_abs_diff)
            for c in checks]
    table = format_table(["region", "layer", "nodes", "check", "differ", "max |diff|"], rows)
    bad = next((c for c in checks if not c.ok), None)
    if not checks:
        return "per-layer: nothing is offloaded, so there are no hardware layers to check"
    if bad is None:
        return f"{table}\nper-layer: all {len(checks)} layers equal the integer reference"
    return (f"{table}\nper-layer: first layer that differs: region {bad.region} layer "
            f"{bad.index} ({bad.layer}), computing {bad.value!r}: {bad.differing} of "
            f"{bad.elements} elements differ, max |diff| {bad.max_abs_diff}")


def save_checks(checks: list[LayerCheck], path: str) -> None:
    """Every layer's output in one .npz, keyed '<region>/<index>:<value>'."""
    np.savez(path, **{f"{c.region}/{c.index}:{c.value}": c.output for c in checks})


__all__ = ["LayerCheck", "check_layers", "format_checks", "save_checks"]
