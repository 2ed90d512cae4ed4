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
from ..accel.graph_layers import (conv_layer, dense_bias, dense_weight, region_requantize_map,
                                  requant_of)
from ..accel.kernel import Binding, LayerInfo
from ..accel.layers import Conv2d, Pool2d, Requant, RequantizeLayer, ResidualAdd
from ..base import Region
from .config import DNNVMConfig
from .lower import ConvHead, FeatureMap, Lowering
from .kernel import DNNVMKernel

def _nchw(v: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in v.type.shape)


def lower_region(cfg: DNNVMConfig, region: Region, groups=()):
    """A DNNVMKernel running `region` as one instruction stream. `groups`: fused groups as
    (template name, node names) from the fusion search (dnnvm/fusion.py TEMPLATES), each
    lowered as one unit; every other layer alone."""
    ctx = Lowering(cfg)
    maps: dict[int, list[FeatureMap]] = {}      # id(value) -> where it is written / read
    inputs = []
    for i, v in enumerate(region.inputs):
        maps[id(v)] = [ctx.input(f"in{i}", _nchw(v))]
        inputs.append(Binding(v.name, f"in{i}", _nchw(v)))
    fused = region_requantize_map(region)
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

    def out_maps(n: Node) -> list[FeatureMap]:
        v = (fused.get(id(n)) or n).outputs[0]
        if id(v) not in maps:
            maps[id(v)] = [ctx.feature_map(f"{n.name}/out", _nchw(v))]
        return maps[id(v)]

    def source(n: Node, v: Value) -> FeatureMap:
        m = maps.get(id(v))
        if not m:
            raise TargetError(f"{n.op} '{n.name}': input {v.name!r} is not available in "
                              f"region {region.name!r}")
        return m[0]

    def constants(n: Node, x: FeatureMap):
        """(layer, OIHW weights, bias) of a conv or dense node."""
        rq = fused[id(n)]
        if n.op == "Conv":
            return conv_layer(n, rq), n.inputs[1].const, (n.input(2).const if n.input(2)
                                                          is not None else None)
        layer, w = _dense_as_conv(n, rq, x)
        return layer, w, dense_bias(n)

    infos = []

    def lower_node(n: Node) -> None:
        if n.op == "Flatten":
            maps[id(n.outputs[0])] = [source(n, n.inputs[0])]   # a view: read the map as is
            return
        layer = layer_of(n, fused.get(id(n)))
        y = out_maps(n)
        if n.op in ACCUMULATING_OPS:
            x = source(n, n.inputs[0])
            layer, w, b = constants(n, x)
            ctx.conv(layer, x, y, w, b)
            infos.append(LayerInfo(n.name, "conv2d" if n.op == "Conv" else "dense",
                                   int(layer.macs), int(layer.macs)))
        elif n.op == "QAdd":
            ctx.add(layer, source(n, n.inputs[0]), source(n, n.inputs[1]), y)
            infos.append(LayerInfo(n.name, "residual_add", 0, 0))
        elif n.op in ("Relu", "Requantize"):
            ctx.requantize(layer, source(n, n.inputs[0]), y)
            infos.append(LayerInfo(n.name, "requantize", 0, 0))
        elif n.op == "MaxPool":
            ctx.pool(layer, source(n, n.inputs[0]), y)
            infos.append(LayerInfo(n.name, "maxpool", 0, 0))
        else:
            raise UnsupportedOpError(f"no dnnvm lowering for {n.op} '{n.name}': the rules keep "
                                     f"it on the cpu")

    def lower_group(template: str, members: list[Node]) -> None:
        conv = members[0]
        x = source(conv, conv.inputs[0])
        layer, w, b = constants(conv, x)
        name = " + ".join(m.name for m in members)
        if template == "conv_pool":
            pool = members[1]
            ctx.conv_pool(layer, x, w, b, layer_of(pool, None), out_maps(pool))
        elif template == "conv_add":
            add = members[1]
            conv_out = fused[id(conv)].outputs[0]
            conv_is_a = add.inputs[0] is conv_out
            other = add.inputs[1] if conv_is_a else add.inputs[0]
            ctx.conv_add(layer, x, w, b, layer_of(add, None), source(add, other), conv_is_a,
                         out_maps(add))
        elif template == "conv_conv":
            second = members[1]
            l2, w2, b2 = constants(second, None)
            ctx.conv_conv(layer, x, w, b, l2, w2, b2, out_maps(second))
        elif template == "conv_conv_add":
            second, add = members[1], members[2]
            l2, w2, b2 = constants(second, None)
            conv_out = fused[id(second)].outputs[0]
            conv_is_a = add.inputs[0] is conv_out
            other = add.inputs[1] if conv_is_a else add.inputs[0]
            ctx.conv_conv(layer, x, w, b, l2, w2, b2, out_maps(add), add=layer_of(add, None),
                          other=source(add, other), conv_is_a=conv_is_a)
        elif template.startswith("horizontal"):
            heads = []
            convs = [m for m in members if m.op in ACCUMULATING_OPS]
            for m in convs:
                lay, wm, bm = constants(m, x)
                heads.append(ConvHead(lay, tuple(out_maps(m)), wm, bm))
            if template.endswith("_pool"):
                pool = members[-1]
                ctx.conv_pool_group(heads, layer_of(pool, None), out_maps(pool), x)
            else:
                ctx.conv_group(heads, x)
        else:
            raise TargetError(f"dnnvm: no fused lowering for template {template!r} ({name})")
        macs = sum(int(layer_of(m, fused.get(id(m))).macs) for m in members
                   if m.op in ACCUMULATING_OPS)
        infos.append(LayerInfo(name, template, macs, macs))

    by_name = {n.name: n for n in region.nodes}
    units = _emission_units(region, [(t, [by_name[m] for m in names]) for t, names in groups],
                            fused_rq)
    for template, members in units:
        if template is None:
            lower_node(members[0])
        else:
            lower_group(template, members)
    # Each output is read back from the map that is its own whole buffer (not a slice).
    whole = {id(v): [x for x in maps.get(id(v), [])
                     if x.pixel == x.c and x.addr == ctx.b.buffers[x.buffer].offset]
             for v in region.outputs}
    missing = [v.name for v in region.outputs if not whole[id(v)]]
    if missing:
        raise TargetError(f"region {region.name!r}: outputs {missing} are not produced")
    bindings = [Binding(v.name, whole[id(v)][0].buffer, _nchw(v)) for v in region.outputs]
    # every other value the stream writes to a whole buffer of its own, for --per-layer (a
    # view such as Flatten shares its producer's buffer, whose layout is the producer's)
    claimed = {b.buffer for b in bindings}
    recorded = []
    for n in region.nodes:
        for v in n.outputs:
            ms = [x for x in maps.get(id(v), [])
                  if x.pixel == x.c and x.addr == ctx.b.buffers[x.buffer].offset]
            if ms and ms[0].buffer not in claimed:
                claimed.add(ms[0].buffer)
                recorded.append(Binding(v.name, ms[0].buffer, _nchw(v)))
    return DNNVMKernel(region.name, ctx.finish(), inputs, bindings, dict(ctx.constants), infos,
                       recorded)


