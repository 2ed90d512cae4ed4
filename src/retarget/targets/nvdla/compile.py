"""The nvdla compiler, an outside compiler in the BYOC sense: it runs as its own process,

    python -m retarget.targets.nvdla.compile region.json -o region.loadable [--config nv_small]
    retarget-nvdla-compile region.json -o region.loadable          (the console script)

reads the export document (docs/byoc.md: region.json and its .npz), parses it into a
canonical graph (retarget's IR), maps the graph onto NVDLA's engines and writes a loadable
(loadable.py):

- Conv / Gemm / MatMul (constant int8 weights, int32 bias) and the RequantizeMul /
  Requantize of its accumulator -> one CONV layer: the convolution core (CDMA / CBUF / CSC /
  CMAC / CACC) accumulates, the SDP adds the bias and its output converter multiplies,
  shifts and clips; a QAddMul reading that output is fused in as the SDP's element-wise
  stage (its other operand read from memory), and so is a ReLU folded into the clip range;
- QAddMul, RequantizeMul, Requantize and Relu on int8 maps alone -> an SDP layer;
- MaxPool / GlobalMaxPool -> a PDP layer; SumPool and its RequantizeMul (average pooling
  in the multiplier format) -> a PDP layer that sums each window and leaves through the
  converter;
- QLrn (local response normalisation in the multiplier format) -> a CDP layer: square sums
  over the channel window, its lookup table, the multiplier and shift;
- Concat along channels -> no layer where the producers can write their channel slice of
  the concatenated map in place, else an SDP copy of the input into its slice;
- Flatten / Reshape / Squeeze / Unsqueeze / Identity -> no layer: a second address naming
  the same bytes (maps are NCHW and contiguous).

Anything else is refused with the node's name and op (exit status 2, message on stderr):
the target's rules (rules.py) never send such a node here, so a refusal means the document
did not come from the nvdla target or the two disagree.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import RetargetError
from ...ir.graph import Graph, Node, Value
from ...ops.nn import conv_window
from ...ops.registry import resolve_attrs
from ..external.export import read_document
from .config import HARDWARE_FIELDS, NvdlaConfig, load_config
from .loadable import (ADDRESS_FIELDS, ALIGN, CDP, CONV, HALF_EVEN, HAS_CVT, HAS_EW, LAYER_DTYPE,
                       MAX_POOL, NONE, PDP, SDP, SUM_POOL, Address, Loadable, Memory)

VIEW_OPS = ("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity")
ACCUMULATING = ("Conv", "Gemm", "MatMul")
REQUANT_OPS = ("RequantizeMul", "Requantize")
WEIGHTS, IO, SCRATCH = 0, 1, 2


class CompileError(RetargetError):
    """The document cannot be compiled for nvdla; the message names the node and op."""


def _where(n: Node) -> str:
    shapes = ", ".join(str(list(v.type.shape)) if v is not None and v.type else "?"
                       for v in n.inputs)
    return f"{n.op} '{n.name}' (inputs {shapes})"


@dataclass(slots=True)
class _Layer:
    """A hardware layer being built: its descriptor fields, with value names standing in for
    addresses until memory is laid out."""
    fields: dict
    src: str | None = None
    dst: str | None = None
    ew: str | None = None
    consts: dict = field(default_factory=dict)   # descriptor field -> (name, array)
    nodes: list = field(default_factory=list)


class _Compiler:
    def __init__(self, graph: Graph, cfg: NvdlaConfig):
        self.g, self.cfg = graph, cfg
        self.consumers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}
        self.inputs = {v.name for v in graph.inputs}
        self.values = {v.name: v for v in graph.values()}
        self.layers: list[_Layer] = []
        self.writers: dict[str, list[int]] = {}  # stored value -> the layers writing its bytes
        self.view_of: dict[str, str] = {}        # value -> the value whose bytes it names
        self.slice_of: dict[str, tuple[str, int]] = {}   # value -> (concat value, first ch)
        self.strings: list[str] = []
        self.string_ids: dict[str, int] = {}
        self.done: set[int] = set()

    # ---- the walk ---------------------------------------------------------------------------
    def run(self) -> Loadable:
        for n in self.g.nodes:
            if id(n) in self.done:
                continue
            if n.op in ACCUMULATING:
                self._accumulate(n)
            elif n.op in ("QAddMul", "Relu") + REQUANT_OPS:
                self._sdp(n)
            elif n.op in ("MaxPool", "GlobalMaxPool", "SumPool"):
                self._pdp(n)
            elif n.op == "QLrn":
                self._cdp(n)
            elif n.op == "Concat":
                self._concat(n)
            elif n.op in VIEW_OPS:
                self.view_of[n.outputs[0].name] = n.inputs[0].name
            else:
                raise CompileError(f"{_where(n)}: no NVDLA engine runs {n.op}")
            self.done.add(id(n))
        return self._emit()

    def _root(self, name: str) -> str:
        while name in self.view_of:
            name = self.view_of[name]
        return name

    def _sole_user(self, v: Value) -> Node | None:
        uses = self.consumers.get(v, [])
        return uses[0] if len(uses) == 1 and v.name not in self.outputs else None

    def _add_layer(self, layer: _Layer, dst: str, ch0: int = 0) -> None:
        layer.dst = dst
        layer.fields["dst_ch0"] = ch0
        self.writers.setdefault(dst, []).append(len(self.layers))
        self.layers.append(layer)

    # ---- CONV: convolution core + SDP ---------------------------------------------------------
    def _accumulate(self, n: Node) -> None:
        rq = self._sole_user(n.outputs[0])
        if rq is None or rq.op not in REQUANT_OPS:
            raise CompileError(f"{_where(n)}: its int32 accumulator must go to exactly one "
                               f"RequantizeMul (the SDP output converter) in this region")
        x, w, b = n.inputs[0], n.input(1), n.input(2)
        if x.type.dtype != "int8" or w is None or not w.is_const or w.const.dtype != np.int8:
            raise CompileError(f"{_where(n)}: needs an int8 input and constant int8 weights")
        f = _blank()
        if n.op == "Conv":
            a = resolve_attrs(n)
            if x.type.rank != 4:
                raise CompileError(f"{_where(n)}: only 2-D convolutions")
            win = conv_window(x.type.shape, w.const.shape, None, **a)
            if win.dilations != (1, 1):
                raise CompileError(f"{_where(n)}: dilation {list(win.dilations)}; the "
                                   f"convolution core runs undilated kernels here")
            weight = w.const
            f.update(src_n=x.type.shape[0], src_c=x.type.shape[1], src_h=x.type.shape[2],
                     src_w=x.type.shape[3], kernel_h=win.kernel[0], kernel_w=win.kernel[1],
                     stride_h=win.strides[0], stride_w=win.strides[1],
                     pad_t=win.pads_begin[0], pad_l=win.pads_begin[1],
                     pad_b=win.pads_end[0], pad_r=win.pads_end[1], groups=int(a["group"]),
                     dst_h=win.out[0], dst_w=win.out[1])
        else:
            # a dense layer is a 1x1 convolution over rows x 1 x 1 maps (the same bytes)
            weight = _dense_weight(n)
            f.update(src_n=math.prod(x.type.shape[:-1]), src_c=x.type.shape[-1], src_h=1,
                     src_w=1, kernel_h=1, kernel_w=1, stride_h=1, stride_w=1, groups=1,
                     dst_h=1, dst_w=1)
        out_c = weight.shape[0]
        f.update(op=CONV, dst_c=out_c)
        layer = _Layer(f, src=x.name, nodes=[n])
        layer.consts["wgt"] = (w.name, np.ascontiguousarray(weight))
        if b is not None:
            bias = np.asarray(b.const)
            rows = bias.reshape(-1, out_c) if bias.size % out_c == 0 else None
            if rows is None or not np.all(rows == rows[:1]):
                raise CompileError(f"{_where(n)}: bias {list(bias.shape)} is not one value per "
                                   f"output channel ({out_c})")
            layer.consts["bias"] = (b.name, rows[0].astype(np.int32))
        self._converter(layer, rq, out_c)
        self.done.add(id(rq))
        out = rq.outputs[0]
        add = self._sole_user(out)
        if add is not None and add.op == "QAddMul" and self._fusable_add(add, out):
            self._elementwise(layer, add, out)
            self.done.add(id(add))
            out = add.outputs[0]
        self._add_layer(layer, out.name)

    def _fusable_add(self, add: Node, main: Value) -> bool:
        """Whether `add` can be the SDP's element-wise stage of the layer producing `main`:
        same shapes (no broadcasting), and the other operand already in memory when the layer
        runs (a region input or written by an earlier layer)."""
        other = add.inputs[1] if add.inputs[0] is main else add.inputs[0]
        if other is main or len({tuple(v.type.shape) for v in (main, other,
                                                                add.outputs[0])}) != 1:
            return False
        root = self._root(other.name)
        return root in self.inputs or root in self.writers

    def _converter(self, layer: _Layer, rq: Node, channels: int) -> None:
        """The SDP output converter of `rq` (RequantizeMul, or a right-shift Requantize)."""
        a = resolve_attrs(rq)
        if a["dtype"] != "int8":
            raise CompileError(f"{_where(rq)}: the converter writes int8, not {a['dtype']}")
        f = layer.fields
        f["flags"] |= HAS_CVT | (HALF_EVEN if a["rounding"] == "half_even" else 0)
        f.update(cvt_lo=int(a["lo"]), cvt_hi=int(a["hi"]))
        per_channel = rq.input(1) is not None
        if rq.op == "RequantizeMul":
            m, s = ((rq.inputs[1].const, rq.inputs[2].const) if per_channel
                    else (a["multiplier"], a["shift"]))
        else:
            s = rq.inputs[1].const if per_channel else a["shift"]
            m = np.ones_like(s) if per_channel else 1
            if np.min(s) < 0:
                raise CompileError(f"{_where(rq)}: a left shift ({np.min(s)}); the output "
                                   f"converter shifts right")
        if per_channel:
            if np.shape(m) != (channels,) or np.shape(s) != (channels,):
                raise CompileError(f"{_where(rq)}: per-channel parameters must have "
                                   f"{channels} entries")
            layer.consts["cvt_mul"] = (f"{rq.name}.multipliers", np.asarray(m, np.int32))
            layer.consts["cvt_shift"] = (f"{rq.name}.shifts", np.asarray(s, np.int32))
        else:
            f.update(cvt_m=int(m), cvt_s=int(s))
        if rq not in layer.nodes:
            layer.nodes.append(rq)

    def _elementwise(self, layer: _Layer, add: Node, main: Value) -> None:
        """`add` (QAddMul) as the SDP's element-wise stage: main path + operand from memory."""
        a = resolve_attrs(add)
        if a["dtype"] != "int8":
            raise CompileError(f"{_where(add)}: the SDP writes int8, not {a['dtype']}")
        first = add.inputs[0] is main
        layer.ew = (add.inputs[1] if first else add.inputs[0]).name
        layer.fields["flags"] |= HAS_EW | (HALF_EVEN if a["rounding"] == "half_even" else 0)
        layer.fields.update(ew_mul_a=int(a["mul_a"] if first else a["mul_b"]),
                            ew_mul_b=int(a["mul_b"] if first else a["mul_a"]),
                            ew_shift=int(a["shift"]), ew_lo=int(a["lo"]), ew_hi=int(a["hi"]))
        if add not in layer.nodes:
            layer.nodes.append(add)

    # ---- SDP and PDP alone --------------------------------------------------------------------
    def _map_fields(self, n: Node, v: Value) -> dict:
        if v.type.dtype != "int8" or v.type.rank not in (2, 4):
            raise CompileError(f"{_where(n)}: the SDP and PDP read int8 NCHW maps (or "
                               f"matrices), got {v.type}")
        s = tuple(v.type.shape) + (1, 1) * (v.type.rank == 2)
        return dict(src_n=s[0], src_c=s[1], src_h=s[2], src_w=s[3], dst_c=s[1], dst_h=s[2],
                    dst_w=s[3])

    def _sdp(self, n: Node) -> None:
        x = n.inputs[0]
        f = _blank()
        f.update(op=SDP, **self._map_fields(n, x))
        layer = _Layer(f, src=x.name, nodes=[n])
        if n.op == "QAddMul":
            if tuple(n.inputs[0].type.shape) != tuple(n.inputs[1].type.shape):
                raise CompileError(f"{_where(n)}: the element-wise operands must have one "
                                   f"shape (no broadcasting on the SDP)")
            self._elementwise(layer, n, x)
        elif n.op == "Relu":
            f.update(flags=HAS_CVT, cvt_m=1, cvt_s=0, cvt_lo=0, cvt_hi=127)
        else:
            self._converter(layer, n, f["dst_c"])
        self._add_layer(layer, n.outputs[0].name)

    def _pdp(self, n: Node) -> None:
        x = n.inputs[0]
        f = _blank()
        f.update(op=PDP, flags=SUM_POOL if n.op == "SumPool" else MAX_POOL,
                 **self._map_fields(n, x))
        if n.op == "GlobalMaxPool":
            kh, kw, sh, sw, pads = f["src_h"], f["src_w"], 1, 1, (0, 0, 0, 0)
        elif n.op == "SumPool":
            a = resolve_attrs(n)
            (kh, kw), (sh, sw) = a["kernel_shape"], a.get("strides") or [1, 1]
            pads = tuple(a.get("pads") or (0, 0, 0, 0))
        else:
            a = resolve_attrs(n)
            if a.get("auto_pad", "NOTSET") != "NOTSET" or \
                    any(d != 1 for d in (a.get("dilations") or [1, 1])):
                raise CompileError(f"{_where(n)}: the PDP pools without auto_pad or dilation")
            (kh, kw), (sh, sw) = a["kernel_shape"], a.get("strides") or [1, 1]
            pads = tuple(a.get("pads") or (0, 0, 0, 0))
        y = n.outputs[0].type.shape
        # ceil_mode's extra output row / column is a window over the end padding, which max
        # pooling ignores: the same as floor mode with that padding made explicit
        if n.op != "SumPool":
            pads = (pads[0], pads[1], max(pads[2], (y[2] - 1) * sh + kh - f["src_h"] - pads[0]),
                    max(pads[3], (y[3] - 1) * sw + kw - f["src_w"] - pads[1]))
        f.update(kernel_h=kh, kernel_w=kw, stride_h=sh, stride_w=sw, pad_t=pads[0],
                 pad_l=pads[1], pad_b=pads[2], pad_r=pads[3], dst_c=y[1], dst_h=y[2],
                 dst_w=y[3])
        layer = _Layer(f, src=x.name, nodes=[n])
        out = n.outputs[0]
        if n.op == "SumPool":       # the window sums leave the PDP through the converter
            rq = self._sole_user(out)
            if rq is None or rq.op not in REQUANT_OPS:
                raise CompileError(f"{_where(n)}: its int32 sums must go to one RequantizeMul")
            self._converter(layer, rq, y[1])
            self.done.add(id(rq))
            out = rq.outputs[0]
        self._add_layer(layer, out.name)

    def _cdp(self, n: Node) -> None:
        """QLrn: the CDP sums squares over the channel window, looks the sum up in its table
        (interpolating) and multiplies; the converter fields carry multiplier, shift, clip."""
        x = n.inputs[0]
        a = resolve_attrs(n)
        if x.type.rank != 4:
            raise CompileError(f"{_where(n)}: the CDP normalises NCHW maps")
        f = _blank()
        f.update(op=CDP, flags=HAS_CVT | (HALF_EVEN if a["rounding"] == "half_even" else 0),
                 kernel_h=int(a["size"]), kernel_w=1, lut_shift=int(a["lut_shift"]),
                 cvt_m=int(a["multiplier"]), cvt_s=int(a["shift"]), cvt_lo=int(a["lo"]),
                 cvt_hi=int(a["hi"]), **self._map_fields(n, x))
        layer = _Layer(f, src=x.name, nodes=[n])
        lut = n.inputs[1]
        if not lut.is_const:
            raise CompileError(f"{_where(n)}: the lookup table must be a constant")
        layer.consts["lut"] = (lut.name, np.asarray(lut.const, np.int32))
        self._add_layer(layer, n.outputs[0].name)

    def _concat(self, n: Node) -> None:
        out = n.outputs[0]
        if out.type.rank != 4 or resolve_attrs(n)["axis"] not in (1, -3) or \
                out.type.dtype != "int8":
            raise CompileError(f"{_where(n)}: only int8 NCHW maps joined along channels")
        ch = 0
        for v in n.inputs:
            if v.name in self.writers and v.name not in self.slice_of and \
                    self._sole_user(v) is n and all(_as_map(self.layers[i].fields, v.type.shape)
                                                    for i in self.writers[v.name]):
                # its producer writes this slice of the concatenated map in place
                self.slice_of[v.name] = (out.name, ch)
                self.writers.setdefault(out.name, []).extend(self.writers[v.name])
            else:
                f = _blank()
                f.update(op=SDP, flags=HAS_CVT, cvt_m=1, cvt_s=0, cvt_lo=-128, cvt_hi=127,
                         **self._map_fields(n, v))
                self._add_layer(_Layer(f, src=v.name, nodes=[n]), out.name, ch)
            ch += v.type.shape[1]

    # ---- memory and the descriptors ---------------------------------------------------------
    def _emit(self) -> Loadable:
        mem = _MemoryPlan()
        for v in self.g.inputs:
            self._address(mem, v.name)
        records, dependencies = [], []
        for layer in self.layers:
            f = dict(layer.fields)
            f["name"] = self._string("+".join(n.name for n in layer.nodes))
            f["value"] = self._string(layer.dst)
            dst, ch0 = self.slice_of.get(layer.dst, (layer.dst, f["dst_ch0"]))
            shape = self.values[dst].type.shape
            f.update(dst_ch0=ch0, dst_ctotal=shape[1] if _as_map(f, shape) else f["dst_c"])
            f["src"] = self._address(mem, layer.src)
            f["dst"] = self._address(mem, dst)
            if layer.ew is not None:
                f["ew"] = self._address(mem, layer.ew)
            for key, (name, array) in layer.consts.items():
                f[key] = mem.constant(name, array)
            deps = sorted({w for v in (layer.src, layer.ew) if v is not None
                           for w in self.writers.get(self._stored(v), [])})
            f["dep_start"], f["dep_count"] = len(dependencies), len(deps)
            dependencies.extend(deps)
            records.append(tuple(int(f[k]) for k in LAYER_DTYPE.names))
        for v in self.g.outputs:
            self._address(mem, v.name)
        return Loadable(self.cfg.name, self.cfg.hardware(), mem.memories(), mem.addresses,
                        np.array(records, LAYER_DTYPE), self.strings,
                        [(v.name, mem.ids[v.name]) for v in self.g.inputs],
                        [(v.name, mem.ids[v.name]) for v in self.g.outputs],
                        np.array(dependencies, np.int32), mem.blob())

    def _stored(self, name: str) -> str:
        """The value whose bytes `name` reads: through views, and a placed slice's concat."""
        root = self._root(name)
        return self.slice_of.get(root, (root, 0))[0]

    def _address(self, mem: "_MemoryPlan", name: str) -> int:
        if name in mem.ids:
            return mem.ids[name]
        v = self.values[name]
        root = self._root(name)
        if root != name:                   # a view: a second name for the root's bytes
            base = mem.addresses[self._address(mem, root)]
            return mem.add(name, base.memory, base.offset, v.type.dtype, v.type.shape)
        if name in self.slice_of:
            raise CompileError(f"value {name!r} lives inside a concatenated map and has no "
                               f"address of its own")
        io = name in self.inputs or any(self._root(o) == name for o in self.outputs)
        return mem.allocate(name, IO if io else SCRATCH, v.type.dtype, v.type.shape)

    def _string(self, s: str) -> int:
        if s not in self.string_ids:
            self.string_ids[s] = len(self.strings)
            self.strings.append(s)
        return self.string_ids[s]


