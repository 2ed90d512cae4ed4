"""Lowering one offloaded region: graph nodes -> layer descriptions -> one dnnvm Program.

Every value a node produces gets a DDR feature map before anything is emitted: a Concat's
output gets a buffer and each of its inputs becomes a channel slice of it (assigned from the
last Concat back, so nested concatenations nest their slices), so the producers SAVE straight
into place and the Concat itself emits nothing. A Flatten before an offloaded dense layer is a
view too: the dense layer becomes a convolution whose kernel covers the whole map, with its
weights re-ordered at compile time to the map's NHWC order.
"""
from __future__ import annotations

import numpy as np

from ...errors import TargetError, UnsupportedOpError
from ...ir.graph import Node, Value
from ...ops.quantized import ACCUMULATING_OPS
from ...ops.registry import resolve_attrs
from ..accel.graph_layers import conv_layer, dense_bias, dense_weight, requant_of
from ..accel.kernel import Binding, LayerInfo
from ..accel.layers import Conv2d, Pool2d, Requant, RequantizeLayer, ResidualAdd
from ..base import Region
from .config import DNNVMConfig
from .lower import FeatureMap, Lowering

VIEW_OPS = ("Concat", "Flatten")


def _nchw(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.type.shape)


def lower_region(cfg: DNNVMConfig, region: Region):
    """A DNNVMKernel running `region` as one instruction stream."""
    from .kernel import DNNVMKernel
    ctx = Lowering(cfg)
    maps: dict[int, list[FeatureMap]] = {}      # id(value) -> where it is written / read
    inputs = []
    for i, v in enumerate(region.inputs):
        maps[id(v)] = [ctx.input(f"in{i}", _nchw(v))]
        inputs.append(Binding(v.name, f"in{i}", _nchw(v)))
    consumers: dict[int, list[Node]] = {}
    for n in region.nodes:
        for v in n.inputs:
            if v is not None:
                consumers.setdefault(id(v), []).append(n)
    # Requantize nodes fused into their conv / dense: the pair writes the Requantize's output.
    fused: dict[int, Node] = {}
    for n in region.nodes:
        if n.op in ACCUMULATING_OPS:
            uses = consumers.get(id(n.outputs[0]), [])
            if len(uses) != 1 or uses[0].op != "Requantize":
                raise TargetError(f"{n.op} '{n.name}': its Requantize is not in region "
                                  f"{region.name!r}")
            fused[id(n)] = uses[0]
    fused_rq = {id(rq) for rq in fused.values()}
    # DDR places for every produced value: region outputs and concatenations first.
    for k, v in enumerate(region.outputs):
        maps.setdefault(id(v), [ctx.feature_map(f"out{k}", _nchw(v))])
    for n in reversed(region.nodes):
        if n.op == "Concat":
            y = n.outputs[0]
            if id(y) not in maps:
                maps[id(y)] = [ctx.feature_map(f"{n.name}/out", _nchw(y))]
            c0 = 0
            for v in n.inputs:
                c = int(v.type.shape[1])
                # A value with a place already (a region output, another Concat's slice) is
                # saved to each of its places.
                maps[id(v)] = [m.channels(c0, c) for m in maps[id(y)]] + maps.get(id(v), [])
                c0 += c

    def out_maps(v: Value, name: str) -> list[FeatureMap]:
        if id(v) not in maps:
            maps[id(v)] = [ctx.feature_map(name, _nchw(v))]
        return maps[id(v)]

    def source(n: Node, v: Value) -> FeatureMap:
        m = maps.get(id(v))
        if not m:
            raise TargetError(f"{n.op} '{n.name}': input {v.name!r} is not available in "
                              f"region {region.name!r}")
        return m[0]

    infos = []
    for n in region.nodes:
        if id(n) in fused_rq or n.op == "Concat":
            continue
        if n.op == "Flatten":
            x = source(n, n.inputs[0])
            maps[id(n.outputs[0])] = [x]       # a view: the dense layer reads the map as is
            continue
        if n.op in ACCUMULATING_OPS:
            rq = fused[id(n)]
            y = out_maps(rq.outputs[0], f"{n.name}/out")
            x = source(n, n.inputs[0])
            if n.op == "Conv":
                layer = conv_layer(n, rq)
                w, b = n.inputs[1].const, (n.input(2).const if n.input(2) is not None else None)
            else:
                layer, w = _dense_as_conv(n, rq, x)
                b = dense_bias(n)
            ctx.conv(layer, x, y, w, b)
            infos.append(LayerInfo(n.name, "conv2d" if n.op == "Conv" else "dense",
                                   int(layer.macs), int(layer.macs)))
            continue
        y = out_maps(n.outputs[0], f"{n.name}/out")
        a = resolve_attrs(n)
        shape = _nchw(n.inputs[0])
        if n.op == "QAdd":
            layer = ResidualAdd(n.name, shape, int(a["shift_a"]), int(a["shift_b"]),
                                int(a["out_shift"]), int(a["lo"]), int(a["hi"]))
            ctx.add(layer, source(n, n.inputs[0]), source(n, n.inputs[1]), y)
            infos.append(LayerInfo(n.name, "residual_add", 0, 0))
        elif n.op in ("Relu", "Requantize"):
            r = Requant(0, 0, 127) if n.op == "Relu" else requant_of(n)
            ctx.requantize(RequantizeLayer(n.name, shape, r), source(n, n.inputs[0]), y)
            infos.append(LayerInfo(n.name, "requantize", 0, 0))
        elif n.op == "MaxPool":
            layer = Pool2d(n.name, "max", shape, tuple(int(k) for k in a["kernel_shape"]),
                           tuple(int(s) for s in (a.get("strides") or [1, 1])),
                           pool_pads(n))
            ctx.pool(layer, source(n, n.inputs[0]), y)
            infos.append(LayerInfo(n.name, "maxpool", 0, 0))
        else:
            raise UnsupportedOpError(f"no dnnvm lowering for {n.op} '{n.name}': the rules keep "
                                     f"it on the cpu")
    # Each output is read back from the map that is its own whole buffer (not a slice).
    whole = {id(v): [x for x in maps.get(id(v), [])
                     if x.pixel == x.c and x.addr == ctx.b.buffers[x.buffer].offset]
             for v in region.outputs}
    missing = [v.name for v in region.outputs if not whole[id(v)]]
    if missing:
        raise TargetError(f"region {region.name!r}: outputs {missing} are not produced")
    bindings = [Binding(v.name, whole[id(v)][0].buffer, _nchw(v)) for v in region.outputs]
    return DNNVMKernel(region.name, ctx.finish(), inputs, bindings, dict(ctx.constants), infos)


