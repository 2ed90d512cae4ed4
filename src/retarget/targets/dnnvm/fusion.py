"""dnnvm's fusion templates, the layer graph they match, and the cycle model of a group.

The paper's templates (Sec. IV-A, ../shared/specs/dnnvm.md §8), as far as the overlay lowers
them as one unit (lower.py):

- intrinsic: BatchNorm into conv weights (the quantiser), conv + bias + requantise + ReLU as
  one CONV, concat / flatten as SAVE / LOAD addressing: already one vertex or an edge here;
- point-wise: the activation into the producing CONV / ELEW (the quantiser's clip range);
- vertical: CONV -> POOL (`conv_pool`), CONV -> element-wise add (`conv_add`), each when the
  conv's result has no other consumer;
- horizontal: two or three dense convs reading one input through the same window
  (`horizontal2`, `horizontal3`): the input tile is loaded once for all of them.

- vertical CONV -> CONV (`conv_conv`), the intermediate kept on chip: the first conv's only
  consumer is the second, which is dense (any kernel, stride and padding the CONV encodes);
  the first is dense or depthwise; and CONV -> CONV -> add (`conv_conv_add`: a bottleneck's
  3x3 -> 1x1 -> residual add, the second conv's only consumer the add, as conv_add). The buffer-fit check is the target's (lower.conv_conv_fit:
  both convs' weights and biases resident, the intermediate rows and columns the second
  conv's window needs beside its accumulators in one output slot; a pair whose weights do
  not fit at once streams both convs' weights chunk by chunk through the weight slots, as
  one tile covering the map with the whole output buffer, so each weight is loaded once);
  a pair no tile fits has no cost, so the search never chooses it. The cost is the group
  lowered alone and timed, so a streamed group is chosen only when it pays.
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import TargetError
from ...ops.quantized import ACCUMULATING_OPS
from ..accel.graph_layers import region_requantize_map
from ..base import Region
from ..fusion import FusionGraph, Template, Vertex
from .config import DNNVMConfig
from .lower import ConvHead, Lowering, conv_conv_ok
from .region import layer_of


def _one_consumer(g: FusionGraph, t: int, v: int) -> bool:
    """The conv's result goes to the one consumer the template names and nowhere else."""
    return t != 0 or (len(g.succ[v]) == 1 and not g.vertices[v].attrs["output"])


def _dense(g: FusionGraph, t: int, v: int) -> bool:
    return t == 0 or (g.vertices[v].attrs["layer"].groups == 1)


def _inner(g: FusionGraph, t: int, v: int) -> bool:
    """Both convs of a conv -> conv -> add: each result goes only to the next vertex."""
    return t == 2 or (len(g.succ[v]) == 1 and not g.vertices[v].attrs["output"])


def _chainable(g: FusionGraph, mapping: tuple[int, ...]) -> bool:
    l1, l2 = (g.vertices[v].attrs["layer"] for v in mapping[:2])
    return conv_conv_ok(l1, l2) is None


def _same_window(g: FusionGraph, mapping: tuple[int, ...]) -> bool:
    keys = {(lay.in_shape, lay.kernel, lay.stride, lay.pads)
            for lay in (g.vertices[v].attrs["layer"] for v in mapping[1:])}
    return len(keys) == 1


TEMPLATES = (
    Template("conv_pool", ("conv", "pool"), ((0, 1),), (0, 1), _one_consumer),
    Template("conv_add", ("conv", "add"), ((0, 1),), (0, 1), _one_consumer),
    Template("horizontal3", ("*", "conv", "conv", "conv"), ((0, 1), (0, 2), (0, 3)),
             (1, 2, 3), _dense, _same_window),
    Template("horizontal2", ("*", "conv", "conv"), ((0, 1), (0, 2)), (1, 2), _dense,
             _same_window),
    # last: greedy takes the first template among groups of one size
    Template("conv_conv", ("conv", "conv"), ((0, 1),), (0, 1), _one_consumer, _chainable),
    Template("conv_conv_add", ("conv", "conv", "add"), ((0, 1), (1, 2)), (0, 1, 2), _inner,
             _chainable),
)

_TYPES = {"Conv": "conv", "Gemm": "dense", "MatMul": "dense", "MaxPool": "pool",
          "QAdd": "add", "Relu": "requant", "Requantize": "requant", "Concat": "concat",
          "Flatten": "view"}


