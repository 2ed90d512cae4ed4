"""Lowering one offloaded region: graph nodes -> the lowering's layer descriptions ->
one instruction stream (a VTAKernel). Layers read the packed result of the previous ones, so
intermediates stay packed in DRAM inside a region."""
from __future__ import annotations

import gc
import math
from typing import Any

from ...errors import TargetError, UnsupportedOpError
from ...ir.graph import Node
from ...ops.quantized import ACCUMULATING_OPS
from ...ops.registry import resolve_attrs
from ..base import Region
from . import lower as L
from .config import VTAConfig
from ..accel.graph_layers import (conv_layer, dense_bias, dense_weight, region_requantize_map,
                                  requant_of)
from .kernel import Binding, LayerInfo, VTAKernel


def _lower_alu_node(ctx, n: Node, x: list):
    """QAdd / Relu / int8 Requantize / pooling on the ALU."""
    a = resolve_attrs(n)
    shape = tuple(n.inputs[0].type.shape)
    if n.op == "QAdd":
        layer = L.ResidualAdd(n.name, shape, int(a["shift_a"]), int(a["shift_b"]),
                              int(a["out_shift"]), int(a["lo"]), int(a["hi"]))
        return L.lower_residual_add(ctx, layer, x[0], x[1])
    if n.op == "Relu":
        return L.lower_requantize(ctx, L.RequantizeLayer(n.name, shape, L.Requant(0, 0, 127)), x[0])
    if n.op == "Requantize":
        return L.lower_requantize(ctx, L.RequantizeLayer(n.name, shape, requant_of(n)), x[0])
    pads = list(a.get("pads") or [0, 0, 0, 0])
    layer = L.Pool2d(n.name, "max" if n.op == "MaxPool" else "avg", shape,
                     tuple(int(k) for k in a["kernel_shape"]),
                     tuple(int(k) for k in (a.get("strides") or [1, 1])),
                     tuple(int(p) for p in pads))
    return L.lower_pool2d(ctx, layer, x[0])


def _weight_slices(v, readers: list[Node], region: Region) -> int:
    """How many stacked matrices [.., K, M] value `v` holds when it is the second operand of
    an activation x activation MatMul in `region` (read as weights), else 0."""
    as_weight = [n for n in readers if n.op == "MatMul" and n.inputs[1] is v]
    if not as_weight:
        return 0
    if len(as_weight) != len(readers) or any(n.inputs[0] is v for n in readers):
        raise TargetError(f"{v.name!r} is both a MatMul's second operand and read otherwise "
                          f"in region {region.name!r}; it needs one DRAM layout")
    return math.prod(int(d) for d in v.type.shape[:-2])


def _dram_shape(v, readers: list[Node]) -> tuple[int, ...]:
    """How a region input lives in DRAM: NCHW tensors and matrices as they are; tokens
    ([B, N, K], or [B, H, W, K] read only by dense layers) as the rows x K matrix a dense
    layer reads (the same bytes, row-major)."""
    shape = tuple(int(d) for d in v.type.shape)
    tokens = len(shape) == 3 or (len(shape) == 4 and readers
                                 and all(n.op == "MatMul" for n in readers))
    return (math.prod(shape[:-1]), shape[-1]) if tokens else shape


def lower_region(cfg: VTAConfig, region: Region) -> VTAKernel:
    """One instruction stream for `region`: inputs in packed DRAM buffers, each layer lowered
    by targets/vta/lower/ reading the packed result of the previous one."""
    # Lowering allocates tens of thousands of small objects (instructions, micro-ops, keys)
    # and frees none of them as cycles: the cyclic collector's passes over them are pure cost.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _lower_region(cfg, region)
    finally:
        if enabled:
            gc.enable()


