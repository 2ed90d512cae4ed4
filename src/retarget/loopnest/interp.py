"""A reference interpreter for the loop-nest IR: runs a Kernel on NumPy arrays, one scalar at
a time, checking every index. It is what says what a loop nest means: an op's lowering is
checked by running it here against the op's `ops/` definition, and every transformation
(split, reorder, buffering, copy insertion) by running the nest before and after.

Slow (pure Python); meant for small shapes in tests. Values are computed in float64 and
rounded to the destination's dtype at each store, as the generated C rounds to float at each
assignment. Local buffers start as NaN, so a read before any write shows in the result.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from ..errors import InputError
from .ir import Access, Binary, Const, Copy, Kernel, Load, Loop, Select, Store, Unary

_UNARY: dict[str, Callable[[float], float]] = {
    "neg": lambda x: -x, "abs": abs, "exp": lambda x: math.exp(min(x, 709.0)),
    "log": lambda x: math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan),
    "sqrt": lambda x: math.sqrt(x) if x >= 0 else math.nan,
    "rsqrt": lambda x: 1.0 / math.sqrt(x) if x > 0 else (math.inf if x == 0 else math.nan),
    "tanh": math.tanh, "erf": math.erf,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)) if x >= -709 else 0.0,
    "floor": math.floor, "ceil": math.ceil, "round": lambda x: float(np.round(x)),
    "sin": math.sin, "cos": math.cos, "recip": lambda x: 1.0 / x if x else math.copysign(math.inf, x),
}
_BINARY: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a) * math.copysign(1, b)),
    "max": max, "min": min, "pow": lambda a, b: float(np.power(a, b)),
}
_CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def _index(acc: Access, env: Mapping[str, int]) -> tuple[int, ...] | None:
    """The element index, or None when any coordinate is out of bounds."""
    idx = tuple(i.evaluate(env) for i in acc.index)
    for i, d in zip(idx, acc.tensor.shape):
        if not 0 <= i < d:
            return None
    return idx


class _Run:
    def __init__(self, kernel: Kernel, arrays: dict[str, np.ndarray]):
        self.kernel = kernel
        self.arrays = arrays

    def where(self, acc: Access, env) -> tuple[int, ...]:
        idx = _index(acc, env)
        if idx is None:
            coords = [i.evaluate(env) for i in acc.index]
            raise InputError(f"kernel {self.kernel.name!r}: index {coords} of {acc} is outside "
                             f"{acc.tensor.name!r} {list(acc.tensor.shape)} at {dict(env)}")
        return idx

    def expr(self, e, env) -> float:
        if isinstance(e, Load):
            if e.fill is not None:
                idx = _index(e.access, env)
                if idx is None:
                    return e.fill
            else:
                idx = self.where(e.access, env)
            return float(self.arrays[e.access.tensor.name][idx])
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Unary):
            return _UNARY[e.fn](self.expr(e.x, env))
        if isinstance(e, Binary):
            return _BINARY[e.op](self.expr(e.a, env), self.expr(e.b, env))
        if isinstance(e, Select):
            hit = _CMP[e.cmp](self.expr(e.a, env), self.expr(e.b, env))
            return self.expr(e.then if hit else e.other, env)
        raise TypeError(f"not an expression: {e!r}")

    def stmts(self, body, env) -> None:
        for s in body:
            if isinstance(s, Loop):
                for i in range(s.extent):
                    env[s.var] = i
                    self.stmts(s.body, env)
                del env[s.var]
            elif isinstance(s, Store):
                idx = self.where(s.dst, env)
                dst = self.arrays[s.dst.tensor.name]
                v = self.expr(s.value, env)
                if s.reduce is not None:
                    v = _BINARY[s.reduce](float(dst[idx]), v)
                dst[idx] = v
            elif isinstance(s, Copy):
                self.copy(s, env)
            else:
                raise TypeError(f"not a statement: {s!r}")

    def copy(self, c: Copy, env) -> None:
        d0 = [i.evaluate(env) for i in c.dst.index]
        s0 = [i.evaluate(env) for i in c.src.index]
        for acc, start in ((c.dst, d0), (c.src, s0)):
            for k, (a, e, n) in enumerate(zip(start, c.extents, acc.tensor.shape)):
                if a < 0 or a + e > n:
                    raise InputError(f"kernel {self.kernel.name!r}: {c} covers {a}..{a + e - 1} "
                                     f"of dimension {k} of {acc.tensor.name!r} "
                                     f"{list(acc.tensor.shape)} at {dict(env)}")
        dsl = tuple(slice(a, a + e) for a, e in zip(d0, c.extents))
        ssl = tuple(slice(a, a + e) for a, e in zip(s0, c.extents))
        self.arrays[c.dst.tensor.name][dsl] = self.arrays[c.src.tensor.name][ssl]


def run_kernel(kernel: Kernel, inputs: Mapping[str, np.ndarray],
               outputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run `kernel` on `inputs` (by tensor name); returns its outputs. `outputs` may give
    initial output arrays (a kernel that accumulates into its output); others start at 0."""
    arrays: dict[str, np.ndarray] = {}
    for t in kernel.inputs:
        if t.name not in inputs:
            raise InputError(f"kernel {kernel.name!r}: no array for input {t.name!r}")
        a = np.asarray(inputs[t.name])
        if a.shape != t.shape:
            raise InputError(f"kernel {kernel.name!r}: input {t.name!r} has shape "
                             f"{list(a.shape)}, expected {list(t.shape)}")
        arrays[t.name] = a.astype(t.dtype, copy=True)
    for t in kernel.outputs:
        given = None if outputs is None else outputs.get(t.name)
        arrays[t.name] = (np.zeros(t.shape, t.dtype) if given is None
                          else np.asarray(given).astype(t.dtype, copy=True))
    for t in kernel.locals:
        arrays[t.name] = np.full(t.shape, np.nan, t.dtype)
    _Run(kernel, arrays).stmts(kernel.body, {})
    return {t.name: arrays[t.name] for t in kernel.outputs}
