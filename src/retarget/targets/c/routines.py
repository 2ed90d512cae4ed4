"""The `c` target's hand-written routines (targets/c/kernels/*.c): convolutions and dense
layers, with their bias, residual add and activation fused, run by register-blocked
micro-kernels over weights packed once at build time, instead of the printed loop nest.

    groups = plan_routines(region)    # the optimised mode's fused calls (aot.lower.Fused)

Each group is a weighted layer (Conv of group 1 without dilation, on an input the
explicit-padding pass has padded; Gemm / MatMul by a constant at any batch) followed, where
its result has no other reader, by an Add of a tensor of its own shape (the residual) and a
Relu or a Clip with constant bounds. The group becomes one call whose loop-nest kernel
(`carrier`) says exactly what the routine computes, over the packed weights, so the verifier
checks its bindings and the interpreter can run it like any other kernel; the C is the
routine's (`routine_call`), which reads the same tensors in the same layouts:

    rt_conv_f32       packed wp[ceil(K/32)][C][R][S][32]: vectors along output channels,
                      one input value broadcast per output position, a tile's positions
                      along the flattened output map (any R, S, stride)
    rt_pointwise_f32  packed wp[ceil(K/12)][C][R][S][12]: a 1x1 layer (any stride, any
                      number of inputs) as Y = W X, the vectors along the output positions
                      (contiguous in NCHW), over a per-thread panel of the inputs of a
                      group of positions, the channels reduced in chunks the panel holds;
                      also a layer of few input taps (C R S <= IM2COL_ROWS: a network's
                      first conv on an RGB image), its panel the im2col rows, the zero Pad
                      before it done inside
    rt_pointwise_cl_f32  packed wp[ceil(K/16)][C][16]: a 1x1 layer at stride 1 on a map of
                      fewer than CL_POSITIONS positions (7 x 7), the vectors along the output
                      channels, each position's input broadcast (no lane idle on 49
                      positions)
    rt_dwconv_f32     a depthwise Conv (group = C = K), weights as they are [C][1][R][S],
                      the zero Pad the explicit-padding pass put before it done inside
                      (no padded copy): vectors along the output columns
    rt_maxpool_f32    a 2-D MaxPool without dilation (its padding read as -inf), the same
                      staging and vectors as rt_dwconv_f32 (whose arguments it takes); its
                      carrier is the loop-nest lowering of the node itself

Summation order differs from the reference's (as in every optimised c kernel): results are
within the target's 1e-4 tolerance, not bit-identical.
"""
from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

import numpy as np

from ...errors import GraphError
from ...ir.graph import Node, Value
from ...loopnest.ir import Binary, Const, Kernel, Load, Loop, Store, Tensor, aff
from ...loopnest.register_tile import Scheduled
from ...loopnest.ops import lower_node
from ...loopnest.verify import verify_kernel
from ...ops.pool import pool_window
from ...ops.registry import resolve_attrs
from ..aot.lower import Fused
from ..aot.program import Call, Routine
from ..base import Region
from .packing import BlockPacking
from .routines_int8 import INT8_FILES, INT8_ROUTINES, int8_call
from .routines_ort import ORT_FILES, ORT_ROUTINES, ort_call
from .routines_tflite import TFLITE_FILES, TFLITE_ROUTINES, tflite_call

ACT_NONE, ACT_RELU, ACT_CLIP = 0, 1, 2


@dataclass(frozen=True, slots=True)
class RoutineSpec:
    """A routine of the kernel library: its C file, its weight block (output channels per
    packed block) and the names of its integer arguments, in order."""
    name: str
    source: str
    block: int
    ints: tuple[str, ...]


ROUTINES = {
    "rt_conv_f32": RoutineSpec("rt_conv_f32", "conv_f32.c", 32,
                               ("N", "C", "Hp", "Wp", "K", "R", "S", "sh", "sw", "OH", "OW")),
    "rt_pointwise_f32": RoutineSpec("rt_pointwise_f32", "pointwise_f32.c", 12,
                                    ("N", "C", "H", "W", "pt", "pl", "R", "S", "sh", "sw",
                                     "K", "OH", "OW")),
    "rt_dwconv_f32": RoutineSpec("rt_dwconv_f32", "dwconv_f32.c", 0,
                                 ("N", "C", "H", "W", "pt", "pl", "R", "S", "sh", "sw", "OH",
                                  "OW")),
}
ROUTINES["rt_maxpool_f32"] = RoutineSpec("rt_maxpool_f32", "dwconv_f32.c", 0,
                                         ROUTINES["rt_dwconv_f32"].ints)
