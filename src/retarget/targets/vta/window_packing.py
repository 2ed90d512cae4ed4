"""Window packing: a convolution with few input channels gets its kernel window moved into the
channel axis on the host, so the GEMM core stops multiplying zero channels.

The GEMM core reduces BLOCK_IN channels per micro-op. A network's first convolution (ResNet's
7x7 stem over 3 colour channels) pads its channels to BLOCK_IN = 16 and performs 5.3x its useful
MACs. Two exact rewrites trade that waste for a host-side gather of the (already int8) input:

- `columns`: the kw columns of the window become channels. X' = pad the width, then gather
  columns j + sw*ow; channel j*C + c of X' is channel c shifted by j. The conv becomes a kh x 1
  conv with stride (sh, 1) and the height padding it had; W'[o, j*C + c, i, 0] = W[o, c, i, j].
- `window`: the whole kh x kw window becomes channels (im2col): a 1x1 conv over
  kh*kw*C channels; W'[o, (i*kw + j)*C + c, 0, 0] = W[o, c, i, j].

Both sum exactly the same int8 x int8 products into the int32 accumulator, so the result is
identical bit for bit. The host ops are ONNX Pad / Gather / Transpose / Reshape nodes, so the
prepared graph still runs on the reference executor and exports as ONNX.

Which form a convolution gets is the cycle model's choice (tuning.model_cycles: each form
lowered alone with its best schedule and timed; the original is not timed when its compute
floor already loses). A form is a candidate only when it needs fewer GEMM micro-ops per output
vector. The target (VTATarget.prepare) offers only convolutions whose input comes from the
host: packing one fed by the accelerator would send its input back to the host and split the
region.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...ir.graph import Graph, Node, Value, constant
from .config import VTAConfig
from .lower import Conv2d, compute_floor, model_cycles, reason
from .lower.tensor import ceil_div

FORMS = ("columns", "window")


@dataclass(frozen=True, slots=True)
class Packing:
    """The decision for one convolution: `form` is None (left as it is), "columns" or
    "window"; `cycles` maps each form considered ("none" for the original) to model cycles,
    except the forms in `floors`, whose figure is only their compute floor (a lower bound that
    already lost, so they were not timed)."""
    conv: str
    form: str | None
    cycles: dict[str, int]
    floors: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        alts = ", ".join(f"{k} {'>= ' if k in self.floors else ''}{v:,}"
                         for k, v in self.cycles.items())
        if self.form is None:
            return f"kept unpacked: the original is fastest (model cycles: {alts})"
        return f"kernel {self.form} packed into channels on the host (model cycles: {alts})"


def gemm_uops_per_vector(layer: Conv2d, cfg: VTAConfig) -> int:
    """GEMM micro-ops (cycles) per output vector: input channel blocks x kernel positions."""
    return ceil_div(layer.in_shape[1], cfg.block_in) * layer.kernel[0] * layer.kernel[1]


def packed_layer(layer: Conv2d, form: str) -> Conv2d:
    """`layer` as the accelerator sees it after packing with `form`."""
    n, c, h, _ = layer.in_shape
    (kh, kw), (sh, _), (pt, _, pb, _) = layer.kernel, layer.stride, layer.pads
    oh, ow = layer.out_hw
    if form == "columns":
        return replace(layer, in_shape=(n, c * kw, h, ow), kernel=(kh, 1), stride=(sh, 1),
                       pads=(pt, 0, pb, 0))
    if form == "window":
        return replace(layer, in_shape=(n, c * kh * kw, oh, ow), kernel=(1, 1), stride=(1, 1),
                       pads=(0, 0, 0, 0))
    raise ValueError(f"unknown packing form {form!r}; forms: {FORMS}")


def choose_packing(layer: Conv2d, cfg: VTAConfig, max_kernel: int | None = None) -> Packing:
    """The form of least model cycles among the original and the forms that need fewer GEMM
    micro-ops per output vector (and that the lowering accepts). The original is timed only
    when its compute floor does not already exceed the best packed form's cycles (timing a
    big stem's original form is the dearest step of the choice). `max_kernel`: the original's
    window is too large for the target (ViT's 16x16 patch embedding), so it is no option and
    a packed form must bring the window within `max_kernel`."""
    base = gemm_uops_per_vector(layer, cfg)
    forms = [f for f in FORMS if layer.groups == 1 and layer.kernel != (1, 1)
             and gemm_uops_per_vector(packed_layer(layer, f), cfg) < base
             and reason(packed_layer(layer, f), cfg) is None
             and (max_kernel is None or max(packed_layer(layer, f).kernel) <= max_kernel)]
    timed = {f: model_cycles(packed_layer(layer, f), cfg) for f in forms}
    timed = {f: c for f, c in timed.items() if c is not None}
    if not timed:
        return Packing(layer.name, None, {})
    best = min(timed, key=timed.get)
    if max_kernel is not None:
        return Packing(layer.name, best, timed)
    floor = compute_floor(layer, cfg)
    if floor >= timed[best]:
        return Packing(layer.name, best, {"none": floor, **timed}, floors=("none",))
    original = model_cycles(layer, cfg)
    cycles = ({} if original is None else {"none": original}) | timed
    keep = original is not None and original <= timed[best]
    return Packing(layer.name, None if keep else best, cycles)


def pack_weight(w: np.ndarray, form: str) -> np.ndarray:
    """OIHW weights rearranged to match the packed input's channel order."""
    o, c, kh, kw = w.shape
    if form == "columns":      # channel j*C + c, kernel (kh, 1)
        return np.ascontiguousarray(w.transpose(0, 3, 1, 2).reshape(o, kw * c, kh, 1))
    # window: channel (i*kw + j)*C + c, kernel (1, 1)
    return np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(o, kh * kw * c, 1, 1))