def _as_map(f: dict, shape) -> bool:
    """Whether a layer with descriptor fields `f` writes a value of `shape` as the NCHW map
    the shape says (its batch, height and width; its channels may be a slice of the map's).
    A dense layer writes rows x features x 1 x 1, which a rank-4 value with its features
    last (tokens on a grid, as Swin's patch merging has) is not: it is written whole."""
    return len(shape) == 4 and (shape[0], shape[2], shape[3]) == (f["src_n"], f["dst_h"],
                                                                  f["dst_w"])


class _MemoryPlan:
    """The three memories (weights, io, scratch) filled front to back, ALIGN-aligned, and the
    address list naming tensors in them. Nothing is reused: a loadable is small next to the
    device memory, and its layout stays easy to read in `retarget disasm`."""

    def __init__(self):
        self.used = {WEIGHTS: 0, IO: 0, SCRATCH: 0}
        self.addresses: list[Address] = []
        self.ids: dict[str, int] = {}
        self.weight_bytes = bytearray()

    def add(self, name, memory, offset, dtype, shape) -> int:
        if len(shape) > 4:
            raise CompileError(f"value {name!r} of shape {list(shape)}: a loadable's addresses "
                               f"have at most 4 dimensions")
        self.addresses.append(Address(len(self.addresses), name, memory, offset, str(dtype),
                                      tuple(int(d) for d in shape)))
        self.ids[name] = len(self.addresses) - 1
        return self.ids[name]

    def allocate(self, name, memory, dtype, shape) -> int:
        off = self.used[memory]
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        self.used[memory] = off + -(-max(nbytes, 1) // ALIGN) * ALIGN
        return self.add(name, memory, off, dtype, shape)

    def constant(self, name: str, array: np.ndarray) -> int:
        if name in self.ids:
            return self.ids[name]
        i = self.allocate(name, WEIGHTS, array.dtype, array.shape)
        off = self.addresses[i].offset
        self.weight_bytes.extend(b"\0" * (off - len(self.weight_bytes)))
        self.weight_bytes.extend(np.ascontiguousarray(array, array.dtype.newbyteorder("<"))
                                 .tobytes())
        return i

    def memories(self) -> list[Memory]:
        out, at = [], 0
        for k, kind in ((WEIGHTS, "weights"), (IO, "io"), (SCRATCH, "scratch")):
            out.append(Memory(k, kind, kind, self.used[k], at))
            at += -(-self.used[k] // 64) * 64
        return out

    def blob(self) -> bytes:
        return bytes(self.weight_bytes) + b"\0" * (self.used[WEIGHTS] - len(self.weight_bytes))


def _blank() -> dict:
    f = {k: 0 for k in LAYER_DTYPE.names}
    for k in ADDRESS_FIELDS:
        f[k] = NONE
    return f


def _dense_weight(n: Node) -> np.ndarray:
    """A Gemm / MatMul weight as the (out, in, 1, 1) kernel of a 1x1 convolution."""
    w = np.asarray(n.inputs[1].const)
    if w.ndim != 2:
        raise CompileError(f"{_where(n)}: the weight must be a 2-D matrix")
    if n.op == "Gemm":
        a = resolve_attrs(n)
        if a["transA"] or a["alpha"] != 1.0 or a["beta"] != 1.0:
            raise CompileError(f"{_where(n)}: transA / alpha / beta must be 0 / 1 / 1")
        w = w if a["transB"] else w.T
    else:
        w = w.T
    return w.reshape(w.shape[0], w.shape[1], 1, 1)


def compile_graph(graph: Graph, cfg: NvdlaConfig) -> Loadable:
    """The loadable of one region's graph for `cfg`."""
    return _Compiler(graph, cfg).run()


def compile_document(doc: dict, arrays, cfg: NvdlaConfig | None = None) -> Loadable:
    """The loadable of the one region in an export document; the hardware is `cfg`, else the
    document's "config", else nv_full."""
    if cfg is None:
        cfg = config_of_document(doc)
    graphs = read_document(doc, arrays)
    if len(graphs) != 1:
        raise CompileError(f"the document holds {len(graphs)} regions; nvdla compiles one "
                           f"region per loadable")
    return compile_graph(graphs[0], cfg)


def config_of_document(doc: dict) -> NvdlaConfig:
    c = doc.get("config")
    if c is None:
        return load_config(None)
    unknown = set(c) - set(HARDWARE_FIELDS) - {"name"}
    if unknown:
        raise CompileError(f"the document's config has unknown fields {sorted(unknown)}")
    return NvdlaConfig(**c)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="retarget-nvdla-compile",
        description="Compile one region of a retarget export document (region.json and its "
                    ".npz) into an nvdla loadable (docs/nvdla.md).")
    p.add_argument("json", help="the export document (format retarget.regions, version 1)")
    p.add_argument("-o", "--output", required=True, help="where to write the loadable")
    p.add_argument("--config", default=None,
                   help="nv_small, nv_full or a config .json (default: the document's config)")
    args = p.parse_args(argv)
    try:
        path = Path(args.json)
        doc = json.loads(path.read_text(encoding="utf-8"))
        with np.load(path.parent / doc.get("weights", path.with_suffix(".npz").name),
                     allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        cfg = load_config(args.config) if args.config else None
        data = compile_document(doc, arrays, cfg).to_bytes()
    except (OSError, ValueError, KeyError, RetargetError) as e:
        print(f"retarget-nvdla-compile: {args.json}: {e}", file=sys.stderr)
        return 2
    Path(args.output).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