ROUTINES["rt_pointwise_cl_f32"] = RoutineSpec("rt_pointwise_cl_f32", "pointwise_f32.c", 16,
                                              ROUTINES["rt_pointwise_f32"].ints)
DW_STAGE = 16384          # dwconv_f32.c RT_DW_STAGE: floats of a thread's staged rows
DW_TAPS = 64              # dwconv_f32.c RT_DW_TAPS: at most R * S taps
HEADER = "vec.h"


@lru_cache(maxsize=None)
def kernel_source(file: str) -> str:
    """The text of one file of targets/c/kernels."""
    return importlib.resources.files(__package__).joinpath("kernels", file).read_text("utf-8")


# ---- recognising a group --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Layer:
    """A weighted layer in routine terms: batch N, C input channels of Hp x Wp (already
    padded; 1 x 1 for a dense layer), K outputs of OH x OW, an R x S window at strides
    (sh, sw). `dense`: the tensors are 2-D [N, C] / [N, K]."""
    node: Node
    x: Value
    w: Value
    bias: Value | None
    transpose: bool
    dense: bool
    N: int
    C: int
    Hp: int
    Wp: int
    K: int
    R: int
    S: int
    sh: int
    sw: int
    OH: int
    OW: int
    depthwise: bool = False     # group = C = K: one R x S filter per channel, w [C, 1, R, S]
    # a zero Pad done by the routine (depthwise and im2col layers): `x` is then the Pad's
    # input, Hp x Wp its padded extent, pt / pl the rows above / columns left of it
    pad: Node | None = None
    pt: int = 0
    pl: int = 0


def _float32(*values: Value | None) -> bool:
    return all(v is None or (v.type is not None and v.type.dtype == "float32") for v in values)


def _layer(node: Node) -> Layer | None:
    """`node` as a Layer, or None when no routine computes it."""
    if node.op == "Conv":
        x, w, b = node.inputs[0], node.inputs[1], node.input(2)
        y = node.outputs[0]
        if not (_float32(x, w, b, y) and w.is_const and (b is None or b.is_const)):
            return None
        if len(x.type.shape) != 4 or len(w.type.shape) != 4:
            return None
        a = resolve_attrs(node)
        group = int(a["group"])
        depthwise = group == x.type.shape[1] == w.type.shape[0] > 1 and w.type.shape[1] == 1
        if (group != 1 and not depthwise) or any(d != 1 for d in a.get("dilations") or (1, 1)):
            return None
        if any(a.get("pads") or ()) or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return None
        n, c, hp, wp = x.type.shape
        k, _, r, s = w.type.shape
        sh, sw = (a.get("strides") or (1, 1))
        oh, ow = y.type.shape[2:]
        if (hp - r) // sh + 1 != oh or (wp - s) // sw + 1 != ow or (
                depthwise and not dw_fits(r, s, sw, ow)):
            return None
        return Layer(node, x, w, b, False, False, n, c, hp, wp, k, r, s, sh, sw, oh, ow,
                     depthwise)
    if node.op in ("Gemm", "MatMul"):
        x, w = node.inputs[0], node.inputs[1]
        b = node.input(2) if node.op == "Gemm" else None
        y = node.outputs[0]
        if not (_float32(x, w, b, y) and w.is_const and (b is None or b.is_const)):
            return None
        if len(x.type.shape) != 2 or len(w.type.shape) != 2:
            return None
        transpose = True
        if node.op == "Gemm":
            a = resolve_attrs(node)
            if a["transA"] or float(a["alpha"]) != 1.0 or float(a["beta"]) != 1.0:
                return None
            transpose = not a["transB"]
        n, c = x.type.shape
        k = y.type.shape[1]
        if b is not None and b.type.shape not in ((k,), (1, k)):
            return None
        return Layer(node, x, w, b, transpose, True, n, c, 1, 1, k, 1, 1, 1, 1, 1, 1)
    return None


