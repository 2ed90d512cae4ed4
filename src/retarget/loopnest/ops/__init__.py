"""Graph ops lowered to loop nests: what the ahead-of-time C targets (`c`,
`sunway`) generate each layer's code from.

    kernel = lower_node(node)      # a loopnest Kernel, or None for a view op
    SUPPORTED_OPS                  # the ops lower_node handles

Contract
- The Kernel's input tensors are named after the node's input values (weights and biases
  included), its outputs after the node's output values, with their types' shapes and dtypes.
  Constant scalars (a Clip bound, an Add of one number) and constant integer operands (a
  Reshape shape, Slice starts, Resize scales, reduction axes) are baked into the nest as
  constants and indices: they are not kernel inputs.
- Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout) return None: their
  output is their input's bytes in row-major order, which the memory plan aliases.
- Anything else outside what is lowered here raises UnsupportedOpError naming the node, the op
  and what is not supported; the c target then leaves the node on the CPU reference.
- Only float tensors (float32, float64) are computed; integer ops stay on the CPU.

The shape of the nests, and why
- Every op is plain loops over its output. The leading loops whose iterations write disjoint
  output elements are the "independent" ones; the first of them with more than one iteration
  is marked parallel (with batch 1 that is the output-channel loop, not the batch loop), which
  is where the naive OpenACC-style schedule splits the work over threads. Independent loops of
  extent 1 are kept (indexing a size-1 dimension by its own variable is what lets the buffering
  pass see that a nest covers a whole tensor); reduction loops of extent 1 are dropped.
- Reductions (Conv, ConvTranspose, Gemm, MatMul, pooling, reductions, LRN) are an init nest
  over the output followed by a separate perfect nest with one accumulating Store
  (reduce="+" or "max"); post-processing (an average's division, ReduceL2's sqrt) is a third
  nest. That is the form swTVM's buffering algorithms (buffering.py) tile: the init nest
  storing a constant is folded into the accumulation's buffer.
- Padding is a Load with `fill`: 0 for convolutions and average pools, -inf for max pools
  (ceil_mode's overhang is the same fill). A load whose index can never leave its tensor gets
  no fill, so unpadded convolutions stay bufferable (buffering refuses padded loads).
- Softmax, LogSoftmax and BatchNormalization keep per-row / per-channel scalars in local
  tensors declared inside the parallel loop (the C printer gives each thread its own).

What the IR cannot say, and the workarounds here
- Indices are affine: there is no integer division or modulo. Nearest Resize maps output
  index o to floor-like functions of o; its index table is cut into affine pieces with a
  replica loop (x2 upsampling is out[2*i + r] = in[i], r in 0..1), one nest per combination
  of pieces. ConvTranspose would need i = (o + pad - k) / stride: it is written per output
  phase o = stride*q + r, where the contributing taps form an arithmetic progression and the
  input index is affine in q. AveragePool's divisor varies near the borders: the division nest
  is split into rectangles of constant divisor.
- Expressions cannot read a loop index as a value, so MaxPool's Indices output (and ArgMax)
  cannot be lowered.
"""
from __future__ import annotations

from typing import Callable

from ...errors import RetargetError, UnsupportedOpError, node_context
from ...ir.graph import Node
from ..ir import Kernel
from .common import broadcast_index, c_name, kernel_name, nest
from .elementwise import (BINARY_OPS, UNARY_OPS, VARIADIC_OPS, _lower_binary, _lower_clip,
                          _lower_unary, _lower_variadic)
from .linalg import _lower_gemm, _lower_matmul
from .nn import _lower_conv, _lower_conv_transpose
from .norm import _lower_batchnorm, _lower_layernorm, _lower_lrn, _lower_softmax
from .pool import _lower_global_pool, _lower_pool
from .reduce import REDUCE_OPS, _lower_reduce
from .resize import IndexPiece, _lower_resize, affine_pieces
from .tensor import (VIEW_OPS, _lower_concat, _lower_expand, _lower_gather, _lower_pad,
                     _lower_slice, _lower_split, _lower_transpose, _lower_view)


# ---- the table ------------------------------------------------------------------------------
LOWERINGS: dict[str, Callable[[Node], Kernel | None]] = {
    **{op: _lower_unary for op in UNARY_OPS},
    **{op: _lower_binary for op in BINARY_OPS},
    **{op: _lower_variadic for op in VARIADIC_OPS},
    **{op: _lower_view for op in VIEW_OPS},
    **{op: _lower_reduce for op in REDUCE_OPS},
    "Clip": _lower_clip,
    "Conv": _lower_conv,
    "ConvTranspose": _lower_conv_transpose,
    "Gemm": _lower_gemm,
    "MatMul": _lower_matmul,
    "MaxPool": _lower_pool,
    "AveragePool": _lower_pool,
    "GlobalAveragePool": _lower_global_pool,
    "GlobalMaxPool": _lower_global_pool,
    "BatchNormalization": _lower_batchnorm,
    "LRN": _lower_lrn,
    "Softmax": _lower_softmax,
    "LogSoftmax": _lower_softmax,
    "LayerNormalization": _lower_layernorm,
    "Concat": _lower_concat,
    "Split": _lower_split,
    "Transpose": _lower_transpose,
    "Slice": _lower_slice,
    "Gather": _lower_gather,
    "Pad": _lower_pad,
    "Expand": _lower_expand,
    "Resize": _lower_resize,
}

SUPPORTED_OPS: frozenset[str] = frozenset(LOWERINGS)


def lower_node(node: Node) -> Kernel | None:
    """The loop nest computing `node` (see the module docstring for the contract), or None
    when the node is a view of its input's bytes. UnsupportedOpError for ops and attribute
    combinations not lowered; ShapeError for nodes whose types do not fit the op."""
    fn = LOWERINGS.get(node.op)
    if fn is None:
        raise UnsupportedOpError(f"{node_context(node)}: no loop-nest lowering for op "
                                 f"{node.op!r}; lowered ops: {', '.join(sorted(SUPPORTED_OPS))}")
    try:
        return fn(node)
    except RetargetError as e:
        if node.name in str(e):
            raise
        raise type(e)(f"{node_context(node)}: {e}") from None


__all__ = ["SUPPORTED_OPS", "lower_node", "c_name", "kernel_name", "nest", "broadcast_index",
           "affine_pieces", "IndexPiece", "UNARY_OPS", "BINARY_OPS", "VARIADIC_OPS",
           "VIEW_OPS", "REDUCE_OPS"]
