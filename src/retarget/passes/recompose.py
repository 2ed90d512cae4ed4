"""recompose: put back the single ops that exporters write as chains of elementwise ops.

- LayerNormalization over trailing axes, from the chain PyTorch exports below opset 17 (and
  hand-written LayerNorm code produces):

      m = ReduceMean(x, axes); d = Sub(x, m); v = ReduceMean(Pow(d, 2) or Mul(d, d), axes)
      y = Div(d, Sqrt(Add(v, eps)))  [then Mul by a constant weight] [then Add a constant bias]

- Gelu (exact, approximate="none"), from the Erf form exported below opset 20:

      Erf(x / sqrt(2)) (or x * 1/sqrt(2)), + 1, then * x and * 0.5 in either order

Only chains whose intermediate values nobody else reads are replaced, so the graph computes
the same function (the reference then evaluates it in one float64 pass, as accurate as the
chain or more). Normalisation over a middle axis (ConvNeXt's channels-first LayerNorm2d) has
no single-op form and stays a chain; so does GELU's tanh approximation.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Graph, Node, Value, constant

_REL = 1e-6     # how close a constant must be to 2, sqrt(2), 1, 0.5 ... to count as it


def _scalar(v: Value | None) -> float | None:
    if v is None or v.const is None or np.asarray(v.const).size != 1:
        return None
    return float(np.asarray(v.const).reshape(()))


def _is(v: Value | None, want: float) -> bool:
    s = _scalar(v)
    return s is not None and abs(s - want) <= _REL * abs(want)


def _other(node: Node, v: Value) -> Value | None:
    """The operand of binary `node` that is not `v` (None if `v` is not an operand)."""
    a, b = node.inputs[0], node.input(1)
    return b if a is v else a if b is v else None


class _Graph:
    """Producer / consumer look-ups over a graph being rewritten."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producer = graph.producers()
        self.uses = graph.consumers()
        self.outputs = {id(v) for v in graph.outputs}

    def made_by(self, v: Value | None, op: str) -> Node | None:
        n = self.producer.get(v) if v is not None else None
        return n if n is not None and n.op == op else None

    def private(self, v: Value, readers: int = 1) -> bool:
        """Whether `v` is read by exactly `readers` node inputs and is no graph output."""
        return id(v) not in self.outputs and len(self.uses.get(v, [])) == readers

    def sole_reader(self, v: Value, op: str) -> Node | None:
        uses = self.uses.get(v, [])
        if len(uses) == 1 and uses[0].op == op and id(v) not in self.outputs:
            return uses[0]
        return None


def _axes(node: Node) -> list[int] | None:
    ax = node.input(1)
    if ax is None or ax.const is None or node.attrs.get("keepdims", 1) != 1:
        return None
    return [int(a) for a in np.asarray(ax.const).reshape(-1)]


def _layer_norm_at(g: _Graph, div: Node) -> tuple[list[Node], Node] | None:
    """The LayerNorm chain ending at `div` (its nodes, the new node), or None."""
    d, s = div.inputs
    sqrt = g.made_by(s, "Sqrt")
    add = g.made_by(sqrt.inputs[0], "Add") if sqrt else None
    if add is None:
        return None
    var_v = next((x for x in add.inputs if _scalar(x) is None), None)
    eps = _scalar(_other(add, var_v)) if var_v is not None else None
    var = g.made_by(var_v, "ReduceMean")
    sub = g.made_by(d, "Sub")
    if var is None or eps is None or sub is None:
        return None
    sq = g.producer.get(var.inputs[0])
    if sq is None or not ((sq.op == "Pow" and sq.inputs[0] is d and _is(sq.input(1), 2.0))
                          or (sq.op == "Mul" and sq.inputs[0] is d and sq.input(1) is d)):
        return None
    x, m = sub.inputs
    mean = g.made_by(m, "ReduceMean")
    if mean is None or mean.inputs[0] is not x or x.type is None:
        return None
    rank = x.type.rank
    axes = _axes(mean)
    if axes is None or _axes(var) is None or \
            sorted(a % rank for a in axes) != sorted(a % rank for a in _axes(var)):
        return None
    axes = sorted(a % rank for a in axes)
    if axes != list(range(axes[0], rank)):
        return None                      # not trailing axes: no LayerNormalization form
    d_reads = 3 if sq.op == "Mul" else 2
    if not (g.private(m) and g.private(d, d_reads) and g.private(sq.outputs[0])
            and g.private(var_v) and g.private(add.outputs[0]) and g.private(s)):
        return None
    chain = [mean, sub, sq, var, add, sqrt, div]
    a, dtype = axes[0], np.dtype(x.type.dtype)
    norm_shape = tuple(x.type.shape[a:])
    weight, bias, out = np.ones(norm_shape, dtype), None, div.outputs[0]
    mul = g.sole_reader(out, "Mul")
    w = _other(mul, out) if mul is not None else None
    if w is not None and w.const is not None and _affine(w.const, x.type.shape, a) is not None:
        weight, out = _affine(w.const, x.type.shape, a).astype(dtype), mul.outputs[0]
        chain.append(mul)
    plus = g.sole_reader(out, "Add")
    b = _other(plus, out) if plus is not None else None
    if b is not None and b.const is not None and _affine(b.const, x.type.shape, a) is not None:
        bias, out = _affine(b.const, x.type.shape, a).astype(dtype), plus.outputs[0]
        chain.append(plus)
    inputs = [x, constant(f"{div.name}/ln_scale", weight)]
    if bias is not None:
        inputs.append(constant(f"{div.name}/ln_bias", bias))
    node = Node("LayerNormalization", f"{div.name}/LayerNormalization", inputs, [out],
                {"axis": a, "epsilon": eps})
    return chain, node


