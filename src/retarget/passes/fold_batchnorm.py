"""fold_batchnorm: Conv (+ bias) followed by inference BatchNormalization -> one Conv; and a
MatMul by a constant weight followed by a BatchNormalization of its features (LeViT's Linear +
BatchNorm1d, possibly through a Flatten/Reshape to rows) -> the MatMul by scaled weights, then
an Add of the shift, which the quantiser takes in as the dense layer's int32 bias.

This is DNNVM's "intrinsic fusion": BN is a per-channel affine map, so
    BN(conv(x, W) + B) = conv(x, W * k) + (B - mean) * k + beta,  k = gamma / sqrt(var + eps)
and the accelerator only ever sees the convolution. Folding must happen before quantisation:
the folded weights are what get int8 scales (quantising W and BN separately would round twice).

Only folds when every parameter is a constant and the Conv's output feeds nothing but the BN
(otherwise the unnormalised value is still needed). Everything else is left as it was.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, Value, constant
from .infer_shapes import infer_shapes


def fold_batchnorm(graph: Graph) -> Graph:
    """A copy of `graph` with each foldable Conv -> BatchNormalization pair merged into the Conv.

    The merged Conv keeps the Conv's node name and takes over the BN's output value, so later
    passes and placement reports still see the names the model was exported with."""
    g = graph.copy()
    consumers = g.consumers()
    producers = g.producers()
    outputs = {id(v) for v in g.outputs}
    folded: set[int] = set()  # id of BN nodes merged away
    added: list[tuple[Node, Node]] = []   # (MatMul, the bias Add to place after it)
    # Names in use, gathered once (g.unique_name gathers them on every call): a name not in it
    # nor added since is free; otherwise g.unique_name decides, exactly as before.
    taken = {v.name for v in g.values()} | {n.name for n in g.nodes}

    def unique_name(base: str) -> str:
        name = base if base not in taken else g.unique_name(base)
        taken.add(name)
        return name

    for bn in g.nodes:
        if bn.op == "BatchNormalization" and id(bn.outputs[0]) not in outputs:
            mm = _dense_before(bn, consumers, producers, outputs)
            if mm is not None:
                added.append((mm, _fold_into_matmul(g, mm, bn)))
                g.replace_all_uses(bn.outputs[0], bn.inputs[0])
                taken |= {v.name for v in g.values()}   # the names the MatMul fold took
                folded.add(id(bn))
                continue
        if bn.op != "BatchNormalization" or not _foldable(bn, consumers, producers, outputs):
            continue
        conv = producers[bn.inputs[0]]
        w, b = _folded_params(conv, bn)
        conv.inputs = [conv.inputs[0], constant(unique_name(f"{conv.name}.weight_folded"), w),
                       constant(unique_name(f"{conv.name}.bias_folded"), b)]
        conv.outputs = [bn.outputs[0]]
        folded.add(id(bn))
    if not folded:
        return g
    after = {id(mm): add for mm, add in added}
    g.nodes = [m for n in g.nodes if id(n) not in folded
               for m in ((n, after[id(n)]) if id(n) in after else (n,))]
    return infer_shapes(g)


def _dense_before(bn: Node, consumers, producers, outputs) -> Node | None:
    """The MatMul by a constant 2-D weight whose features `bn` normalises: BN over an
    [rows, features] input that is the MatMul's output, or its output flattened to rows
    (LeViT's Linear + BatchNorm1d on x.flatten(0, 1)); None otherwise."""
    x = bn.inputs[0]
    if x.type is None or x.type.rank != 2 or bn.attrs.get("training_mode", 0) or \
            any(not p.is_const for p in bn.inputs[1:5]) or \
            any(consumers.get(v) or id(v) in outputs for v in bn.outputs[1:]):
        return None
    src = producers.get(x)
    if src is not None and src.op in ("Reshape", "Flatten"):
        if len(consumers.get(x, [])) != 1 or id(x) in outputs:
            return None
        x = src.inputs[0]
        src = producers.get(x)
    if src is None or src.op != "MatMul" or len(consumers.get(x, [])) != 1 or \
            id(x) in outputs or not src.inputs[1].is_const or src.inputs[1].const.ndim != 2:
        return None
    features = src.inputs[1].const.shape[1]
    return src if bn.inputs[0].type.shape[1] == features else None


def _fold_into_matmul(g: Graph, mm: Node, bn: Node) -> Node:
    """Scale `mm`'s weight columns by BN's k; return the Add of BN's shift (beta - mean * k)
    that now follows `mm` (the quantiser takes it in as the dense layer's bias)."""
    w = mm.inputs[1].const
    gamma, beta, mean, var = (v.const.astype(np.float64) for v in bn.inputs[1:5])
    k = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    mm.inputs = [mm.inputs[0], constant(g.unique_name(f"{mm.name}.weight_folded"),
                                        (w.astype(np.float64) * k).astype(w.dtype))]
    y = mm.outputs[0]
    raw = Value(g.unique_name(f"{y.name}_unshifted"))
    mm.outputs = [raw]
    shift = constant(g.unique_name(f"{mm.name}.bias_folded"), (beta - mean * k).astype(w.dtype))
    return Node("Add", f"{mm.name}/bn_shift", [raw, shift], [y])


def _foldable(bn: Node, consumers, producers, outputs) -> bool:
    x = bn.inputs[0]
    conv = producers.get(x)
    if conv is None or conv.op != "Conv" or id(x) in outputs:
        return False
    if len(consumers.get(x, [])) != 1 or bn.attrs.get("training_mode", 0):
        return False
    params = [conv.input(1), conv.input(2)] + bn.inputs[1:5]
    if any(p is not None and not p.is_const for p in params) or conv.input(1) is None:
        return False
    # Only the Y output of BN may be used (training-mode outputs are rejected above anyway).
    return all(not consumers.get(v) and id(v) not in outputs for v in bn.outputs[1:])


def _folded_params(conv: Node, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    """W * k and (B - mean) * k + beta, computed in float64 and returned in W's dtype."""
    w = conv.inputs[1].const
    m = w.shape[0]
    b = conv.input(2).const if conv.input(2) is not None else np.zeros(m, w.dtype)
    gamma, beta, mean, var = (v.const.astype(np.float64) for v in bn.inputs[1:5])
    k = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    b2 = (b.astype(np.float64) - mean) * k + beta
    kw = k.reshape((m,) + (1,) * (w.ndim - 1))
    if w.dtype.kind != "f":
        return (w.astype(np.float64) * kw).astype(w.dtype), b2.astype(w.dtype)
    # Each product computed in float64 and rounded to W's dtype as it is stored: the values
    # of (w.astype(float64) * k).astype(w.dtype), without a float64 copy of the weights.
    w2 = np.empty(w.shape, w.dtype)
    np.multiply(w, kw, out=w2, dtype=np.float64, casting="same_kind")
    return w2, b2.astype(w.dtype)