def fusion_graph(region: Region) -> FusionGraph:
    """The region's layers as vertices (a conv with its fused Requantize is one; a region
    input is a data-only vertex), with an edge per value a layer reads from another."""
    fused = region_requantize_map(region)           # id(conv) -> its Requantize node
    fused_rq = {id(rq) for rq in fused.values()}
    verts: list[Vertex] = []
    producer: dict[int, int] = {}                   # id(value) -> vertex
    for i, v in enumerate(region.inputs):
        producer[id(v)] = len(verts)
        verts.append(Vertex(f"input:{v.name}", "input", {"output": False}, fusable=False))
    outputs = {id(v) for v in region.outputs}
    edges = []
    for n in region.nodes:
        if id(n) in fused_rq:
            continue
        rq = fused.get(id(n))
        out = (rq or n).outputs[0]
        k = len(verts)
        producer[id(out)] = k
        verts.append(Vertex(n.name, _TYPES.get(n.op, n.op.lower()),
                            {"layer": layer_of(n, rq), "output": id(out) in outputs, "node": n,
                             "value": out}))
        data = [x for x in (n.inputs[:1] if n.op in ACCUMULATING_OPS else n.inputs)
                if x is not None and not x.is_const]
        for x in data:
            if id(x) in producer and (producer[id(x)], k) not in edges:
                edges.append((producer[id(x)], k))
    return FusionGraph(verts, edges)


class GroupCosts:
    """Modelled cycles of a layer or a fused group lowered alone (the cycle model of a stream
    with fresh DDR maps), cached by geometry: a network repeating a block pays once."""

    def __init__(self, cfg: DNNVMConfig):
        self.cfg = cfg
        self._cache: dict[tuple, int | None] = {}

    def __call__(self, g: FusionGraph, members: tuple[int, ...]) -> int | None:
        verts = [g.vertices[v] for v in members]
        kinds = tuple(v.type for v in verts)
        if len(verts) == 1 and kinds[0] in ("input", "concat", "view"):
            return 0                                   # addressing only: no instructions
        layers = tuple(v.attrs["layer"] for v in verts)
        # the conv's result is the add's first operand (a) or its second (b)
        conv_is_a = kinds[-2:] != ("conv", "add") or \
            verts[-1].attrs["node"].inputs[0] is verts[-2].attrs["value"]
        # two convs are a vertical pair (the second reads the first) or a horizontal one
        chained = len(members) == 2 and members[1] in g.succ[members[0]]
        key = (kinds, tuple(_anonymous(lay) for lay in layers), conv_is_a, chained)
        if key not in self._cache:
            self._cache[key] = self._time(kinds, layers, conv_is_a, chained)
        return self._cache[key]

    def _time(self, kinds, layers, conv_is_a: bool, chained: bool = False) -> int | None:
        from .timing import simulate_timing
        ctx = Lowering(self.cfg, check=False)
        try:
            if kinds in (("conv",), ("dense",)):
                x = ctx.input("x", layers[0].in_shape)
                ctx.conv(layers[0], x, [ctx.feature_map("y", layers[0].out_shape)], None, None)
            elif kinds == ("pool",):
                lay = layers[0]
                ctx.pool(lay, ctx.input("x", lay.in_shape), [ctx.feature_map("y", lay.out_shape)])
            elif kinds == ("add",):
                lay = layers[0]
                a, b = ctx.input("a", lay.shape), ctx.input("b", lay.shape)
                ctx.add(lay, a, b, [ctx.feature_map("y", lay.shape)])
            elif kinds == ("requant",):
                lay = layers[0]
                ctx.requantize(lay, ctx.input("x", lay.shape), [ctx.feature_map("y", lay.shape)])
            elif kinds == ("conv", "pool"):
                conv, pool = layers
                ctx.conv_pool(conv, ctx.input("x", conv.in_shape), None, None, pool,
                              [ctx.feature_map("y", pool.out_shape)])
            elif kinds == ("conv", "add"):
                conv, add = layers
                ctx.conv_add(conv, ctx.input("x", conv.in_shape), None, None, add,
                             ctx.input("r", add.shape), conv_is_a,
                             [ctx.feature_map("y", add.shape)])
            elif kinds == ("conv", "conv") and chained:
                l1, l2 = layers
                ctx.conv_conv(l1, ctx.input("x", l1.in_shape), None, None, l2, None, None,
                              [ctx.feature_map("y", l2.out_shape)])
            elif kinds == ("conv", "conv", "add"):
                l1, l2, add = layers
                ctx.conv_conv(l1, ctx.input("x", l1.in_shape), None, None, l2, None, None,
                              [ctx.feature_map("y", add.shape)], add=add,
                              other=ctx.input("r", add.shape), conv_is_a=conv_is_a)
            elif set(kinds) == {"conv"}:
                x = ctx.input("x", layers[0].in_shape)
                ctx.conv_group([ConvHead(lay, (ctx.feature_map(f"y{k}", lay.out_shape),))
                                for k, lay in enumerate(layers)], x)
            else:
                return None               # dense layers and anything else: not modelled alone
        except TargetError:
            return None                   # the group does not fit the buffers
        return simulate_timing(ctx.finish()).total_cycles


def _anonymous(layer):
    return None if layer is None else replace(layer, name="")


__all__ = ["GroupCosts", "TEMPLATES", "fusion_graph"]
