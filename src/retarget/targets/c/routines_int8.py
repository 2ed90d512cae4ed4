"""The `c` target's int8 mode: the integer ops of the quantised graph (ops/quantized.py, and
int8 Conv / Gemm / MaxPool / Pad / Concat) as calls of the hand-written integer routines of
targets/c/kernels/int8.c, bit-exact with the integer reference.

    plan_int8(region)        # a call (aot.lower.Fused) for every integer node of the region
    int8_support(node)       # None when a routine runs the node, else why not

Each Conv / Gemm with int8 operands is one call with the Requantize / RequantizeMul that is
its sole reader fused into its epilogue (int32 accumulation, then the output stage, exact as
the reference's int64) and, for a group-1 conv, the int8 Pad its input alone comes from fused
into its input rewrite; every other integer node is a call of its own. The loop-nest IR has no
integer shifts, so these calls carry a signature kernel (their tensors, no statements): the
verifier still checks every binding against the buffers, `check_int8` checks the routine's
integer arguments against the tensors' sizes, and the meaning is the nodes' definitions in
ops/quantized.py and ops/nn.py, which the tests compare bit for bit on every zoo network.

Per op, what the routine reproduces of the reference:
- QuantizeP2: x * 2^f in double (exact), floor(v + 1/2) or rint, clip, to int8.
- QuantizeLinear / DequantizeLinear (ONNX, one float32 scale and zero point, int8): rint of
  the float32 quotient x / s plus the zero point, clipped / (x - zp) * s in float32.
- DequantizeP2: int8 * 2^-f in double, rounded to float32.
- Requantize / RequantizeMul: saturate(round_shift(x * m, s)) per channel or per tensor
  (Requantize: m = 1, s may be a left shift).
- QAdd / QAddMul: saturate(round_shift(a * ma + b * mb, s)), QAdd's ma = 2^shift_a.
- MaxPool (pads never win: -128 is the reference's pad and a real element beats it),
  SumPool (zero pad, int32 sums), Pad (zeros on the spatial dims), Concat (byte copies).
- Gather (constant indices, negative ones counted from the end) and Transpose (rank <= 6) of
  int8: element copies, as the window packing of a narrow first convolution on vta needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import GraphError
from ...ir.graph import Node, Value
from ...loopnest.ir import Kernel, Tensor
from ...loopnest.register_tile import Scheduled
from ...ops.registry import resolve_attrs
from ..aot.lower import Fused
from ..aot.program import Call, Routine
from ..base import Region
from .packing import DKB, IKB, AsInt32, DotPacking, IntBlockPacking
from .packing_int8 import FKB, FlatPacking

INT8_FILES = ("int8.c", "int8_dot.c")
# routines that write a scratch tensor after their output (the relaid input)
_SCRATCH_ROUTINES = ("rt_conv_s8_dot", "rt_conv_s8_flat")
FLAT_TAIL = 16            # int8_dot.c RT_FTAIL: scratch words past the relaid input
# rt_conv_s8_flat for a stride-1 layer with at least this many output positions (one vector),
# and, unless 1 x 1, at least FLAT_MIN_3X3 (on tiny maps with big windows the channels-in-lanes
# rt_conv_s8_dot is faster: benchmarks in docs/benchmarks.md, "int8 kernels")
FLAT_MIN_POSITIONS = 16
FLAT_MIN_3X3 = 64
# routine name -> number of pointer operands (the int8 routines of int8.c)
INT8_ROUTINES = {"rt_quantize_p2": 2, "rt_dequantize_p2": 2, "rt_requantize_s32": 4,
                 "rt_quantize_linear": 2, "rt_dequantize_linear": 2,
                 "rt_qadd_s8": 3, "rt_pad_s8": 2, "rt_pool_s8": 2, "rt_conv_s8": 6,
                 "rt_conv_s8_dot": 8, "rt_conv_s8_flat": 8, "rt_dwconv_s8": 6,
                 "rt_gather_s8": 3, "rt_transpose_s8": 2, "rt_concat": -1}
_INT = ("int8", "int32")
MAX_POOL_WIDTH = 4096     # int8.c rt_pool_s8's row buffer
MAX_TRANSPOSE_RANK = 6    # int8.c rt_transpose_s8's loop nest


def _t(v: Value, name: str | None = None, shape=None, dtype: str | None = None) -> Tensor:
    return Tensor(name or v.name, tuple(shape or v.type.shape), dtype or v.type.dtype)


def _dtype(v: Value | None) -> str | None:
    return None if v is None or v.type is None else v.type.dtype


def _const_int(v: Value | None) -> bool:
    return v is not None and v.is_const and np.asarray(v.const).dtype.kind in "iu"


def _stage(node: Node) -> tuple[tuple[Value | None, Value | None], tuple[int, int, int, int, int]] | None:
    """A Requantize / RequantizeMul to int8 on channel axis 1: its (multipliers, shifts)
    arrays (None: per tensor) and (m0, s0, lo, hi, half_even); None if not that."""
    a = resolve_attrs(node)
    if a["dtype"] != "int8" or _dtype(node.inputs[0]) != "int32":
        return None
    rank = len(node.inputs[0].type.shape)
    per_channel = len([v for v in node.inputs[1:] if v is not None]) > 0
    if per_channel and a["axis"] % rank != 1:
        return None
    half_even = int(a["rounding"] == "half_even")
    if node.op == "Requantize":
        shifts = node.input(1)
        if shifts is not None and not _const_int(shifts):
            return None
        s0 = 0 if shifts is not None else int(a["shift"])
        return (None, shifts), (1, s0, int(a["lo"]), int(a["hi"]), half_even)
    muls, shifts = node.input(1), node.input(2)
    if muls is not None and not (_const_int(muls) and _const_int(shifts)):
        return None
    m0 = 0 if muls is not None else int(a["multiplier"])
    s0 = 0 if muls is not None else int(a["shift"])
    return (muls, shifts), (m0, s0, int(a["lo"]), int(a["hi"]), half_even)


@dataclass(frozen=True, slots=True)
class _IntLayer:
    x: Value
    w: Value
    bias: Value | None
    transpose: bool
    ints: tuple[int, ...]      # N, C, Hp, Wp, K, R, S, sh, sw, OH, OW, G
    groups: int


def _int_layer(node: Node) -> _IntLayer | str:
    """An int8 Conv / Gemm as rt_conv_s8 sees it, or why it is not one."""
    x, w = node.inputs[0], node.inputs[1]
    b = node.input(2)
    y = node.outputs[0]
    if _dtype(x) != "int8" or _dtype(w) != "int8" or _dtype(y) != "int32" or not w.is_const:
        return "its data and weights must be int8 (weights constant) with an int32 result"
    if b is not None and (_dtype(b) != "int32" or not b.is_const):
        return "its bias must be a constant int32"
    a = resolve_attrs(node)
    if node.op == "Conv":
        if len(x.type.shape) != 4:
            return "only 2-D convolutions"
        if any(d != 1 for d in a.get("dilations") or (1, 1)) or any(a.get("pads") or ()) or \
                a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return "dilated or implicitly padded convolutions (explicit padding runs first)"
        n, c, hp, wp = x.type.shape
        k, _, r, s = w.type.shape
        sh, sw = a.get("strides") or (1, 1)
        oh, ow = y.type.shape[2:]
        g = int(a["group"])
        if b is not None and b.type.shape != (k,):
            return "bias shape"
        return _IntLayer(x, w, b, False, (n, c, hp, wp, k, r, s, sh, sw, oh, ow, g), g)
    if node.op == "Gemm":
        if a["transA"] or float(a["alpha"]) != 1.0 or float(a["beta"]) != 1.0:
            return "Gemm with transA, alpha or beta"
        if len(x.type.shape) != 2:
            return "2-D Gemm only"
        n, c = x.type.shape
        k = y.type.shape[1]
        if b is not None and b.type.shape not in ((k,), (1, k)):
            return "bias shape"
        return _IntLayer(x, w, b, not a["transB"], (n, c, 1, 1, k, 1, 1, 1, 1, 1, 1, 1), 1)
    return f"{node.op} is not a convolution"


def _pool_geometry(node: Node) -> tuple[int, ...] | str:
    a = resolve_attrs(node)
    x, y = node.inputs[0], node.outputs[0]
    if len(x.type.shape) != 4 or len(node.outputs) != 1:
        return "only 2-D pooling with one output"
    if any(d != 1 for d in (a.get("dilations") or (1, 1))) or \
            a.get("auto_pad", "NOTSET") != "NOTSET":
        return "dilated or auto-padded pooling"
    n, c, h, w = x.type.shape
    r, s = a["kernel_shape"]
    sh, sw = a.get("strides") or (1, 1)
    pads = a.get("pads") or (0, 0, 0, 0)
    oh, ow = y.type.shape[2:]
    if ow > MAX_POOL_WIDTH:
        return f"output rows wider than {MAX_POOL_WIDTH}"
    return (n * c, h, w, r, s, sh, sw, pads[0], pads[1], oh, ow)


def int8_support(node: Node) -> str | None:
    """None when an int8 routine runs `node` (alone, or fused as plan_int8 does), else why
    not."""
    op, ins, outs = node.op, node.inputs, node.outputs
    if any(v is not None and v.type is None for v in ins + outs):
        return "untyped values"
    if op in ("Conv", "Gemm"):
        layer = _int_layer(node)
        return layer if isinstance(layer, str) else None
    if op in ("Requantize", "RequantizeMul"):
        return None if _stage(node) is not None else \
            "only int32 -> int8 requantisation on the channel axis with constant parameters"
    if op == "QuantizeP2":
        a = resolve_attrs(node)
        return None if _dtype(ins[0]) == "float32" and a["dtype"] == "int8" else \
            "only float32 -> int8"
    if op == "DequantizeP2":
        a = resolve_attrs(node)
        return None if _dtype(ins[0]) == "int8" and a["dtype"] == "float32" else \
            "only int8 -> float32"
    if op in ("QuantizeLinear", "DequantizeLinear"):
        return _linear_support(node)
    if op in ("QAdd", "QAddMul"):
        a = resolve_attrs(node)
        same = ins[0].type.shape == ins[1].type.shape == outs[0].type.shape
        ok = same and _dtype(ins[0]) == _dtype(ins[1]) == "int8" and a["dtype"] == "int8"
        return None if ok else "only same-shaped int8 operands and result"
    if op in ("MaxPool", "SumPool"):
        if _dtype(ins[0]) != "int8":
            return "only int8 pooling"
        geo = _pool_geometry(node)
        return geo if isinstance(geo, str) else None
    if op == "Pad":
        a = resolve_attrs(node)
        pads = ins[1].const if ins[1] is not None and ins[1].is_const else None
        value = node.input(2)
        if _dtype(ins[0]) != "int8" or len(ins[0].type.shape) != 4 or pads is None or \
                a.get("mode", "constant") != "constant" or node.input(3) is not None:
            return "only constant zero padding of a 4-D int8 tensor"
        p = [int(v) for v in np.asarray(pads).reshape(-1)]
        if any(p[i] for i in (0, 1, 4, 5)) or min(p) < 0 or (
                value is not None and (not value.is_const or np.asarray(value.const).any())):
            return "only zero padding of the spatial dims"
        return None
    if op == "Concat":
        return None if all(_dtype(v) == "int8" for v in ins + outs) else "only int8 concat"
    if op in ("Gather", "Transpose"):
        return _movement_support(node)
    return f"no int8 routine for {op}"


def _movement_support(node: Node) -> str | None:
    """int8 Gather by constant indices within the axis, int8 Transpose of rank <= 6."""
    x, y = node.inputs[0], node.outputs[0]
    if _dtype(x) != "int8" or _dtype(y) != "int8":
        return f"only int8 {node.op}"
    if node.op == "Transpose":
        return None if len(x.type.shape) <= MAX_TRANSPOSE_RANK else \
            f"only rank <= {MAX_TRANSPOSE_RANK}"
    idx = node.input(1)
    if not _const_int(idx):
        return "only constant integer indices"
    n = x.type.shape[int(resolve_attrs(node)["axis"]) % len(x.type.shape)]
    i = np.asarray(idx.const)
    if i.size == 0 or x.type.numel == 0:
        return "only a non-empty gather"
    return None if i.min() >= -n and i.max() < n else f"indices outside [-{n}, {n})"


def _linear_support(node: Node) -> str | None:
    """ONNX QuantizeLinear (float32 -> int8) / DequantizeLinear (int8 -> float32) with one
    constant float32 scale and, if any, one constant zero point."""
    x, y = node.inputs[0], node.outputs[0]
    scale, zp = node.input(1), node.input(2)
    want = ("float32", "int8") if node.op == "QuantizeLinear" else ("int8", "float32")
    if (_dtype(x), _dtype(y)) != want:
        return f"only {want[0]} -> {want[1]}"
    if scale is None or not scale.is_const or np.asarray(scale.const).size != 1 or \
            np.asarray(scale.const).dtype != np.float32:
        return "only one constant float32 scale"
    if zp is not None and (not zp.is_const or np.asarray(zp.const).size != 1):
        return "only one constant zero point"
    return None


def _linear_args(node: Node) -> tuple[int, float]:
    """(zero point, scale) of a QuantizeLinear / DequantizeLinear _linear_support accepts."""
    zp = node.input(2)
    return (0 if zp is None else int(np.asarray(zp.const).reshape(-1)[0]),
            float(np.asarray(node.inputs[1].const, np.float32).reshape(-1)[0]))


INT8_OPS = frozenset({"Conv", "Gemm", "Requantize", "RequantizeMul", "QuantizeP2",
                      "QuantizeLinear", "DequantizeLinear",
                      "DequantizeP2", "QAdd", "QAddMul", "MaxPool", "SumPool", "Pad", "Concat",
                      "Gather", "Transpose"})


def is_integer_node(node: Node) -> bool:
    """Whether `node` computes on integers (the int8 mode's business, not the float lowering).
    A Gather's integer indices do not make it one: its data decides."""
    values = node.inputs[:1] + node.outputs if node.op == "Gather" else node.inputs + node.outputs
    return any(_dtype(v) in _INT for v in values if v is not None) and node.op in INT8_OPS


# ---- planning ----------------------------------------------------------------------------------
def _signature(name: str, inputs: Sequence[Tensor], output: Tensor) -> Kernel:
    return Kernel(f"int8_{name}", tuple(inputs), (output,), ())


def _call(nodes: tuple[Node, ...], inputs: list[Tensor], out: Tensor, routine: str,
          ints: Sequence[int], operands: Sequence[int] | None = None, relayouts=(),
          floats: Sequence[float] = ()) -> Fused:
    k = _signature(nodes[0].name, inputs, out)
    ops = tuple(range(len(k.params))) if operands is None else tuple(operands)
    return Fused(nodes, Scheduled(k, tuple(relayouts)),
                 Routine(routine, ops, tuple(int(i) for i in ints),
                         tuple(float(f) for f in floats)))


def _snake(op: str) -> str:
    """QuantizeLinear -> quantize_linear."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in op).lstrip("_")


def _stage_inputs(stage_node: Node | None, inputs: list[Tensor], relayouts: list
                  ) -> tuple[int, int, tuple[int, ...]]:
    """Appends the output stage's per-channel arrays (as int32) to `inputs`; returns their
    operand positions (-1: per tensor) and the stage's integer arguments."""
    if stage_node is None:
        return -1, -1, (0, 0, -128, 127, 0)
    (muls, shifts), stage = _stage(stage_node)
    pos = []
    for v in (muls, shifts):
        if v is None:
            pos.append(-1)
            continue
        cast = AsInt32(f"{v.name}__i32", v.name)
        relayouts.append(cast)
        pos.append(len(inputs))
        inputs.append(Tensor(cast.name, tuple(v.type.shape), "int32"))
    return pos[0], pos[1], stage


def _layer_epilogue(L: "_IntLayer", node: Node, stage_node: Node | None, inputs: list[Tensor],
                    relayouts: list) -> tuple[int, int, int, tuple[int, ...], Value]:
    """Appends a layer's bias and output-stage arrays to `inputs`: their operand positions
    (bias, multipliers, shifts; -1 where absent), the stage's integer arguments and the value
    the call writes."""
    bias = -1
    if L.bias is not None:
        bias = len(inputs)
        inputs.append(_t(L.bias))
    mul, shift, stage = _stage_inputs(stage_node, inputs, relayouts)
    out_value = node.outputs[0] if stage_node is None else stage_node.outputs[0]
    return bias, mul, shift, stage, out_value


def _flat(L: _IntLayer) -> bool:
    """Whether rt_conv_s8_flat (output positions in the lanes) runs the group-1 layer, else
    rt_conv_s8_dot (output channels in the lanes)."""
    n, c, hp, wp, k, r, s, sh, sw, oh, ow, _ = L.ints
    positions = oh * ow
    return sh == sw == 1 and positions >= FLAT_MIN_POSITIONS and \
        (r * s == 1 or positions >= FLAT_MIN_3X3)


def _pad_begin(pad: Node) -> tuple[int, int]:
    """The rows and columns an int8 Pad (int8_support's: zeros on the spatial dims) adds
    before the map."""
    p = [int(v) for v in np.asarray(pad.inputs[1].const).reshape(-1)]
    return p[2], p[3]


def _quad_call(node: Node, stage_node: Node | None, pad: Node | None = None) -> Fused:
    """A group-1 int8 layer on rt_conv_s8_flat or rt_conv_s8_dot (dot products of 4 input
    channels), its input rewritten into a scratch; with `pad` (the Pad its input comes
    from), that rewrite pads the Pad's input instead, so the padded map is never stored."""
    L = _int_layer(node)
    n, c, hp, wp, k, r, s, sh, sw, oh, ow, _ = L.ints
    source, (pt, pl) = (L.x, (0, 0)) if pad is None else (pad.inputs[0], _pad_begin(pad))
    h, w = source.type.shape[2:] if len(source.type.shape) == 4 else (hp, wp)
    flat = _flat(L)
    packing, block = (FlatPacking, FKB) if flat else (DotPacking, DKB)
    blocks, c4 = -(-k // block), -(-c // 4)
    tag = f"__{'f' if flat else 'd'}{block}{'t' if L.transpose else ''}"
    pack = packing(f"{L.w.name}{tag}", L.w.name, L.transpose)
    corr = packing(f"{L.w.name}{tag}_corr", L.w.name, L.transpose, True)
    inputs = [_t(source), Tensor(pack.name, (blocks, c4, r, s, block, 4), "int8"),
              Tensor(corr.name, (blocks * block,), "int32")]
    relayouts = [pack, corr]
    bias, mul, shift, stage, out_value = _layer_epilogue(L, node, stage_node, inputs, relayouts)
    fused = int(stage_node is not None)
    geometry = (n, c, h, w, pt, pl, hp, wp, k, r, s)
    if flat:      # one image at a time, and the words the last tile may read past it
        scratch = Tensor(f"{out_value.name}__xs", (c4 * hp * wp + FLAT_TAIL,), "int32")
        name, ints = "rt_conv_s8_flat", geometry + (oh, ow, fused) + stage
    else:
        scratch = Tensor(f"{out_value.name}__xs", (n, c4, hp, wp), "int32")
        name, ints = "rt_conv_s8_dot", geometry + (sh, sw, oh, ow, fused) + stage
    nodes = tuple(x for x in (pad, node, stage_node) if x is not None)
    k_sig = Kernel(f"int8_{node.name}", tuple(inputs), (_t(out_value), scratch), ())
    routine = Routine(name, (0, 1, 2, bias, mul, shift, len(inputs), len(inputs) + 1),
                      tuple(int(i) for i in ints))
    return Fused(nodes, Scheduled(k_sig, tuple(relayouts)), routine, (scratch.name,))


def _depthwise(L: _IntLayer) -> bool:
    n, c, hp, wp, k, r, s, sh, sw, oh, ow, g = L.ints
    return g == c == k > 1 and ow <= MAX_POOL_WIDTH


def _dw_call(node: Node, stage_node: Node | None) -> Fused:
    """A depthwise int8 conv on rt_dwconv_s8 (its weights read as they are)."""
    L = _int_layer(node)
    inputs, relayouts = [_t(L.x), _t(L.w)], []
    bias, mul, shift, stage, out_value = _layer_epilogue(L, node, stage_node, inputs, relayouts)
    n, c, hp, wp, k, r, s, sh, sw, oh, ow, g = L.ints
    ints = (n, c, hp, wp, r, s, sh, sw, oh, ow, int(stage_node is not None)) + stage
    nodes = (node,) if stage_node is None else (node, stage_node)
    return _call(nodes, inputs, _t(out_value), "rt_dwconv_s8", ints,
                 (0, 1, bias, mul, shift, len(inputs)), relayouts)


def _conv_call(node: Node, stage_node: Node | None, pad: Node | None) -> Fused:
    L = _int_layer(node)
    if L.groups == 1:
        return _quad_call(node, stage_node, pad)
    if _depthwise(L):
        return _dw_call(node, stage_node)
    pack = IntBlockPacking(f"{L.w.name}__i{IKB}{'t' if L.transpose else ''}", L.w.name,
                           L.groups, L.transpose)
    n, c, hp, wp, k, r, s, sh, sw, oh, ow, g = L.ints
    inputs = [_t(L.x), Tensor(pack.name, (g, -(-(k // g) // IKB), c // g, r, s, IKB), "int32")]
    relayouts = [pack]
    bias, mul, shift, stage, out_value = _layer_epilogue(L, node, stage_node, inputs, relayouts)
    out = _t(out_value)
    operands = (0, 1, bias, mul, shift, len(inputs))
    ints = L.ints + (int(stage_node is not None),) + stage
    nodes = (node,) if stage_node is None else (node, stage_node)
    return _call(nodes, inputs, out, "rt_conv_s8", ints, operands, relayouts)


def _single_call(node: Node) -> Fused:
    op, a = node.op, resolve_attrs(node)
    x, y = node.inputs[0], node.outputs[0]
    if op == "QuantizeP2":
        return _call((node,), [_t(x)], _t(y), "rt_quantize_p2",
                     (x.type.numel, a["frac_bits"], a["rounding"] == "half_even", a["lo"],
                      a["hi"]))
    if op == "DequantizeP2":
        return _call((node,), [_t(x)], _t(y), "rt_dequantize_p2", (x.type.numel, a["frac_bits"]))
    if op in ("QuantizeLinear", "DequantizeLinear"):
        zp, scale = _linear_args(node)
        ints = (x.type.numel, zp, -128, 127) if op == "QuantizeLinear" else (x.type.numel, zp)
        return _call((node,), [_t(x)], _t(y), "rt_" + _snake(op), ints, floats=(scale,))
    if op in ("Requantize", "RequantizeMul"):
        inputs, relayouts = [_t(x)], []
        mul, shift, stage = _stage_inputs(node, inputs, relayouts)
        shape = x.type.shape
        c = shape[1] if len(shape) > 1 else 1
        inner = int(np.prod(shape[2:], dtype=np.int64)) if len(shape) > 2 else 1
        return _call((node,), inputs, _t(y), "rt_requantize_s32",
                     (shape[0], c, inner) + stage, (0, mul, shift, len(inputs)), relayouts)
    if op in ("QAdd", "QAddMul"):
        b = node.inputs[1]
        half_even = int(a["rounding"] == "half_even")
        if op == "QAdd":
            ma, mb, s = 1 << a["shift_a"], 1 << a["shift_b"], a["out_shift"]
        else:
            ma, mb, s = a["mul_a"], a["mul_b"], a["shift"]
        inputs = [_t(x)] + ([] if b is x else [_t(b)])
        return _call((node,), inputs, _t(y), "rt_qadd_s8",
                     (y.type.numel, ma, mb, s, a["lo"], a["hi"], half_even),
                     (0, len(inputs) - 1, len(inputs)))
    if op in ("MaxPool", "SumPool"):
        return _call((node,), [_t(x)], _t(y), "rt_pool_s8",
                     (int(op == "SumPool"),) + _pool_geometry(node))
    if op == "Pad":
        n, c, h, w = x.type.shape
        return _call((node,), [_t(x)], _t(y), "rt_pad_s8",
                     (n * c, h, w) + _pad_begin(node) + tuple(y.type.shape[2:]))
    if op == "Concat":
        axis = int(a["axis"]) % len(y.type.shape)
        rows = int(np.prod(y.type.shape[:axis], dtype=np.int64))
        seen, inputs, operands = {}, [], []
        for v in node.inputs:
            if v.name not in seen:
                seen[v.name] = len(inputs)
                inputs.append(_t(v))
            operands.append(seen[v.name])
        operands.append(len(inputs))
        row_bytes = [v.type.nbytes // rows for v in node.inputs]
        return _call((node,), inputs, _t(y), "rt_concat", [rows, y.type.nbytes // rows] +
                     row_bytes, operands)
    if op == "Gather":
        idx = node.inputs[1]
        axis = int(a["axis"]) % len(x.type.shape)
        shape = x.type.shape
        cast = AsInt32(f"{idx.name}__i32", idx.name)
        ints = (int(np.prod(shape[:axis], dtype=np.int64)), shape[axis], idx.type.numel,
                int(np.prod(shape[axis + 1:], dtype=np.int64)))
        return _call((node,), [_t(x), Tensor(cast.name, tuple(idx.type.shape), "int32")],
                     _t(y), "rt_gather_s8", ints, relayouts=(cast,))
    if op == "Transpose":
        rank = len(x.type.shape)
        perm = a.get("perm") or tuple(reversed(range(rank)))
        pad = MAX_TRANSPOSE_RANK - rank
        ints = (1,) * pad + tuple(x.type.shape) + tuple(range(pad)) + \
            tuple(int(p) % rank + pad for p in perm)
        return _call((node,), [_t(x)], _t(y), "rt_transpose_s8", ints)
    raise GraphError(f"no int8 routine for {op} {node.name!r}")


def _padding_of(region: Region, readers: dict[str, list[Node]], outputs: set[str],
                taken: set[str]) -> dict[str, Node]:
    """conv name -> the int8 Pad whose output only that group-1 int8 conv reads (not a
    region output): the conv's input rewrite pads the map itself (_quad_call)."""
    producer = {v.name: n for n in region.nodes for v in n.outputs}
    pads = {}
    for node in region.nodes:
        if node.op != "Conv" or not is_integer_node(node) or int8_support(node) is not None:
            continue
        x = node.inputs[0]
        pad = producer.get(x.name)
        if pad is None or pad.op != "Pad" or pad.name in taken or x.name in outputs or \
                len(readers.get(x.name, [])) != 1 or int8_support(pad) is not None or \
                _int_layer(node).groups != 1:
            continue
        pads[node.name] = pad
    return pads


def plan_int8(region: Region, taken: set[str] = frozenset()) -> list[Fused]:
    """A call for every integer node of the region (those not in `taken`)."""
    readers: dict[str, list[Node]] = {}
    for n in region.nodes:
        for v in n.inputs:
            if v is not None:
                readers.setdefault(v.name, []).append(n)
    outputs = {v.name for v in region.outputs}
    pads = _padding_of(region, readers, outputs, taken)
    done, groups = set(taken) | {p.name for p in pads.values()}, []
    for node in region.nodes:
        if node.name in done or not is_integer_node(node) or int8_support(node) is not None:
            continue
        if node.op in ("Conv", "Gemm"):
            y = node.outputs[0]
            nxt = readers.get(y.name, [])
            stage = nxt[0] if (len(nxt) == 1 and y.name not in outputs and nxt[0].op in
                               ("Requantize", "RequantizeMul") and _stage(nxt[0])) else None
            groups.append(_conv_call(node, stage, pads.get(node.name)))
            done.update([node.name] + ([stage.name] if stage else []))
        else:
            groups.append(_single_call(node))
            done.add(node.name)
    return groups


# ---- checking and printing a call ----------------------------------------------------------------
def _expected(r: Routine, params: Sequence[Tensor]) -> list[tuple[int, str, int]]:
    """(operand position, dtype, element count) every operand of `r` must have."""
    i = r.ints
    if r.name == "rt_quantize_p2":
        return [(0, "float32", i[0]), (1, "int8", i[0])]
    if r.name == "rt_dequantize_p2":
        return [(0, "int8", i[0]), (1, "float32", i[0])]
    if r.name == "rt_quantize_linear":
        return [(0, "float32", i[0]), (1, "int8", i[0])]
    if r.name == "rt_dequantize_linear":
        return [(0, "int8", i[0]), (1, "float32", i[0])]
    if r.name == "rt_requantize_s32":
        n = i[0] * i[1] * i[2]
        return [(0, "int32", n), (1, "int32", i[1]), (2, "int32", i[1]), (3, "int8", n)]
    if r.name == "rt_qadd_s8":
        return [(0, "int8", i[0]), (1, "int8", i[0]), (2, "int8", i[0])]
    if r.name == "rt_pad_s8":
        nc, h, w, pt, pl, hp, wp = i
        _check_padded(h, w, pt, pl, hp, wp)
        return [(0, "int8", nc * h * w), (1, "int8", nc * hp * wp)]
    if r.name == "rt_pool_s8":
        is_sum, nc, h, w, *_, oh, ow = i
        if ow > MAX_POOL_WIDTH:
            raise ValueError(f"output rows wider than {MAX_POOL_WIDTH}")
        return [(0, "int8", nc * h * w), (1, "int32" if is_sum else "int8", nc * oh * ow)]
    if r.name == "rt_conv_s8":
        n, c, hp, wp, k, rr, ss, sh, sw, oh, ow, g, out_s8 = i[:13]
        if c % g or k % g or (hp - rr) // sh + 1 != oh or (wp - ss) // sw + 1 != ow or \
                hp < rr or wp < ss:
            raise ValueError("window, strides and sizes disagree")
        wsize = g * -(-(k // g) // IKB) * (c // g) * rr * ss * IKB
        return [(0, "int8", n * c * hp * wp), (1, "int32", wsize), (2, "int32", k),
                (3, "int32", k), (4, "int32", k), (5, "int8" if out_s8 else "int32", n * k * oh * ow)]
    if r.name == "rt_conv_s8_dot":
        n, c, h, w, pt, pl, hp, wp, k, rr, ss, sh, sw, oh, ow, out_s8 = i[:16]
        _check_padded(h, w, pt, pl, hp, wp)
        if (hp - rr) // sh + 1 != oh or (wp - ss) // sw + 1 != ow or hp < rr or wp < ss:
            raise ValueError("window, strides and sizes disagree")
        blocks, c4 = -(-k // DKB), -(-c // 4)
        return [(0, "int8", n * c * h * w), (1, "int8", blocks * c4 * rr * ss * DKB * 4),
                (2, "int32", blocks * DKB), (3, "int32", k), (4, "int32", k), (5, "int32", k),
                (6, "int8" if out_s8 else "int32", n * k * oh * ow),
                (7, "int32", n * c4 * hp * wp)]
    if r.name == "rt_conv_s8_flat":
        n, c, h, w, pt, pl, hp, wp, k, rr, ss, oh, ow, out_s8 = i[:14]
        _check_padded(h, w, pt, pl, hp, wp)
        if hp - rr + 1 != oh or wp - ss + 1 != ow or hp < rr or wp < ss:
            raise ValueError("window and sizes disagree (stride 1)")
        blocks, c4 = -(-k // FKB), -(-c // 4)
        return [(0, "int8", n * c * h * w), (1, "int8", blocks * c4 * rr * ss * FKB * 4),
                (2, "int32", blocks * FKB), (3, "int32", k), (4, "int32", k), (5, "int32", k),
                (6, "int8" if out_s8 else "int32", n * k * oh * ow),
                (7, "int32", c4 * hp * wp + FLAT_TAIL)]
    if r.name == "rt_dwconv_s8":
        n, c, hp, wp, rr, ss, sh, sw, oh, ow, out_s8 = i[:11]
        if (hp - rr) // sh + 1 != oh or (wp - ss) // sw + 1 != ow or hp < rr or wp < ss or \
                ow > MAX_POOL_WIDTH:
            raise ValueError("window, strides and sizes disagree")
        return [(0, "int8", n * c * hp * wp), (1, "int8", c * rr * ss), (2, "int32", c),
                (3, "int32", c), (4, "int32", c), (5, "int8" if out_s8 else "int32",
                                                   n * c * oh * ow)]
    if r.name == "rt_gather_s8":
        outer, n, count, inner = i
        return [(0, "int8", outer * n * inner), (1, "int32", count),
                (2, "int8", outer * count * inner)]
    if r.name == "rt_transpose_s8":
        dims, perm = i[:MAX_TRANSPOSE_RANK], i[MAX_TRANSPOSE_RANK:]
        if sorted(perm) != list(range(MAX_TRANSPOSE_RANK)):
            raise ValueError(f"{list(perm)} is not a permutation")
        n = int(np.prod(dims, dtype=np.int64))
        return [(0, "int8", n), (1, "int8", n)]
    if r.name == "rt_concat":
        rows, stride, *row_bytes = i
        if sum(row_bytes) != stride or len(row_bytes) != len(r.operands) - 1:
            raise ValueError("the pieces do not fill the output rows")
        return [(j, "int8", rows * b) for j, b in enumerate(row_bytes)] + \
            [(len(row_bytes), "int8", rows * stride)]
    raise ValueError(f"unknown routine {r.name!r}")


def _check_padded(h: int, w: int, pt: int, pl: int, hp: int, wp: int) -> None:
    if min(pt, pl) < 0 or pt + h > hp or pl + w > wp:
        raise ValueError(f"a {h} x {w} map at ({pt}, {pl}) is outside the padded {hp} x {wp}")


# the routines with float arguments: (integer arguments, float arguments)
_LINEAR_ARGS = {"rt_quantize_linear": (4, 1), "rt_dequantize_linear": (2, 1)}


def check_int8(call: Call) -> None:
    """GraphError unless the call's int8 routine reads and writes exactly its kernel's
    tensors with the sizes its integer arguments say."""
    r, params = call.routine, call.kernel.params
    try:
        want = INT8_ROUTINES[r.name]
        if want != -1 and len(r.operands) != want:
            raise ValueError(f"{len(r.operands)} operands, expected {want}")
        outputs = 2 if r.name in _SCRATCH_ROUTINES else 1      # and the scratch
        if any(not -1 <= o < len(params) for o in r.operands) or \
                r.operands[-1] != len(params) - 1 or len(call.kernel.outputs) != outputs:
            raise ValueError(f"operands {r.operands} do not name the kernel's tensors")
        if any(v < 1 for v in _sizes(r)):
            raise ValueError(f"sizes {r.ints} must be positive")
        ints, floats = _LINEAR_ARGS.get(r.name, (len(r.ints), 0))
        if len(r.ints) != ints or len(r.floats) != floats or \
                not all(np.isfinite(f) for f in r.floats):
            raise ValueError(f"{len(r.ints)} integer and {len(r.floats)} float arguments "
                             f"{list(r.floats)}, expected {ints} and {floats} finite")
        for pos, dtype, count in _expected(r, params):
            o = r.operands[pos]
            if o < 0:
                continue
            t = params[o]
            if t.dtype != dtype or t.size != count:
                raise ValueError(f"operand {pos} is {t.name!r} {t.dtype}[{t.size}], expected "
                                 f"{dtype}[{count}]")
    except (KeyError, ValueError, IndexError) as e:
        raise GraphError(f"call {call.function}: routine {r.name} {list(r.ints)}: "
                         f"{e}") from None


def _sizes(r: Routine) -> tuple[int, ...]:
    """The arguments of `r` that are sizes (must be positive)."""
    i = r.ints
    return {"rt_quantize_p2": i[:1], "rt_dequantize_p2": i[:1], "rt_requantize_s32": i[:3],
            "rt_quantize_linear": i[:1], "rt_dequantize_linear": i[:1],
            "rt_qadd_s8": i[:1], "rt_pad_s8": i[:3] + i[5:], "rt_pool_s8": i[1:8] + i[10:],
            "rt_conv_s8": i[:12], "rt_conv_s8_dot": i[:4] + i[6:15],
            "rt_conv_s8_flat": i[:4] + i[6:13],
            "rt_dwconv_s8": i[:10],
            "rt_gather_s8": i, "rt_transpose_s8": i[:MAX_TRANSPOSE_RANK], "rt_concat": i}.get(r.name, ())


def int8_call(call: Call, pointers: Sequence[str]) -> str:
    """The C statement(s) of an int8 routine call."""
    check_int8(call)
    r = call.routine
    ptr = [pointers[o] if o >= 0 else "0" for o in r.operands]
    if r.name == "rt_concat":
        rows, stride, *row_bytes = r.ints
        out, offset, lines = ptr[-1], 0, []
        for p, b in zip(ptr[:-1], row_bytes):
            lines.append(f"rt_copy_rows({p}, {out}, {rows}, {b}, {stride}, {offset});")
            offset += b
        return " ".join(lines)
    floats = [f"{float(v).hex()}" for v in r.floats]    # exact C99 hexadecimal literals
    return f"{r.name}({', '.join(ptr + [str(v) for v in r.ints] + floats)});"


__all__ = ["INT8_FILES", "INT8_OPS", "INT8_ROUTINES",
           "check_int8", "int8_call", "int8_support", "is_integer_node", "plan_int8"]
