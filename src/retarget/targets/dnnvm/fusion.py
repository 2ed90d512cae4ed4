"""dnnvm's fusion templates, the layer graph they match, and the cycle model of a group.

The paper's templates (Sec. IV-A, ../shared/specs/dnnvm.md §8), as far as the overlay lowers
them as one unit (lower.py):

- intrinsic: BatchNorm into conv weights (the quantiser), conv + bias + requantise + ReLU as
  one CONV, concat / flatten as SAVE / LOAD addressing: already one vertex or an edge here;
- point-wise: the activation into the producing CONV / ELEW (the quantiser's clip range);
- vertical: CONV -> POOL (`conv_pool`), CONV -> element-wise add (`conv_add`), each when the
  conv's result has no other consumer;
- horizontal: two or three dense convs reading one input through the same window
  (`horizontal2`, `horizontal3`): the input tile is loaded once for all of them; and two or
  three 1x1 convs with a size-keeping stride-1 pool on the same input (`horizontal2_pool`,
  `horizontal3_pool`: an Inception module's branches, lower.conv_pool_group), the POOL engine
  pooling the tiles the CONV engine convolves.

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

from dataclasses import dataclass, fields, replace

from ...errors import TargetError
from ...ops.quantized import ACCUMULATING_OPS
from ..accel.graph_layers import region_requantize_map
from ..base import Region
from ..fusion import FusionGraph, Template, Vertex
from .config import DNNVMConfig
from .lower import ConvHead, Lowering, conv_conv_ok, pool_group_ok
from .region import layer_of
from .timing import simulate_timing


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


def _conv_or_pool(g: FusionGraph, t: int, v: int) -> bool:
    return g.vertices[v].type == "pool" or _dense(g, t, v)


def _shares_pool_tiles(g: FusionGraph, mapping: tuple[int, ...]) -> bool:
    """The convs of a horizontal group with a pool read the input pixel by pixel (1x1) and
    the pool keeps its size: their tiles are the same rows (lower.pool_group_ok)."""
    pool = g.vertices[mapping[-1]].attrs["layer"]
    return all(pool_group_ok(g.vertices[v].attrs["layer"], pool) is None
               for v in mapping[1:-1])


def _same_window(g: FusionGraph, mapping: tuple[int, ...]) -> bool:
    keys = {(lay.in_shape, lay.kernel, lay.stride, lay.pads)
            for lay in (g.vertices[v].attrs["layer"] for v in mapping[1:])}
    return len(keys) == 1


TEMPLATES = (
    # an Inception module's four branches: 1x1 convs and a same-size pool on one input
    Template("horizontal3_pool", ("*", "conv", "conv", "conv", "pool"),
             ((0, 1), (0, 2), (0, 3), (0, 4)), (1, 2, 3, 4), _conv_or_pool, _shares_pool_tiles),
    Template("horizontal2_pool", ("*", "conv", "conv", "pool"), ((0, 1), (0, 2), (0, 3)),
             (1, 2, 3), _conv_or_pool, _shares_pool_tiles),
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
    with fresh DDR maps), cached by geometry: a network repeating a block pays once. `stream`
    times several units as one stream, each reading what an earlier one wrote."""

    def __init__(self, cfg: DNNVMConfig):
        self.cfg = cfg
        self._cache: dict[tuple, int | None] = {}

    def __call__(self, g: FusionGraph, members: tuple[int, ...]) -> int | None:
        unit = _Unit.of(g, members)
        if unit.kinds in (("input",), ("concat",), ("view",)):
            return 0                                   # addressing only: no instructions
        key = unit.key
        if key not in self._cache:
            self._cache[key] = self._timed([(unit, None)])
        return self._cache[key]

    def stream(self, g: FusionGraph, units: list[tuple[int, ...]]) -> int | None:
        """Modelled cycles of `units` (member tuples: groups or single layers) lowered as one
        stream in the order the region's lowering would emit them, a unit reading an earlier
        unit's output from where that one wrote it. This sees the overlap between units (a
        unit's loads under the previous one's compute, when it does not wait for its result)
        that a sum of costs alone misses."""
        ordered = [_Unit.of(g, units[k]) for k in _unit_order(g, units)]
        made: dict[int, tuple[int, int]] = {}    # id(value) -> (unit, its output) writing it
        wired = []
        for k, u in enumerate(ordered):
            wired.append((u, tuple(made.get(id(x), (-1, 0)) for x in u.inputs)))
            for i, v in enumerate(u.written):
                made[id(v)] = (k, i)
        key = ("stream",) + tuple((u.key, w) for u, w in wired)
        if key not in self._cache:
            self._cache[key] = self._timed(wired)
        return self._cache[key]

    def _timed(self, wired) -> int | None:
        """Lower each (unit, (unit, output) writing each of its inputs, or None / unit -1:
        a fresh map) in order, and time the stream."""
        ctx = Lowering(self.cfg, check=False)
        outs: list[list] = []
        try:
            for k, (u, producers) in enumerate(wired):
                if not u.layers:          # addressing (an input, a concat): no instructions
                    outs.append([])
                    continue
                ins = [ctx.input(f"x{k}.{i}", shape) if p is None or p[0] < 0
                       else outs[p[0]][p[1]]
                       for i, (p, shape) in enumerate(zip(producers or [None] * len(u.inputs),
                                                          u.in_shapes))]
                outs.append([ctx.feature_map(f"y{k}.{i}", shape)
                             for i, shape in enumerate(u.out_shapes)])
                if not u.emit(ctx, ins, outs[-1]):
                    return None           # dense layers and anything else: not modelled
        except TargetError:
            return None                   # the group does not fit the buffers
        return simulate_timing(ctx.finish()).total_cycles


