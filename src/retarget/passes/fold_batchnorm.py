"""fold_batchnorm: Conv (+ bias) followed by inference BatchNormalization -> one Conv.

This is DNNVM's "intrinsic fusion": BN is a per-channel affine map, so
    BN(conv(x, W) + B) = conv(x, W * k) + (B - mean) * k + beta,  k = gamma / sqrt(var + eps)
and the accelerator only ever sees the convolution. Folding must happen before quantisation:
the folded weights are what get int8 scales (quantising W and BN separately would round twice).

Only folds when every parameter is a constant and the Conv's output feeds nothing but the BN
(otherwise the unnormalised value is still needed). Everything else is left as it was.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, constant
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
    for bn in g.nodes:
        if bn.op != "BatchNormalization" or not _foldable(bn, consumers, producers, outputs):
            continue
        conv = producers[bn.inputs[0]]
        w, b = _folded_params(conv, bn)
        conv.inputs = [conv.inputs[0], constant(g.unique_name(f"{conv.name}.weight_folded"), w),
                       constant(g.unique_name(f"{conv.name}.bias_folded"), b)]
        conv.outputs = [bn.outputs[0]]
        folded.add(id(bn))
    if not folded:
        return g
    g.nodes = [n for n in g.nodes if id(n) not in folded]
    return infer_shapes(g)


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
    w2 = w.astype(np.float64) * k.reshape((m,) + (1,) * (w.ndim - 1))
    b2 = (b.astype(np.float64) - mean) * k + beta
    return w2.astype(w.dtype), b2.astype(w.dtype)
