"""Checking and printing a call of a hand-written routine of the int8 mode's operator libraries
(routines_tflite.py, routines_ort.py) before its C is printed: the routine must read and write
exactly its kernel's tensors, with the element counts its integer arguments say, so that a
planning mistake is an error naming the call instead of C reading past a buffer."""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from ...errors import GraphError
from ...loopnest.ir import Tensor
from ..aot.program import Call

# (operand position, dtype, element count[, (lowest, highest) element of a strided view])
Operand = tuple


def check_call(call: Call, table: Mapping[str, tuple[int, int, int]],
               sizes_of: Callable[[object], list[Operand]], positive_floats: bool) -> None:
    """GraphError unless routine `call.routine` has the (pointer operands, integer arguments,
    float arguments) counts `table` gives it, its operands name the kernel's tensors (the last
    its one output), its float arguments are finite (and positive, with `positive_floats`),
    and every operand `sizes_of(routine)` lists has that dtype and size."""
    r, params = call.routine, call.kernel.params
    try:
        operands, ints, floats = table[r.name]
        if len(r.operands) != operands or len(r.ints) != ints or len(r.floats) != floats:
            raise ValueError(f"{len(r.operands)} operands, {len(r.ints)} integer and "
                             f"{len(r.floats)} float arguments; expected {operands}, {ints}, "
                             f"{floats}")
        if any(not -1 <= o < len(params) for o in r.operands) or \
                r.operands[-1] != len(params) - 1 or len(call.kernel.outputs) != 1:
            raise ValueError(f"operands {r.operands} do not name the kernel's tensors")
        if not all(np.isfinite(f) and (f > 0 or not positive_floats) for f in r.floats):
            raise ValueError(f"float arguments {list(r.floats)} must be finite"
                             f"{' and positive' if positive_floats else ''}")
        for want in sizes_of(r):
            o = r.operands[want[0]]
            problem = None if o < 0 else operand_problem(params[o], *want[1:])
            if problem:
                t = params[o]
                raise ValueError(f"operand {want[0]} is {t.name!r} {t.dtype}[{t.size}], "
                                 f"{problem}")
    except (KeyError, ValueError, IndexError) as e:
        raise GraphError(f"call {call.function}: routine {r.name} {list(r.ints)}: "
                         f"{e}") from None


def call_statement(call: Call, pointers) -> str:
    """The C statement of a checked call: pointer operands (NULL for -1), the integer
    arguments, then the float ones as exact C99 hexadecimal literals."""
    r = call.routine
    ptr = [pointers[o] if o >= 0 else "0" for o in r.operands]
    floats = [float(v).hex() for v in r.floats]
    return f"{r.name}({', '.join(ptr + [str(v) for v in r.ints] + floats)});"


def operand_problem(t: Tensor, dtype: str, count: int | None,
                    span: tuple[int, int] = (0, 0)) -> str | None:
    """Why tensor `t` cannot be an operand of `count` elements of `dtype` (count None: a
    strided view reading the elements span[0]..span[1])."""
    if count is None:
        fits = t.dtype == dtype and span[0] >= 0 and span[1] < t.size
        return None if fits else f"the {dtype} view reads elements {span[0]}..{span[1]}"
    return None if t.dtype == dtype and t.size == count else f"expected {dtype}[{count}]"


__all__ = ["call_statement", "check_call", "operand_problem"]