def _emission_units(region: Region, groups, skip: set[int]):
    """The order to lower in: each fused group as one unit, every other node alone (fused
    Requantize nodes and Concats emit nothing), topologically sorted over the units so that a
    group runs after everything it reads and before everything that reads it; ties keep the
    region's node order."""
    unit_of: dict[int, int] = {}
    units: list[tuple[str | None, list[Node]]] = []
    for template, members in groups:
        for m in members:
            unit_of[id(m)] = len(units)
        units.append((template, members))
    for n in region.nodes:
        if id(n) not in unit_of and id(n) not in skip and n.op != "Concat":
            unit_of[id(n)] = len(units)
            units.append((None, [n]))
    # after[id(value)]: the units that must have run before the value can be read
    after: dict[int, set[int]] = {}
    deps: list[set[int]] = [set() for _ in units]
    for n in region.nodes:
        need = set().union(*(after.get(id(v), set()) for v in n.inputs if v is not None))
        u = unit_of.get(id(n))
        if u is None:                      # emits nothing: its output is ready with its inputs
            for v in n.outputs:
                after[id(v)] = need
            continue
        deps[u] |= need - {u}
        for v in n.outputs:
            after[id(v)] = {u}
    rank = {id(n): i for i, n in enumerate(region.nodes)}
    key = [min(rank[id(m)] for m in members) for _, members in units]
    order, done = [], set()
    while len(order) < len(units):
        ready = [u for u in range(len(units)) if u not in done and deps[u] <= done]
        if not ready:
            raise TargetError(f"region {region.name!r}: fused groups form a cycle")
        u = min(ready, key=lambda k: key[k])
        order.append(units[u])
        done.add(u)
    return order


def layer_of(n: Node, rq: Node | None):
    """The layer description of a node the overlay runs (None for views): Conv2d (dense
    layers as a 1x1 conv over one pixel of K features, for costing), Pool2d, ResidualAdd or
    RequantizeLayer."""
    a = resolve_attrs(n)
    shape = _nchw(n.inputs[0])
    if n.op == "Conv":
        return conv_layer(n, rq)
    if n.op in ("Gemm", "MatMul"):
        w = dense_weight(n)
        k = int(w.shape[1])
        return Conv2d(n.name, (shape[0], k, 1, 1), int(w.shape[0]), (1, 1),
                      requant=requant_of(rq), op=n.op)
    if n.op == "MaxPool":
        return Pool2d(n.name, "max", shape, tuple(int(k) for k in a["kernel_shape"]),
                      tuple(int(s) for s in (a.get("strides") or [1, 1])), pool_pads(n))
    if n.op == "QAdd":
        return ResidualAdd(n.name, shape, int(a["shift_a"]), int(a["shift_b"]),
                           int(a["out_shift"]), int(a["lo"]), int(a["hi"]))
    if n.op in ("Relu", "Requantize"):
        return RequantizeLayer(n.name, shape,
                               Requant(0, 0, 127) if n.op == "Relu" else requant_of(n))
    return None


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


__all__ = ["layer_of", "lower_region", "pool_pads"]