def pool_pads(n: Node) -> tuple[int, int, int, int]:
    """A pool's pads (top, left, bottom, right), with ceil_mode's extra last windows as more
    bottom / right padding (padded with -128 for a max, so exact: every window the output
    shape keeps starts inside the input)."""
    a = resolve_attrs(n)
    pt, pl, pb, pr = (int(p) for p in (a.get("pads") or [0, 0, 0, 0]))
    kh, kw = (int(k) for k in a["kernel_shape"])
    sh, sw = (int(s) for s in (a.get("strides") or [1, 1]))
    _, _, h, w = _nchw(n.inputs[0])
    _, _, oh, ow = _nchw(n.outputs[0])
    return (pt, pl, pb + max(0, (oh - 1) * sh + kh - (h + pt + pb)),
            pr + max(0, (ow - 1) * sw + kw - (w + pl + pr)))


def _dense_as_conv(n: Node, rq: Node, x: FeatureMap) -> tuple[Conv2d, np.ndarray]:
    """A dense layer over a map of h x w x c (a flattened NCHW tensor, or one pixel of K
    features) as a convolution whose kernel is the whole map: weights [O, C*H*W] in NCHW
    flatten order become [O, C, H, W]."""
    w = dense_weight(n)
    if w.shape[1] != x.c * x.h * x.w:
        raise TargetError(f"{n.op} '{n.name}': {w.shape[1]} input features, the map has "
                          f"{x.h}x{x.w}x{x.c}")
    layer = Conv2d(n.name, (x.n, x.c, x.h, x.w), int(w.shape[0]), (x.h, x.w),
                   requant=requant_of(rq), op=n.op)
    return layer, w.reshape(w.shape[0], x.c, x.h, x.w)


__all__ = ["VIEW_OPS", "lower_region"]
