"""Shared pieces of the loop-nest lowerings: C names, the kernel builder, nests, loads
with fill, broadcasting, constant operands."""
from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

from ...errors import ShapeError, UnsupportedOpError, node_context
from ...ir.graph import Node, Value
from ..ir import Affine, Binary, Const, Expr, Kernel, Load, Loop, Stmt, Tensor, Unary, aff
from ..verify import verify_kernel


FLOAT_DTYPES = ("float32", "float64")
# dtypes a non-data operand (Pow's exponent, Clip bounds) may have when it is read as a tensor
OPERAND_DTYPES = FLOAT_DTYPES + ("int32", "int64")
# How many nests an op split into pieces (Resize, AveragePool's border rectangles) may use
# before the lowering gives up: past this the code is a pile of special cases.
MAX_PIECE_NESTS = 64

Axis = tuple[str, int]          # (loop variable, extent)


# ---- names and errors -----------------------------------------------------------------------
def c_name(text: str) -> str:
    """`text` as a C identifier: every other character becomes '_', and a leading digit (or
    nothing at all) gets a '_' prefix."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", text)
    return name if name and not name[0].isdigit() else f"_{name}"


def kernel_name(node: Node) -> str:
    """The kernel's name: the op and the node name, C-safe (the op keeps two nodes named alike
    in different ops apart)."""
    return c_name(f"{node.op}_{node.name}")


def _unsupported(node: Node, what: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{node_context(node)}: {what}")


# ---- building kernels -----------------------------------------------------------------------
class _KernelBuilder:
    """Collects one node's kernel: the input tensors its statements actually read (in the
    node's input order), its outputs, and its local scalars."""

    def __init__(self, node: Node):
        self.node = node
        self._inputs: dict[str, Tensor] = {}
        self._locals: list[Tensor] = []

    def _typed(self, v: Value) -> Value:
        if v.type is None:
            raise ShapeError(f"{node_context(self.node)}: value {v.name!r} has no type (run "
                             "shape inference before lowering)")
        return v

    def require(self, values: Iterable[Value | None], dtypes=FLOAT_DTYPES) -> None:
        for v in values:
            if v is not None and self._typed(v).type.dtype not in dtypes:
                raise _unsupported(self.node, f"value {v.name!r} is {v.type}; the loop-nest "
                                              f"lowering computes {', '.join(dtypes)} only")

    def input(self, v: Value) -> Tensor:
        """The kernel parameter holding input value `v` (registered on first use)."""
        t = self._inputs.get(v.name)
        if t is None:
            ty = self._typed(v).type
            t = self._inputs[v.name] = Tensor(v.name, ty.shape, ty.dtype)
        return t

    def output(self, v: Value) -> Tensor:
        ty = self._typed(v).type
        return Tensor(v.name, ty.shape, ty.dtype)

    def local(self, base: str, dtype: str) -> Tensor:
        """A one-element local scalar, named apart from every value the node touches."""
        taken = {v.name for v in self.node.inputs + self.node.outputs if v is not None}
        taken |= {t.name for t in self._locals}
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        t = Tensor(name, (1,), dtype, "local")
        self._locals.append(t)
        return t

    def kernel(self, outputs: Sequence[Tensor], body: Iterable[Stmt]) -> Kernel:
        order = [v.name for v in self.node.inputs if v is not None]
        inputs = tuple(sorted(self._inputs.values(), key=lambda t: order.index(t.name)))
        k = Kernel(kernel_name(self.node), inputs, tuple(outputs), tuple(body),
                   tuple(self._locals))
        verify_kernel(k)   # a lowering bug shows here, naming the kernel, not in the C
        return k


def nest(axes: Sequence[Axis], body: Sequence[Stmt], independent: int = 0) -> tuple[Stmt, ...]:
    """Loops over `axes` (outermost first) around `body`. The first `independent` axes are
    those whose iterations write disjoint elements; the first of them with more than one
    iteration becomes the parallel loop (none when all have one)."""
    par = next((i for i, (_, n) in enumerate(axes[:independent]) if n > 1), None)
    stmts = tuple(body)
    for i in reversed(range(len(axes))):
        var, extent = axes[i]
        stmts = (Loop(var, extent, stmts, "parallel" if i == par else "serial"),)
    return stmts


def reduction_axes(axes: Iterable[Axis]) -> tuple[list[Axis], dict[str, Affine]]:
    """Reduction loops, without those of extent 1; and each variable's index (0 for dropped
    ones), so a 1x1 convolution has no kernel loops at all."""
    kept, index = [], {}
    for var, extent in axes:
        if extent > 1:
            kept.append((var, extent))
            index[var] = aff(var)
        else:
            index[var] = aff(0)
    return kept, index


def load(t: Tensor, index: Sequence, extents: dict[str, int], fill: float) -> Load:
    """A load of t[index], reading `fill` out of bounds, but only where the index can leave
    the tensor over the loops' ranges (a load that never does stays fill-free)."""
    acc = t[tuple(index)]
    for i, n in zip(acc.index, t.shape):
        lo, hi = i.bounds(extents)
        if lo < 0 or hi >= n:
            return Load(acc, fill)
    return Load(acc)


def broadcast_index(shape: Sequence[int], out_index: Sequence) -> tuple:
    """The index into a tensor of `shape` broadcast (NumPy rules, aligned on the right) to an
    output indexed by `out_index`: dimensions of size 1 read element 0."""
    lead = len(out_index) - len(shape)
    if lead < 0:
        raise ShapeError(f"shape {list(shape)} does not broadcast to rank {len(out_index)}")
    return tuple(aff(0) if d == 1 else aff(out_index[lead + i]) for i, d in enumerate(shape))


def _const_scalar(v: Value | None) -> float | None:
    """The value of a constant with one element, else None."""
    if v is None or v.const is None or np.asarray(v.const).size != 1:
        return None
    return float(np.asarray(v.const).reshape(-1)[0])


def _const_ints(node: Node, v: Value | None, what: str) -> list[int] | None:
    """A constant integer input (shape, starts, axes...) as a list; None when omitted."""
    if v is None:
        return None
    if v.const is None:
        raise _unsupported(node, f"{what} is computed at run time; the loop nest needs it "
                                 "constant")
    return [int(x) for x in np.asarray(v.const).reshape(-1)]


def _spatial_names(rank: int) -> list[str]:
    return list("dhw"[3 - rank:]) if rank <= 3 else [f"s{i}" for i in range(rank)]


def _normalize_axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{node_context(node)}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _c(x: float) -> Const:
    return Const(float(x))


def _bin(op: str, a: Expr, b: Expr) -> Expr:
    return Binary(op, a, b)


def _un(fn: str, x: Expr) -> Expr:
    return Unary(fn, x)