def _unit_order(g: FusionGraph, units: list[tuple[int, ...]]) -> list[int]:
    """Units in the order lower_region emits them: a unit after every unit it reads from,
    ties to the one whose first layer comes first in the region (vertex order)."""
    unit_of = {v: k for k, m in enumerate(units) for v in m}
    deps = [{unit_of[p] for v in m for p in g.pred[v] if p in unit_of} - {k}
            for k, m in enumerate(units)]
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(units):
        k = min((k for k in range(len(units)) if k not in done and deps[k] <= done),
                key=lambda k: min(units[k]))
        order.append(k)
        done.add(k)
    return order


@dataclass(frozen=True)
class _Unit:
    """One group or layer of a fusion graph as the lowering sees it: kinds, layers, the values
    it reads (in the order its lowering takes them) and the values it writes."""
    kinds: tuple[str, ...]
    layers: tuple
    inputs: tuple
    values: tuple
    conv_is_a: bool
    chained: bool

    @staticmethod
    def of(g: FusionGraph, members: tuple[int, ...]) -> "_Unit":
        verts = [g.vertices[v] for v in members]
        kinds = tuple(v.type for v in verts)
        if kinds[0] in ("input", "concat", "view"):
            return _Unit(kinds, (), (), (), True, False)
        layers = tuple(v.attrs["layer"] for v in verts)
        nodes = [v.attrs["node"] for v in verts]
        # the conv's result is the add's first operand (a) or its second (b)
        conv_is_a = kinds[-2:] != ("conv", "add") or \
            nodes[-1].inputs[0] is verts[-2].attrs["value"]
        # two convs are a vertical pair (the second reads the first) or a horizontal one
        chained = len(members) == 2 and members[1] in g.succ[members[0]]
        if kinds == ("add",):
            inputs = tuple(nodes[0].inputs[:2])
        elif kinds[-1] == "add":                  # the add's operand the group does not make
            other = nodes[-1].inputs[1] if conv_is_a else nodes[-1].inputs[0]
            inputs = (nodes[0].inputs[0], other)
        else:
            inputs = (nodes[0].inputs[0],)
        values = tuple(v.attrs["value"] for v in verts)
        return _Unit(kinds, layers, inputs, values, conv_is_a, chained)

    @property
    def key(self) -> tuple:
        return (self.kinds, tuple(_anonymous(lay) for lay in self.layers), self.conv_is_a,
                self.chained)

    @property
    def in_shapes(self) -> list[tuple[int, ...]]:
        first = self.layers[0]
        if self.kinds == ("add",):
            return [first.shape, first.shape]
        shape = first.shape if self.kinds[0] in ("add", "requant") else first.in_shape
        return [shape] + ([self.layers[-1].shape] if len(self.inputs) > 1 else [])

    @property
    def horizontal(self) -> bool:
        return len(self.kinds) > 1 and set(self.kinds) == {"conv"} and not self.chained

    @property
    def pool_group(self) -> bool:
        """Horizontal convs with a pool on the same input (never a vertical conv -> pool)."""
        return len(self.kinds) > 2 and self.kinds[-1] == "pool" and \
            set(self.kinds[:-1]) == {"conv"}

    @property
    def written(self) -> tuple:
        """The values the unit writes to DDR: each member's of a horizontal group, else the
        last member's (a group keeps the others on chip)."""
        return self.values if self.horizontal or self.pool_group else self.values[-1:]

    @property
    def out_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of `written`."""
        if self.horizontal or self.pool_group:
            return [lay.out_shape for lay in self.layers]
        last = self.layers[-1]
        return [last.shape if self.kinds[-1] in ("add", "requant") else last.out_shape]

    def emit(self, ctx: Lowering, ins: list, outs: list) -> bool:
        """Lower the unit (no weights: timing only); False when it has no lowering."""
        kinds, layers = self.kinds, self.layers
        if kinds in (("conv",), ("dense",)):
            ctx.conv(layers[0], ins[0], outs, None, None)
        elif kinds == ("pool",):
            ctx.pool(layers[0], ins[0], outs)
        elif kinds == ("add",):
            ctx.add(layers[0], ins[0], ins[1], outs)
        elif kinds == ("requant",):
            ctx.requantize(layers[0], ins[0], outs)
        elif kinds == ("conv", "pool"):
            ctx.conv_pool(layers[0], ins[0], None, None, layers[1], outs)
        elif kinds == ("conv", "add"):
            ctx.conv_add(layers[0], ins[0], None, None, layers[1], ins[1], self.conv_is_a, outs)
        elif kinds == ("conv", "conv") and self.chained:
            ctx.conv_conv(layers[0], ins[0], None, None, layers[1], None, None, outs)
        elif kinds == ("conv", "conv", "add"):
            ctx.conv_conv(layers[0], ins[0], None, None, layers[1], None, None, outs,
                          add=layers[2], other=ins[1], conv_is_a=self.conv_is_a)
        elif self.pool_group:
            ctx.conv_pool_group([ConvHead(lay, (y,)) for lay, y in zip(layers[:-1], outs)],
                                layers[-1], outs[-1:], ins[0])
        elif self.horizontal:
            ctx.conv_group([ConvHead(lay, (y,)) for lay, y in zip(layers, outs)], ins[0])
        else:
            return False
        return True


# Fields that change what a layer computes but not how long it takes: the cost caches key on
# geometry without them, so the blocks of a network that differ only in their quantisation
# scales are lowered and timed once.
_TIMING_FREE = frozenset({"name", "requant", "shift", "shift_a", "shift_b", "out_shift", "lo",
                          "hi"})


def _anonymous(layer):
    if layer is None:
        return None
    return replace(layer, **{f.name: "" if f.name == "name" else f.default
                             for f in fields(layer) if f.name in _TIMING_FREE})


__all__ = ["GroupCosts", "TEMPLATES", "fusion_graph"]