def _affine(c: np.ndarray, x_shape, a: int) -> np.ndarray | None:
    """A weight or bias as the normalised shape x_shape[a:], when it broadcasts to x_shape and
    does not vary along the leading axes; else None."""
    c = np.asarray(c)
    try:
        if np.broadcast_shapes(tuple(x_shape), c.shape) != tuple(x_shape):
            return None
    except ValueError:
        return None
    lead = len(x_shape) - c.ndim
    if any(dim != 1 for dim in c.shape[:max(0, a - lead)]):
        return None
    return np.broadcast_to(c, tuple(x_shape))[(0,) * a].copy()


def _gelu_at(g: _Graph, erf: Node) -> tuple[list[Node], Node] | None:
    """The Erf-form GELU chain around `erf`, or None."""
    scale = g.producer.get(erf.inputs[0])
    if scale is None or not g.private(erf.inputs[0]):
        return None
    if scale.op == "Div" and _is(scale.input(1), math.sqrt(2.0)):
        x = scale.inputs[0]
    elif scale.op == "Mul":
        x = next((v for v in scale.inputs if _scalar(v) is None), None)
        if x is None or not _is(_other(scale, x), 1 / math.sqrt(2.0)):
            return None
    else:
        return None
    one = g.sole_reader(erf.outputs[0], "Add")
    if one is None or not _is(_other(one, erf.outputs[0]), 1.0):
        return None
    f = one.outputs[0]
    m1 = g.sole_reader(f, "Mul")
    if m1 is None:
        return None
    other = _other(m1, f)
    if other is x:                                  # (x * f) * 0.5
        m2 = g.sole_reader(m1.outputs[0], "Mul")
        if m2 is None or not _is(_other(m2, m1.outputs[0]), 0.5):
            return None
        chain = [scale, erf, one, m1, m2]
    else:                                           # (x * 0.5) * f
        half = g.producer.get(other)
        if half is None or half.op != "Mul" or x not in half.inputs or \
                not _is(_other(half, x), 0.5) or not g.private(other):
            return None
        m2, chain = m1, [scale, erf, one, half, m1]
    node = Node("Gelu", f"{erf.name}/Gelu", [x], [m2.outputs[0]], {"approximate": "none"})
    return chain, node


def recompose_inplace(graph: Graph) -> bool:
    """Replace every recognised chain in `graph` by its single op; True when one was."""
    changed = False
    for op, match in (("Div", _layer_norm_at), ("Erf", _gelu_at)):
        g = _Graph(graph)
        replaced: dict[int, Node | None] = {}
        for n in graph.nodes:
            if n.op != op or id(n) in replaced:
                continue
            found = match(g, n)
            if found is None or any(id(c) in replaced for c in found[0]):
                continue
            chain, new = found
            for c in chain:
                replaced[id(c)] = None
            replaced[id(chain[-1])] = new     # the new node takes the last one's place
        if replaced:
            graph.nodes = [replaced.get(id(n), n) for n in graph.nodes
                           if replaced.get(id(n), n) is not None]
            changed = True
    return changed
