"""Checking a compiled module against the reference interpreter: the one rule `retarget run
--check`, `retarget demo` and `retarget explore --spot-check` all apply, and the seeded random
inputs they feed it.

The reference runs the module's own graph: for a quantising target that is the integer graph,
which a `bit_exact` target must reproduce bit for bit (same shape, dtype and values). A float
target (c, sunway: another summation order, BatchNorm folded into the weights) must agree within
its `check_rtol`, relative to the reference's largest magnitude (at least 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph
from ..limits import check_tensor_bytes
from ..targets.base import Target


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """One output compared with the reference: whether it passes and by how much it differs."""
    name: str
    ok: bool
    max_abs_diff: float
    bit_exact: bool
    rtol: float

    def verdict(self) -> str:
        if not self.ok:
            return "MISMATCH"
        return ("bit-exact vs the integer reference" if self.bit_exact
                else f"ok within rtol {self.rtol:g}")


def outputs_match(target: Target, out: np.ndarray, ref: np.ndarray) -> bool:
    """Whether `out` passes for `ref` on `target`: bit for bit on a bit-exact target, within
    its check_rtol (of the reference's scale) on a float one."""
    if out.shape != ref.shape:
        return False
    if target.bit_exact:
        return out.dtype == ref.dtype and bool(np.array_equal(out, ref))
    rtol = float(target.check_rtol)
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    return bool(np.allclose(out, ref, rtol=rtol, atol=rtol * scale))


def check_outputs(target: Target, outputs: Mapping[str, np.ndarray],
                  reference: Mapping[str, np.ndarray]) -> list[OutputCheck]:
    """Every reference output compared with the module's (a missing one fails)."""
    checks = []
    for name, r in reference.items():
        a = outputs.get(name)
        ok = a is not None and outputs_match(target, a, r)
        diff = (float(np.max(np.abs(a.astype(np.float64) - r)))
                if a is not None and a.shape == r.shape and a.size else 0.0)
        checks.append(OutputCheck(name, ok, diff, bool(target.bit_exact),
                                  float(target.check_rtol)))
    return checks


def random_inputs(graph: Graph, seed: int,
                  given: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The `given` arrays plus seeded random data for the graph's other inputs: standard normal
    floats, 0/1 booleans, and small non-negative integers (valid as indices and token ids)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed {seed!r}: expected a non-negative integer")
    inputs = dict(given or {})
    missing = [v for v in graph.inputs if v.name not in inputs]
    for v in missing:   # refuse a huge declared input before allocating it
        check_tensor_bytes(f"random data for input {v.name!r}", v.type.shape, v.type.dtype)
    rng = np.random.default_rng(seed)
    for v in missing:
        dt = np.dtype(v.type.dtype)
        if dt.kind == "f":
            inputs[v.name] = rng.standard_normal(v.type.shape).astype(dt)
        elif dt.kind == "b":
            inputs[v.name] = rng.integers(0, 2, v.type.shape).astype(dt)
        else:
            inputs[v.name] = rng.integers(0, 10, v.type.shape).astype(dt)
    return inputs


__all__ = ["OutputCheck", "check_outputs", "outputs_match", "random_inputs"]