def dw_fits(R: int, S: int, sw: int, OW: int) -> bool:
    """Whether rt_dwconv_f32's per-thread buffer holds R staged rows of this layer (at the
    widest vector, 16 lanes: dwconv_f32.c rejects a wider one) and its R x S taps fit."""
    phase = -(-OW // 16) * 16 + (S - 1) // sw
    return R * sw * phase <= DW_STAGE and R * S <= DW_TAPS


def _zero_spatial_pad(node: Node | None) -> tuple[int, int] | None:
    """(rows above, columns left) of a constant-zero Pad of only the two spatial axes of a
    4-D tensor by non-negative amounts (what explicit_padding writes); None for another."""
    if node is None or node.op != "Pad" or len(node.inputs[0].type.shape) != 4:
        return None
    a = resolve_attrs(node)
    pads, fill, axes = node.input(1), node.input(2), node.input(3)
    if a["mode"] != "constant" or axes is not None or pads is None or not pads.is_const:
        return None
    if fill is not None and fill.type is not None and fill.type.numel > 0 and \
            _const_scalar(fill) != 0.0:
        return None
    p = [int(v) for v in np.asarray(pads.const).reshape(-1)]
    if len(p) != 8 or p[0] or p[1] or p[4] or p[5] or min(p) < 0:
        return None
    return p[2], p[3]


def _with_pad(layer: Layer, producers: dict[str, Node], consumers,
              region_outputs: set[str]) -> Layer:
    """A depthwise or im2col `layer` with the zero Pad before it folded in (when nothing
    else reads the padded tensor), else `layer`."""
    pad = producers.get(layer.x.name)
    amounts = _zero_spatial_pad(pad) if layer.depthwise or _im2col(layer) else None
    if amounts is None or _sole_reader(layer.x, consumers, region_outputs) is not layer.node \
            or not _float32(pad.inputs[0]):
        return layer
    return replace(layer, x=pad.inputs[0], pad=pad, pt=amounts[0], pl=amounts[1])


def _consumers(region: Region) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for n in region.nodes:
        for v in n.inputs:
            if v is not None:
                out.setdefault(v.name, []).append(n)
    return out


def _sole_reader(v: Value, consumers, region_outputs: set[str]) -> Node | None:
    readers = consumers.get(v.name, [])
    if len(readers) != 1 or v.name in region_outputs:
        return None
    return readers[0]


def _const_scalar(v: Value | None) -> float | None:
    if v is None or not v.is_const or np.asarray(v.const).size != 1:
        return None
    return float(np.asarray(v.const).reshape(-1)[0])


@dataclass(frozen=True, slots=True)
class Epilogue:
    nodes: tuple[Node, ...]
    residual: Value | None
    act: int
    lo: float
    hi: float


def _epilogue(y: Value, consumers, region_outputs: set[str],
              taken: set[str] = frozenset()) -> Epilogue:
    """The Add (of a same-shaped float tensor) and Relu / Clip that follow `y` and that
    nothing else reads in between, none of them `taken` by another group already (a
    residual block's Add is fused by whichever of its two convs comes first; the other
    still runs as a routine, without it)."""
    nodes, residual, act, lo, hi = [], None, ACT_NONE, 0.0, 0.0

    def free_reader(v: Value) -> Node | None:
        n = _sole_reader(v, consumers, region_outputs)
        return None if n is None or n.name in taken else n

    nxt = free_reader(y)
    if nxt is not None and nxt.op == "Add" and len(nxt.inputs) == 2:
        a, b = nxt.inputs
        other = b if a is y else a
        out = nxt.outputs[0]
        if (other is not y and other.type is not None and other.type.shape == y.type.shape
                and _float32(other, out) and out.type.shape == y.type.shape):
            nodes.append(nxt)
            residual, y = other, out
            nxt = free_reader(y)
    if nxt is not None and nxt.op == "Relu" and _float32(nxt.outputs[0]):
        nodes.append(nxt)
        act = ACT_RELU
    elif nxt is not None and nxt.op == "Clip" and _float32(nxt.outputs[0]):
        bounds = [nxt.input(1), nxt.input(2)]
        vals = [_const_scalar(v) for v in bounds]
        if all(v is None or c is not None for v, c in zip(bounds, vals)):
            lo = vals[0] if vals[0] is not None else -np.inf
            hi = vals[1] if vals[1] is not None else np.inf
            if lo <= hi:
                nodes.append(nxt)
                act = ACT_CLIP
    return Epilogue(tuple(nodes), residual, act, float(lo), float(hi))


# ---- the loop nest a routine call stands for -------------------------------------------------
def carrier(layer: Layer, packed: BlockPacking, ep: Epilogue, out: Value, block: int) -> Kernel:
    """What the routine computes, as a loop nest over the packed weights: y = bias (or 0);
    y += x * wp over full blocks of `block` output channels and then the last, partial one;
    y = y + residual; y = act(y)."""
    L = layer
    if L.depthwise:       # the weights as they are: block 1, "packed" = [C, 1, R, S]
        block, blocks, full, tail = 1, L.K, L.K, 0
        wp = Tensor(L.w.name, tuple(L.w.type.shape))
    else:
        blocks, full, tail = -(-L.K // block), L.K // block, L.K % block
        wp = Tensor(packed.name, (blocks, L.C, L.R, L.S, block))
    x = Tensor(L.x.name, tuple(L.x.type.shape))
    y = Tensor(out.name, tuple(out.type.shape))
    inputs = [x, wp]

    def yi(n, k, oh, ow):
        return (n, k) if L.dense else (n, k, oh, ow)

    def xi(n, c, oh, ow, r, s):
        return (n, c) if L.dense else (n, c, aff(oh) * L.sh + aff(r) - L.pt,
                                       aff(ow) * L.sw + aff(s) - L.pl)

    out_axes = [("n", L.N), ("k", L.K)] + ([] if L.dense else [("oh", L.OH), ("ow", L.OW)])

    def over_output(stmt) -> Loop:
        for var, extent in reversed(out_axes):
            stmt = Loop(var, extent, (stmt,))
        return stmt

    idx = yi("n", "k", "oh", "ow")
    if L.bias is not None:
        bt = Tensor(L.bias.name, tuple(L.bias.type.shape))
        inputs.append(bt)
        start = Load(bt[("k",) if len(bt.shape) == 1 else (0, "k")])
    else:
        start = Const(0.0)
    body = [over_output(Store(y[idx], start))]
    for count, base, kb in ((full, 0, "kb"), (1 if tail else 0, full * block, full)):
        if not count:
            continue
        extent = block if kb == "kb" else tail
        k = aff("kb") * block + aff("ki") if kb == "kb" else aff("ki") + base
        fill = 0.0 if L.pad is not None else None      # a folded Pad: zero outside x
        if L.depthwise:    # channel kb reads its own input channel and filter
            term = Binary("*", Load(x[xi("n", "kb", "oh", "ow", "r", "s")], fill),
                          Load(wp[("kb", 0, "r", "s")]))
        else:
            term = Binary("*", Load(x[xi("n", "c", "oh", "ow", "r", "s")], fill),
                          Load(wp[(kb, "c") + ((0, 0) if L.dense else ("r", "s")) + ("ki",)]))
        stmt = Store(y[yi("n", k, "oh", "ow")], term, "+")
        axes = [("n", L.N)] + ([("kb", count)] if kb == "kb" else []) + [("ki", extent)]
        axes += [] if L.dense else [("oh", L.OH), ("ow", L.OW)]
        axes += [] if L.depthwise else [("c", L.C)]
        axes += [] if L.dense else [("r", L.R), ("s", L.S)]
        for var, e in reversed(axes):
            stmt = Loop(var, e, (stmt,))
        body.append(stmt)
    if ep.residual is not None:
        rt = Tensor(ep.residual.name, tuple(ep.residual.type.shape))
        inputs.append(rt)
        body.append(over_output(Store(y[idx], Binary("+", Load(y[idx]), Load(rt[idx])))))
    if ep.act == ACT_RELU:
        body.append(over_output(Store(y[idx], Binary("max", Load(y[idx]), Const(0.0)))))
    elif ep.act == ACT_CLIP:
        e = Load(y[idx])
        if ep.lo != -np.inf:
            e = Binary("max", e, Const(ep.lo))
        if ep.hi != np.inf:
            e = Binary("min", e, Const(ep.hi))
        body.append(over_output(Store(y[idx], e)))
    k = Kernel(f"fused_{L.node.name}", tuple(inputs), (y,), tuple(body))
    verify_kernel(k)
    return k


def _pointwise(L: Layer) -> bool:
    """Whether rt_pointwise_f32 runs the layer: every 1x1 conv, and the im2col ones. Measured
    per call on the 1x1 layers of MobileNet v1 and ResNet-50, its panel GEMM is as fast as
    rt_conv_f32 or faster on each, most at few channels or many positions, where
    rt_conv_f32's transposed stores cost most; on the wide layers, reduced in chunks, thanks
    to its weight prefetch (ResNet-50's 2048-channel 1x1 on 7x7: 0.66 ms against 0.84;
    docs/benchmarks.md, bench_aot_c, "1 x 1 layers of any width on the panel GEMM")."""
    return not L.dense and not L.depthwise and (L.R == L.S == 1 or _im2col(L))


IM2COL_ROWS = 32


def _im2col(L: Layer) -> bool:
    """A conv of at most IM2COL_ROWS input taps (C R S: 27 for a 3 x 3 window on RGB) other
    than 1 x 1: rt_pointwise_f32 over im2col panels, its Pad inside. Its vectors along the
    positions keep the epilogue whole where rt_conv_f32's short reduction left its
    per-element transposed stores the larger part. Measured per call, one thread (the Pad
    call included before): MobileNet v1's first conv 0.336 -> 0.236 ms, VGG-16's 2.03 ->
    1.51 ms; but ResNet-18's 7 x 7 one (147 taps) 1.24 -> 1.67 ms, where the reduction is
    long enough for rt_conv_f32 (docs/benchmarks.md, bench_aot_c, "First convolutions as
    im2col panels")."""
    return (not L.dense and not L.depthwise and (L.R, L.S) != (1, 1)
            and L.C * L.R * L.S <= IM2COL_ROWS)


CL_POSITIONS = 64


def _channels_in_lanes(L: Layer) -> bool:
    """A 1 x 1 layer at stride 1 on fewer than CL_POSITIONS positions: rt_pointwise_cl_f32,
    whose vectors run along the output channels. Positions in lanes, a 7 x 7 map's 49 fill
    64 lanes (32 of its last group's for 17 positions). Measured per call, one thread:
    MobileNet v1's 7 x 7 1 x 1 layers 0.541 -> 0.456 ms (1024 channels) and 0.262 -> 0.241
    (512 in), ResNet-50's 1 x 1 calls 21.1 -> 19.8 ms; but a 14 x 14 one, 512 channels,
    0.429 -> 0.446 ms (docs/benchmarks.md, bench_aot_c, "Issue 30, fourth round")."""
    return (_pointwise(L) and (L.R, L.S, L.sh, L.sw, L.pt, L.pl) == (1, 1, 1, 1, 0, 0)
            and L.OH * L.OW < CL_POSITIONS)


def _routine_name(L: Layer) -> str:
    """The routine of a weighted layer."""
    if L.depthwise:
        return "rt_dwconv_f32"
    if _channels_in_lanes(L):
        return "rt_pointwise_cl_f32"
    return "rt_pointwise_f32" if _pointwise(L) else "rt_conv_f32"


def _routine(layer: Layer, ep: Epilogue, kernel: Kernel) -> Routine:
    L = layer
    names = [t.name for t in kernel.params]
    bias = names.index(L.bias.name) if L.bias is not None else -1
    res = names.index(ep.residual.name) if ep.residual is not None else -1
    operands = (0, 1, bias, res, len(names) - 1)
    name = _routine_name(L)
    floats = (ep.lo, ep.hi) if ep.act == ACT_CLIP else (0.0, 0.0)
    if L.depthwise:
        h, w = L.x.type.shape[2:]
        return Routine(name, operands, (L.N, L.C, h, w, L.pt, L.pl, L.R, L.S, L.sh, L.sw,
                                        L.OH, L.OW, ep.act), floats)
    if name != "rt_conv_f32":
        h, w = L.x.type.shape[2:]
        return Routine(name, operands, (L.N, L.C, h, w, L.pt, L.pl, L.R, L.S, L.sh, L.sw,
                                        L.K, L.OH, L.OW, ep.act), floats)
    return Routine("rt_conv_f32", operands, (L.N, L.C, L.Hp, L.Wp, L.K, L.R, L.S, L.sh, L.sw,
                                             L.OH, L.OW, ep.act), floats)


def _maxpool(node: Node) -> Fused | None:
    """A 2-D float MaxPool without dilation or Indices output as one rt_maxpool_f32 call,
    the node's own loop nest as its carrier; None for another node."""
    if node.op != "MaxPool" or len(node.outputs) != 1 or len(node.inputs) != 1:
        return None
    x, y = node.inputs[0], node.outputs[0]
    if not _float32(x, y) or len(x.type.shape) != 4:
        return None
    a = resolve_attrs(node)
    win = pool_window("MaxPool", x.type.shape, a["kernel_shape"], a["strides"],
                      a["dilations"], a["pads"], a["auto_pad"], a["ceil_mode"])
    (r, s), (sh, sw), (oh, ow) = win.kernel, win.strides, win.out
    if any(d != 1 for d in win.dilations) or not dw_fits(r, s, sw, ow) or \
            tuple(y.type.shape[2:]) != (oh, ow):
        return None
    n, c, h, w = x.type.shape
    kernel = lower_node(node)
    verify_kernel(kernel)
    pt, pl = win.pads_begin
    return Fused((node,), Scheduled(kernel), Routine(
        "rt_maxpool_f32", (0, -1, -1, -1, 1),
        (n, c, h, w, pt, pl, r, s, sh, sw, oh, ow, ACT_NONE), (0.0, 0.0)))


def plan_routines(region: Region) -> list[Fused]:
    """Every group of the region a routine runs (see the module docstring)."""
    consumers = _consumers(region)
    outputs = {v.name for v in region.outputs}
    producers = {v.name: n for n in region.nodes for v in n.outputs}
    taken: set[str] = set()
    groups = []
    for node in region.nodes:
        if node.name in taken:
            continue
        pool = _maxpool(node)
        if pool is not None:
            groups.append(pool)
            continue
        layer = _layer(node)
        if layer is None:
            continue
        layer = _with_pad(layer, producers, consumers, outputs)
        ep = _epilogue(node.outputs[0], consumers, outputs, taken)
        if ep.residual is not None and ep.residual.name == layer.x.name:
            ep = Epilogue((), None, ACT_NONE, 0.0, 0.0)
        out = (ep.nodes[-1] if ep.nodes else node).outputs[0]
        block = ROUTINES[_routine_name(layer)].block
        packed = BlockPacking(f"{layer.w.name}__b{block}{'t' if layer.transpose else ''}",
                              layer.w.name, block, layer.transpose)
        k = carrier(layer, packed, ep, out, block)
        relayouts = () if layer.depthwise else (packed,)
        pad = () if layer.pad is None else (layer.pad,)
        groups.append(Fused(pad + (node,) + ep.nodes, Scheduled(k, relayouts),
                            _routine(layer, ep, k)))
        taken.update(n.name for n in pad + ep.nodes)
    return groups


# ---- printing a call --------------------------------------------------------------------------
def check_routine(call: Call) -> None:
    """GraphError unless `call.routine` reads and writes exactly its kernel's tensors, with the
    shapes its integer arguments say (what keeps the routine's accesses inside its buffers)."""
    r, k = call.routine, call.kernel
    spec = ROUTINES.get(r.name)

    def fail(msg: str) -> GraphError:
        return GraphError(f"call {call.function}: routine {r.name}: {msg}")

    if spec is None:
        raise fail(f"not one of {sorted(ROUTINES)}")
    if len(r.ints) != len(spec.ints) + 1 or len(r.floats) != 2 or len(r.operands) != 5:
        raise fail("wrong number of arguments")
    d = dict(zip(spec.ints, r.ints))
    act = r.ints[-1]
    if act not in (ACT_NONE, ACT_RELU, ACT_CLIP) or any(
            v < (0 if a in ("pt", "pl") else 1) for a, v in d.items()):
        raise fail(f"arguments {r.ints} out of range")
    params = k.params
    if any(not -1 <= i < len(params) for i in r.operands) or r.operands[0] < 0 or \
            r.operands[4] != len(params) - 1 or len(k.outputs) != 1:
        raise fail(f"operands {r.operands} do not name the kernel's {len(params)} tensors")
    x, wp, bias, res, y = (None if i < 0 else params[i] for i in r.operands)
    if any(t.dtype != "float32" for t in (x, wp, bias, res, y) if t is not None):
        raise fail("its tensors are float32")
    if (r.name == "rt_maxpool_f32") != (wp is None):
        raise fail("a max pool takes no weights; every other routine does")
    if r.name == "rt_conv_f32":
        n, c, hp, wd, kk, rr, ss, sh, sw, oh, ow = (d[a] for a in spec.ints)
        if (hp - rr) // sh + 1 != oh or (wd - ss) // sw + 1 != ow or hp < rr or wd < ss:
            raise fail(f"output {oh}x{ow} is not a {rr}x{ss} window at strides {sh}, {sw} "
                       f"over {hp}x{wd}")
        xs, ys = n * c * hp * wd, n * kk * oh * ow
        ws = -(-kk // spec.block) * c * rr * ss * spec.block
    elif r.name in ("rt_dwconv_f32", "rt_maxpool_f32"):
        # every read is bounds-checked in the routine (the padding); what must hold is that
        # its staging buffer and tap table fit
        n, c, h, wd, pt, pl, rr, ss, sh, sw, oh, ow = (d[a] for a in spec.ints)
        if not dw_fits(rr, ss, sw, ow):
            raise fail(f"a {rr}x{ss} window at strides {sh}, {sw} padded by ({pt}, {pl}) "
                       f"into {oh}x{ow} outputs does not fit the routine")
        kk = c
        xs, ys, ws = n * c * h * wd, n * c * oh * ow, c * rr * ss
        if r.name == "rt_maxpool_f32" and (act != ACT_NONE or bias or res):
            raise fail("a max pool has no epilogue")
    else:
        # the im2col pack bounds-checks every read (the padding); a 1 x 1 layer's output is
        # its strided input
        n, c, h, wd, pt, pl, rr, ss, sh, sw, kk, oh, ow = (d[a] for a in spec.ints)
        if (rr, ss, pt, pl) == (1, 1, 0, 0) and (
                (h - 1) // sh + 1 != oh or (wd - 1) // sw + 1 != ow):
            raise fail(f"output {oh}x{ow} is not a 1x1 window at strides {sh}, {sw} over "
                       f"{h}x{wd}")
        if (rr, ss) != (1, 1) and c * rr * ss > IM2COL_ROWS:
            raise fail(f"{c * rr * ss} im2col rows: more than its {IM2COL_ROWS}")
        if r.name == "rt_pointwise_cl_f32" and (rr, ss, pt, pl, sh, sw) != (1, 1, 0, 0, 1, 1):
            raise fail(f"a {rr}x{ss} window at strides {sh}, {sw} padded by ({pt}, {pl}): it "
                       f"takes a 1x1 window at stride 1, unpadded")
        xs, ys = n * c * h * wd, n * kk * oh * ow
        ws = -(-kk // spec.block) * c * rr * ss * spec.block
    sizes = [(x, xs), (wp, ws), (y, ys), (res, ys)]
    if any(t is not None and t.size != size for t, size in sizes) or (
            bias is not None and bias.size != kk):
        raise fail(f"tensor sizes {[t.size for t in (x, wp, bias, res, y) if t]} do not match "
                   f"its arguments {dict(d)}")


def routine_call(call: Call, pointers: Sequence[str]) -> str:
    """The C statement calling `call.routine`, `pointers` being the C expressions of the
    kernel's parameters."""
    if call.routine.name in INT8_ROUTINES:
        return int8_call(call, pointers)
    if call.routine.name in TFLITE_ROUTINES:
        return tflite_call(call, pointers)
    if call.routine.name in ORT_ROUTINES:
        return ort_call(call, pointers)
    check_routine(call)
    r = call.routine
    args = [pointers[i] if i >= 0 else "0" for i in r.operands]
    args += [str(i) for i in r.ints]
    args += [_c_float(f) for f in r.floats]
    return f"{r.name}({', '.join(args)});"


def _c_float(f: float) -> str:
    if f == np.inf:
        return "INFINITY"
    if f == -np.inf:
        return "-INFINITY"
    return f"{float(np.float32(f))!r}f"


def routine_sources(names: Sequence[str]) -> str:
    """vec.h and the C of the routines `names`, for model.c (nothing if there are none)."""
    if not names:
        return ""
    files = sorted({ROUTINES[n].source for n in names if n in ROUTINES})
    if any(n in INT8_ROUTINES for n in names):
        files += list(INT8_FILES)
    if any(n in TFLITE_ROUTINES for n in names):
        files += list(TFLITE_FILES)
    if any(n in ORT_ROUTINES for n in names):
        files += list(ORT_FILES)
    return "\n".join([kernel_source(HEADER)] + [kernel_source(f) for f in files])


__all__ = ["ACT_CLIP", "ACT_NONE", "ACT_RELU", "BlockPacking", "ROUTINES", "RoutineSpec",
           "carrier", "check_routine", "dw_fits", "kernel_source", "plan_routines",
           "routine_call", "routine_sources"]
