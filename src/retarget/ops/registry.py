"""The op table: one OpDef per op, holding everything the rest of retarget knows about it.

An op's NumPy `compute` function is its definition (the golden model). The reference
executor, constant folding, the CPU fallback and every simulator's check call it. A `fast`
function may sit beside it (for instance conv via im2col + BLAS); tests check it against
`compute`.

Conventions
- compute(*inputs, **attrs) -> ndarray | tuple[ndarray, ...]; omitted optional inputs are None.
- infer(attrs, types, consts) -> list[TensorType]; `types[i]` is the i-th input's TensorType
  (None if omitted), `consts[i]` its constant value when known (else None). Ops whose output
  shape depends on a tensor's value (Reshape, Expand, Range...) read it from `consts` and raise
  ShapeError when it is not constant.
- macs(attrs, in_types, out_types) -> int: multiply-accumulates for one execution.
- attrs: defaults for every attribute; REQUIRED for those without one. `resolve_attrs` fills
  defaults and rejects unknown names, so compute/infer always see the full set.
- fast_skips_outputs: the fast path takes a `num_outputs=` keyword, how many leading outputs
  the caller reads, and may return only those (MaxPool skips its Indices). `compute` always
  returns every output: it is the definition.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ShapeError, UnsupportedOpError, node_context
from ..ir.types import TensorType


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def _no_macs(attrs, in_types, out_types) -> int:
    return 0


@dataclass(frozen=True, slots=True)
class OpDef:
    name: str
    compute: Callable[..., Any]
    infer: Callable[[dict, list, list], list[TensorType]]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    macs: Callable[[dict, list, list], int] = _no_macs
    fast: Callable[..., Any] | None = None
    num_inputs: tuple[int, int] = (1, 1)  # (min, max) count, omitted optionals included in max
    num_outputs: int = 1
    doc: str = ""
    fast_skips_outputs: bool = False

    def run(self, inputs: list, attrs: dict, fast: bool = True,
            num_outputs: int | None = None) -> list[np.ndarray]:
        """Execute the op: the fast path when there is one and `fast`, else the definition.
        `num_outputs` (default: all) is how many leading outputs the caller will read; the
        result may then hold only those."""
        if fast and self.fast is not None:
            if self.fast_skips_outputs:
                out = self.fast(*inputs, num_outputs=num_outputs or self.num_outputs, **attrs)
            else:
                out = self.fast(*inputs, **attrs)
        else:
            out = self.compute(*inputs, **attrs)
        return list(out) if isinstance(out, (tuple, list)) else [out]


OPS: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in OPS:
        raise ValueError(f"op {opdef.name!r} registered twice")
    OPS[opdef.name] = opdef
    return opdef


def get_op(op: str, node=None) -> OpDef:
    """The OpDef for `op`, or UnsupportedOpError naming the node and listing what is supported."""
    try:
        return OPS[op]
    except KeyError:
        where = f" (node '{node.name}')" if node is not None else ""
        raise UnsupportedOpError(
            f"op {op!r}{where} is not supported by retarget; supported ops: "
            f"{', '.join(sorted(OPS))}") from None


def resolve_attrs(node) -> dict:
    """The node's attributes with defaults filled in; unknown or missing required ones raise."""
    opdef = get_op(node.op, node)
    unknown = set(node.attrs) - set(opdef.attrs)
    if unknown:
        raise UnsupportedOpError(f"{node_context(node)}: unsupported attribute(s) "
                                 f"{sorted(unknown)}; known: {sorted(opdef.attrs)}")
    attrs = {}
    for k, default in opdef.attrs.items():
        if k in node.attrs:
            value = node.attrs[k]
            if isinstance(default, (int, float)) and not isinstance(default, bool) and not \
                    isinstance(value, (int, float, np.number, np.ndarray)):
                raise ShapeError(f"{node_context(node)}: attribute {k!r} must be a number, got "
                                 f"{value!r}")
            attrs[k] = value
        elif default is REQUIRED:
            raise ShapeError(f"{node_context(node)}: required attribute {k!r} is missing")
        else:
            attrs[k] = default
    return attrs


def check_arity(node) -> None:
    opdef = get_op(node.op, node)
    lo, hi = opdef.num_inputs
    n = len(node.inputs)
    required_missing = any(v is None for v in node.inputs[:lo])
    if n < lo or n > hi or required_missing:
        raise ShapeError(f"{node_context(node)}: takes {lo}..{hi} inputs "
                         f"({lo} required), got {n}")