def _lower_region(cfg: VTAConfig, region: Region) -> VTAKernel:
    ctx = L.LoweringContext(cfg)
    packed: dict[int, Any] = {}
    inputs = []
    for i, v in enumerate(region.inputs):
        readers = [n for n in region.nodes if any(x is v for x in n.inputs)]
        slices = _weight_slices(v, readers, region)
        if slices:     # the host lays B out as weight blocks (VTAKernel.pack_input)
            k, m = (int(d) for d in v.type.shape[-2:])
            ctx.b.alloc(f"in{i}", (slices, -(-m // cfg.block_out), -(-k // cfg.block_in), 1, 1,
                                   cfg.block_out, cfg.block_in), "int8")
            packed[id(v)] = f"in{i}"
            inputs.append(Binding(v.name, f"in{i}", (slices * k, m), slices))
            continue
        t = ctx.input(f"in{i}", _dram_shape(v, readers))
        packed[id(v)] = t
        inputs.append(Binding(v.name, f"in{i}", t.shape))
    requantize_of = region_requantize_map(region)     # conv / dense -> its Requantize
    fused = {id(rq) for rq in requantize_of.values()}
    for n in region.nodes:
        if id(n) in fused:
            continue
        if n.op in ACCUMULATING_OPS:
            rq = requantize_of[id(n)]
            x = packed.get(id(n.inputs[0]))
            if x is None:
                raise TargetError(f"{n.op} '{n.name}': input {n.inputs[0].name!r} is not "
                                  f"available in region {region.name!r}")
            bias = n.input(2).const if n.op == "Conv" and n.input(2) is not None else None
            if n.op == "Conv":
                y = L.lower_conv2d(ctx, conv_layer(n, rq), x, n.inputs[1].const, bias)
            elif not n.inputs[1].is_const:          # activation x activation, per slice
                a_shape, (k, m) = n.inputs[0].type.shape, n.inputs[1].type.shape[-2:]
                slices = math.prod(int(d) for d in a_shape[:-2])
                layer = L.Dense(n.name, int(a_shape[-2]), int(k), int(m), requant_of(rq),
                                op=n.op)
                y = L.lower_batched_matmul(ctx, layer, x, packed[id(n.inputs[1])], slices)
            else:
                w = dense_weight(n)
                xm = x.as_matrix() if len(x.shape) == 4 else x
                layer = L.Dense(n.name, int(xm.shape[0]), int(w.shape[1]), int(w.shape[0]),
                                requant_of(rq), op=n.op)
                y = L.lower_dense(ctx, layer, xm, w, dense_bias(n))
            packed[id(rq.outputs[0])] = y
        elif n.op in ("QAdd", "Relu", "Requantize", "MaxPool", "AveragePool"):
            x = [packed.get(id(v)) for v in n.inputs if v is not None and not v.is_const]
            if any(t is None for t in x):
                raise TargetError(f"{n.op} '{n.name}': an input is not available in region "
                                  f"{region.name!r}")
            packed[id(n.outputs[0])] = _lower_alu_node(ctx, n, x)
        else:
            raise UnsupportedOpError(f"vta: no lowering for {n.op} '{n.name}' (the rules "
                                     f"should have kept it on the cpu)")
    outputs = []
    for v in region.outputs:
        t = packed.get(id(v))
        if t is None:
            raise TargetError(f"region {region.name!r}: output {v.name!r} is not produced")
        outputs.append(Binding(v.name, t.buffer, t.shape))
    # every other value the stream stores to a DRAM buffer of its own, for --per-layer
    claimed = {b.buffer for b in inputs + outputs}
    maps = []
    for n in region.nodes:
        for v in n.outputs:
            t = packed.get(id(v))
            if t is not None and t.buffer not in claimed:
                claimed.add(t.buffer)
                maps.append(Binding(v.name, t.buffer, t.shape))
    seg = ctx.finish([packed[id(v)] for v in region.outputs])
    layers = [LayerInfo(r.name, r.kind, int(r.useful_macs), int(r.performed_macs))
              for r in seg.reports]
    return VTAKernel(region.name, seg.program, inputs, outputs, dict(seg.constants), layers,
                     maps)
