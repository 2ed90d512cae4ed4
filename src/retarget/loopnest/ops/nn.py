"""Convolutions lowered to loop nests: Conv, and ConvTranspose per output phase."""
from __future__ import annotations

import math
from itertools import product

from ...ir.graph import Node
from ...ops.nn import conv_transpose_window, conv_window
from ...ops.registry import resolve_attrs
from ..ir import Affine, Kernel, Load, Stmt, Store, Tensor, aff
from .common import Axis, _KernelBuilder, _bin, _c, _spatial_names, load, nest, reduction_axes


# ---- convolutions ---------------------------------------------------------------------------
def _grouped_channels(groups: int, per_group: int
                      ) -> tuple[list[Axis], Affine, Affine, Affine]:
    """Output-channel loops of a grouped op: (axes, output channel, group, channel within the
    group). One loop "oc" without groups, one loop "g" when each group has one channel
    (depthwise), else "g" then "m": a channel index of a single variable keeps the output
    store a plain per-dimension index."""
    if groups == 1:
        return [("oc", per_group)], aff("oc"), aff(0), aff("oc")
    if per_group == 1:
        return [("g", groups)], aff("g"), aff("g"), aff(0)
    return [("g", groups), ("m", per_group)], aff("g") * per_group + "m", aff("g"), aff("m")


def _conv_init(y: Tensor, out_axes: list[Axis], out_index: tuple, bias: Tensor | None,
               channel: Affine) -> tuple[Stmt, ...]:
    """The init nest: every output element starts at its channel's bias (or 0)."""
    start = Load(bias[(channel,)]) if bias is not None else _c(0)
    return nest(out_axes, [Store(y[out_index], start)], len(out_axes))


def _conv_operands(node: Node):
    """(builder, resolved attrs, x, w, bias or None) of a Conv / ConvTranspose node."""
    kb = _KernelBuilder(node)
    xv, wv, bv = node.inputs[0], node.inputs[1], node.input(2)
    kb.require([xv, wv, bv, node.outputs[0]])
    x, w = kb.input(xv), kb.input(wv)
    return kb, resolve_attrs(node), x, w, (kb.input(bv) if bv is not None else None)


def _lower_conv(node: Node) -> Kernel:
    """Conv (any number of spatial dims, groups, strides, dilations, pads, auto_pad): y = bias,
    then the perfect nest y[n, oc, o] += x[n, g*cg + ic, o*s + k*d - pad] * w[oc, ic, k]."""
    kb, attrs, x, w, b = _conv_operands(node)
    win = conv_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    y = kb.output(node.outputs[0])
    n, c = x.shape[:2]
    m, group = w.shape[0], int(attrs["group"])
    cg, mg = c // group, m // group
    names = _spatial_names(len(win.out))
    ch_axes, oc, g, _ = _grouped_channels(group, mg)
    out_axes = [("n", n)] + ch_axes + [(f"o{s}", o) for s, o in zip(names, win.out)]
    red_axes, red = reduction_axes([("ic", cg)] + [(f"k{s}", k)
                                                   for s, k in zip(names, win.kernel)])
    out_index = (aff("n"), oc) + tuple(aff(f"o{s}") for s in names)
    spatial = [aff(f"o{s}") * st + red[f"k{s}"] * dl - pb for s, st, dl, pb in
               zip(names, win.strides, win.dilations, win.pads_begin)]
    extents = dict(out_axes + red_axes)
    xs = load(x, [aff("n"), g * cg + red["ic"]] + spatial, extents, 0.0)
    ws = Load(w[(oc, red["ic"]) + tuple(red[f"k{s}"] for s in names)])
    body = _conv_init(y, out_axes, out_index, b, oc)
    body += nest(out_axes + red_axes, [Store(y[out_index], _bin("*", xs, ws), "+")],
                 len(out_axes))
    return kb.kernel([y], body)


def _transposed_phases(k: int, s: int, d: int, pad: int, out: int
                       ) -> list[tuple[int, int, int, int, int, int, int]]:
    """ConvTranspose along one axis, per output phase r (outputs o = s*q + r). Output o takes
    input i through tap t where s*i + d*t = o + pad: the taps whose r + pad - d*t is a
    multiple of s. Those solve d*t = r + pad (mod s), so they are t0 + t_step*j with
    t_step = s / gcd(d, s), and then i = q + i0 - i_step*j with i_step = d*t_step / s, an
    integer. Returns (r, count of q, t0, t_step, number of taps, i0, i_step) for each phase
    that has a tap (outputs of the others keep their bias)."""
    phases = []
    t_step = s // math.gcd(d, s)
    for r in range(min(s, out)):
        taps = [t for t in range(k) if (r + pad - d * t) % s == 0]
        if not taps:
            continue
        i0 = (r + pad - d * taps[0]) // s
        phases.append((r, -(-(out - r) // s), taps[0], t_step, len(taps), i0, d * t_step // s))
    return phases


def _lower_conv_transpose(node: Node) -> Kernel:
    """ConvTranspose as gathers, one perfect accumulation nest per output phase (see
    _transposed_phases): the scatter form would store out of bounds where the pads crop,
    and the gather form needs (o + pad - d*t) / s, which is affine only within one phase."""
    kb, attrs, x, w, b = _conv_operands(node)
    win = conv_transpose_window(x.shape, w.shape, None if b is None else b.shape, **attrs)
    y = kb.output(node.outputs[0])
    n, c = x.shape[:2]
    group, mg = int(attrs["group"]), w.shape[1]
    cg = c // group
    names = _spatial_names(len(win.out))
    ch_axes, oc, g, within = _grouped_channels(group, mg)
    out_axes = [("n", n)] + ch_axes + [(f"o{s}", o) for s, o in zip(names, win.out)]
    out_index = (aff("n"), oc) + tuple(aff(f"o{s}") for s in names)
    body = _conv_init(y, out_axes, out_index, b, oc)
    per_axis = [_transposed_phases(k, s, d, pb, o) for k, s, d, pb, o in
                zip(win.kernel, win.strides, win.dilations, win.pads_begin, win.out)]
    for phase in product(*per_axis):
        q_axes = [("n", n)] + ch_axes + [(f"q{s}", ph[1]) for s, ph in zip(names, phase)]
        red_axes, red = reduction_axes([("ic", cg)] + [(f"t{s}", ph[4])
                                                       for s, ph in zip(names, phase)])
        q = [aff(f"q{s}") for s in names]
        dst = (aff("n"), oc) + tuple(qi * st + ph[0] for qi, st, ph in
                                     zip(q, win.strides, phase))
        src = [qi + ph[5] - red[f"t{s}"] * ph[6] for qi, s, ph in zip(q, names, phase)]
        tap = [red[f"t{s}"] * ph[3] + ph[2] for s, ph in zip(names, phase)]
        extents = dict(q_axes + red_axes)
        xs = load(x, [aff("n"), g * cg + red["ic"]] + src, extents, 0.0)
        ws = Load(w[(g * cg + red["ic"], within) + tuple(tap)])
        body += nest(q_axes + red_axes, [Store(y[dst], _bin("*", xs, ws), "+")], len(q_axes))
    return kb.kernel([y], body)