def pack_input_nodes(graph: Graph, conv: Node, layer: Conv2d, form: str) -> tuple[list[Node],
                                                                                   Value]:
    """Host nodes computing the packed input of `conv` (int8 NCHW) and their output value."""
    x = conv.inputs[0]
    n, c, h, _ = layer.in_shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = layer.kernel, layer.stride, layer.pads
    oh, ow = layer.out_hw
    nodes: list[Node] = []

    def add(op: str, suffix: str, inputs: list, **attrs) -> Value:
        name = graph.unique_name(f"{conv.name}/pack_{suffix}")   # node and its output value
        out = Value(name)
        nodes.append(Node(op, name, inputs, [out], attrs))
        return out

    def const(suffix: str, array) -> Value:
        return constant(graph.unique_name(f"{conv.name}/pack_{suffix}"), array)

    rows = form == "window"
    top, bottom = (pt, pb) if rows else (0, 0)     # the columns form keeps its height padding
    v = x
    if top or bottom or pl or pr:
        v = add("Pad", "pad", [v, const("pads", np.array([0, 0, top, pl, 0, 0, bottom, pr],
                                                           np.int64)),
                               const("zero", np.zeros((), x.type.dtype))])
    # Gather the window's columns: [N, C, H', kw, OW] (axis 3 = W'); rows likewise.
    cols = np.arange(kw)[:, None] + sw * np.arange(ow)[None, :]
    v = add("Gather", "columns", [v, const("column_index", cols.astype(np.int64))], axis=3)
    if rows:
        idx = np.arange(kh)[:, None] + sh * np.arange(oh)[None, :]
        v = add("Gather", "rows", [v, const("row_index", idx.astype(np.int64))], axis=2)
        # [N, C, kh, OH, kw, OW] -> [N, kh, kw, C, OH, OW]
        v = add("Transpose", "order", [v], perm=[0, 2, 4, 1, 3, 5])
        shape = [n, kh * kw * c, oh, ow]
    else:
        # [N, C, H, kw, OW] -> [N, kw, C, H, OW]
        v = add("Transpose", "order", [v], perm=[0, 3, 1, 2, 4])
        shape = [n, kw * c, h, ow]
    v = add("Reshape", "channels", [v, const("shape", np.array(shape, np.int64))])
    return nodes, v


def apply_packing(graph: Graph, layer: Conv2d, form: str) -> None:
    """Rewrite Conv `layer.name` of `graph` in place to read its input packed with `form`:
    host nodes gather the input windows, the Conv takes the rearranged weights and the packed
    kernel, strides and pads. Shapes of the new values are left to infer_shapes."""
    conv = graph.node(layer.name)
    host, packed = pack_input_nodes(graph, conv, layer, form)
    conv.inputs = [packed, constant(graph.unique_name(f"{conv.name}.weight_packed"),
                                    pack_weight(conv.inputs[1].const, form))] + conv.inputs[2:]
    p = packed_layer(layer, form)
    conv.attrs.update(kernel_shape=list(p.kernel), strides=list(p.stride), pads=list(p.pads))
    conv.attrs.pop("auto_pad", None)
    at = graph.nodes.index(conv)
    graph.nodes[at:at] = host


def pack_narrow_convs(graph: Graph, cfg: VTAConfig, candidates: list[Conv2d],
                      too_wide: dict[str, int] | None = None) -> tuple[Graph, list[Packing]]:
    """Pack each of `candidates` (Conv2d descriptions named as their Conv nodes in `graph`)
    whose model-chosen form is not the original. `too_wide` maps the names of those whose
    window the target cannot take to the largest it can (choose_packing's max_kernel).
    Returns the graph (a rewritten copy whose new values compile() types, or `graph` itself
    when nothing is packed) and every decision taken."""
    too_wide = too_wide or {}
    decisions = [choose_packing(layer, cfg, too_wide.get(layer.name)) for layer in candidates]
    chosen = [(d, layer) for d, layer in zip(decisions, candidates) if d.form is not None]
    considered = [d for d in decisions if d.cycles]
    if not chosen:
        return graph, considered
    g = graph.copy()
    for d, layer in chosen:
        apply_packing(g, layer, d.form)
    return g, considered


def is_packed(conv: Node, producers: dict) -> bool:
    """Whether `conv` already reads a packed input (so packing it again is not considered)."""
    src = producers.get(conv.inputs[0])
    return src is not None and src.name.startswith(f"{conv.name}/pack_")


__all__ = ["FORMS", "Packing", "apply_packing", "choose_packing", "gemm_uops_per_vector",
           "is_packed", "pack_input_nodes", "pack_narrow_convs", "pack_weight", "packed_layer"]
