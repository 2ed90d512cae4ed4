"""Lowering integer layers onto the dnnvm overlay: tiles, loads, CONV / POOL / ELEW, saves.

Feature maps live in DDR as NHWC int8 (`FeatureMap`: a buffer, or a channel slice of one with a
wider pixel stride, which is how a concatenation is folded into its producers' SAVEs and a
channel slice into the next LOAD: neither is ever a run-time copy). Weights are pre-arranged
at compile time as [OC, KH, KW, IC] ("OWHC" in the paper), biases as int32.

A convolution is tiled by `ConvTile` (output rows x cols x channels, an input-channel chunk,
and a loop order). The default is the paper's eq. 5 (T_h = h_p, T_oc = oc_p, T_ic = ic_p) with
the widest T_w that fits eq. 6; `choose_conv_tile` keeps it unless the cycle model says a larger
tile (more output channels reusing a loaded input, all input channels at once, weights kept
resident) is faster. Each buffer is split in two slots (double buffering): the LOAD engine
fills one slot while CONV reads the other, and the dependency fields come from `Hazards`, so
every engine overlaps exactly as far as the data allows.

A layer is lowered by one function call that takes its inputs and the list of places its
output goes; a fused group (issue: fusion search) lowers the same way with on-chip hand-offs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import TargetError
from ..accel.layers import Conv2d, Pool2d, RequantizeLayer, ResidualAdd
from ..accel.tile_search import ChoiceCache, judge, rank
from .config import DNNVMConfig
from .isa import (CONV_E, LOAD_E, MISC_E, POOL_E, SAVE_E, Buf, Conv, Elew, Load, Pool, Save)
from .program import Hazards, Program, ProgramBuilder

ISA_MAX_DIM = 4095      # 12-bit row / column / channel fields
MAX_PAD = 15            # 4-bit LOAD padding fields


@dataclass(frozen=True, slots=True)
class FeatureMap:
    """An int8 NHWC tensor in DDR: image n, row y, column x, channel c is at byte
    addr + n*image + y*row + x*pixel + c. `buffer` names the DRAM buffer it lives in (a
    channel slice of a concatenation shares its buffer)."""
    buffer: str
    addr: int
    n: int
    h: int
    w: int
    c: int
    pixel: int

    @property
    def row(self) -> int:
        return self.w * self.pixel

    @property
    def image(self) -> int:
        return self.h * self.row

    def channels(self, first: int, count: int) -> "FeatureMap":
        """Channels [first, first + count) of this map: same pixels, a narrower vector."""
        return FeatureMap(self.buffer, self.addr + first, self.n, self.h, self.w, count,
                          self.pixel)


@dataclass(frozen=True, slots=True)
class ConvTile:
    """Output rows x cols x channels per CONV, input channels per CONV (a chunk < IC makes
    CONVs accumulate), and the loop order: "spatial" (each output tile runs all its channel
    tiles; a one-chunk input tile is loaded once) or "oc" (each output-channel tile runs over
    the whole map; one-chunk weights are loaded once)."""
    th: int
    tw: int
    toc: int
    tic: int
    order: str = "spatial"


class _Ring:
    """Two slots of one on-chip buffer and what each holds (a key), for double buffering and
    for reusing data already loaded."""

    def __init__(self, name: str, slot_bytes: int):
        self.name, self.slot_bytes = name, slot_bytes
        self.keys: list[object] = [None, None]
        self.next = 0

    def place(self, key) -> tuple[int, bool]:
        """(slot, already there)."""
        for s in (0, 1):
            if key is not None and self.keys[s] == key:
                return s, True
        s = self.next
        self.next ^= 1
        self.keys[s] = key
        return s, False

    def addr(self, slot: int) -> int:
        return slot * self.slot_bytes


def _in_extent(out0: int, count: int, stride: int, k: int, pad: int, size: int):
    """(first valid input index, valid count, zeros before, zeros after) that `count` outputs
    from `out0` read along one axis."""
    lo = out0 * stride - pad
    hi = (out0 + count - 1) * stride - pad + k
    v_lo, v_hi = max(lo, 0), min(hi, size)
    return v_lo, max(v_hi - v_lo, 0), v_lo - lo, hi - max(v_hi, v_lo)


def conv_fit(layer: Conv2d, t: ConvTile, cfg: DNNVMConfig) -> str | None:
    """Which buffer a tile overflows (eq. 6 with both halves of each buffer), or an ISA field
    it exceeds; None when it fits."""
    kh, kw = layer.kernel
    sh, sw = layer.stride
    dw = layer.groups > 1
    in_rows, in_cols = (t.th - 1) * sh + kh, (t.tw - 1) * sw + kw
    tic = t.toc if dw else t.tic
    if in_rows * in_cols * tic > cfg.inp_slot:
        return (f"input buffer: a {in_rows}x{in_cols}x{tic} input tile needs "
                f"{in_rows * in_cols * tic} B, a slot holds {cfg.inp_slot} B")
    wbytes = t.toc * kh * kw * (1 if dw else t.tic)
    if wbytes > cfg.wgt_slot:
        return (f"weight buffer: {t.toc}x{kh}x{kw}x{1 if dw else t.tic} weights need {wbytes} "
                f"B, a slot holds {cfg.wgt_slot} B")
    if t.th * t.tw * t.toc > cfg.acc_slot_entries:
        return (f"output buffer: a {t.th}x{t.tw}x{t.toc} tile needs {t.th * t.tw * t.toc} int32 "
                f"accumulators, a slot holds {cfg.acc_slot_entries}")
    if t.toc > cfg.bias_slot_entries:
        return f"bias buffer: {t.toc} biases, a slot holds {cfg.bias_slot_entries}"
    if max(in_rows, in_cols, t.th, t.tw, t.toc, tic) > ISA_MAX_DIM:
        return f"a tile dimension exceeds the ISA's {ISA_MAX_DIM}"
    return None


def _widest(layer: Conv2d, cfg: DNNVMConfig, th: int, toc: int, tic: int, order: str):
    """The tile of the widest T_w (eq. 6) for fixed T_h, T_oc, T_ic, or None."""
    ow = layer.out_hw[1]
    lo, hi = 1, ow
    if conv_fit(layer, ConvTile(th, 1, toc, tic, order), cfg):
        return None
    while lo < hi:                      # the fit is monotone in T_w
        mid = (lo + hi + 1) // 2
        if conv_fit(layer, ConvTile(th, mid, toc, tic, order), cfg):
            hi = mid - 1
        else:
            lo = mid
    return ConvTile(th, lo, toc, tic, order)


def eq5_tile(layer: Conv2d, cfg: DNNVMConfig) -> ConvTile:
    """The paper's tile: T_h = h_p, T_oc = oc_p, T_ic = ic_p (each capped by the layer), the
    widest T_w that fits. When even T_w = 1 does not fit, smaller rows / channels are tried;
    a layer no tile fits is refused naming the buffer."""
    oh, _ = layer.out_hw
    oc, ic = layer.out_channels, layer.in_shape[1]
    th, toc, tic = min(cfg.h_p, oh), min(cfg.oc_p, oc), min(cfg.ic_p, ic)
    while True:
        t = _widest(layer, cfg, th, toc, tic, "spatial")
        if t is not None:
            return t
        if th == toc == tic == 1:
            break
        th, toc, tic = max(1, th // 2), max(1, toc // 2), max(1, tic // 2)
    why = conv_fit(layer, ConvTile(1, 1, 1, 1), cfg)
    raise TargetError(f"{layer.op} '{layer.name}' ({layer.in_shape} -> {layer.out_channels} "
                      f"channels, kernel {layer.kernel}): no tile fits config "
                      f"{cfg.name!r}; even a 1x1x1 tile overflows the {why}")


def conv_candidates(layer: Conv2d, cfg: DNNVMConfig) -> list[ConvTile]:
    """Tiles worth timing: eq. 5's, and larger ones in rows, output channels (multiples of
    oc_p, up to all), input channels (ic_p multiples, up to all) and both loop orders."""
    oh, _ = layer.out_hw
    oc, ic = layer.out_channels, layer.in_shape[1]
    dw = layer.groups > 1

    def ladder(step: int, total: int) -> list[int]:
        out, v = [], min(step, total)
        while v < total:
            out.append(v)
            v *= 2
        return out + [total]

    tics = [oc] if dw else ladder(cfg.ic_p, ic)
    out = []
    for th in ladder(cfg.h_p, oh):
        for toc in ladder(cfg.oc_p, oc):
            for tic in ([toc] if dw else tics):
                for order in ("spatial", "oc"):
                    t = _widest(layer, cfg, th, toc, tic, order)
                    if t is not None:
                        out.append(t)
    return out


def conv_estimate(layer: Conv2d, t: ConvTile, cfg: DNNVMConfig) -> float:
    """Closed-form cycles of a tile choice for ranking: the larger of the CONV engine's busy
    time and the DDR time, plus one tile's load that nothing hides."""
    n = layer.in_shape[0]
    oh, ow = layer.out_hw
    kh, kw = layer.kernel
    sh, sw = layer.stride
    oc, ic = layer.out_channels, layer.in_shape[1]
    dw = layer.groups > 1
    nh, nw, noc = -(-oh // t.th), -(-ow // t.tw), -(-oc // t.toc)
    nic = 1 if dw else -(-ic // t.tic)
    tiles = n * nh * nw * noc * nic
    steps = (-(-t.th // cfg.h_p) * t.tw * kh * kw * (1 if dw else -(-t.tic // cfg.ic_p))
             * -(-t.toc // cfg.oc_p))
    conv = tiles * (steps * cfg.step_cycles + cfg.conv_pipeline + cfg.insn_overhead)
    in_tile = ((t.th - 1) * sh + kh) * ((t.tw - 1) * sw + kw) * (t.toc if dw else t.tic)
    w_all = oc * kh * kw * (1 if dw else ic)
    if dw:
        in_loads = tiles
        w_loads = w_all * (1 if t.order == "oc" else n * nh * nw)
    elif t.order == "spatial":
        in_loads = n * nh * nw * (1 if nic == 1 else noc * nic)
        w_loads = w_all * n * nh * nw
    else:
        in_loads = tiles
        w_loads = w_all * (1 if nic == 1 else n * nh * nw)
    ddr = in_loads * in_tile + w_loads + n * oh * ow * oc
    dma = ddr / cfg.ddr_bytes_per_cycle + (in_loads + tiles) * cfg.insn_overhead
    return max(conv, dma) + in_tile / cfg.ddr_bytes_per_cycle


_CHOICES: ChoiceCache[ConvTile] = ChoiceCache()


def choose_conv_tile(layer: Conv2d, cfg: DNNVMConfig) -> ConvTile:
    """Eq. 5's tile, or (with cfg.tile_search) a candidate the full cycle model times faster;
    the analytic estimate picks which one to time. Cached by layer geometry and config."""
    base = eq5_tile(layer, cfg)
    if not cfg.tile_search:
        return base
    key = (layer.in_shape, layer.out_channels, layer.kernel, layer.stride, layer.pads,
           layer.groups, cfg)
    hit = _CHOICES.get(key)
    if hit is not None:
        return hit
    ranked = rank(conv_candidates(layer, cfg), lambda t: conv_estimate(layer, t, cfg), keep=1)
    ranked = [(0.0, base)] + [r for r in ranked if r[1] != base]
    best = judge(ranked, time=lambda t: time_conv(layer, t, cfg))
    return _CHOICES.put(key, best[1])


def time_conv(layer: Conv2d, t: ConvTile, cfg: DNNVMConfig) -> int:
    """Model cycles of `layer` lowered alone with tile `t` (no weights packed)."""
    from .timing import simulate_timing
    ctx = Lowering(cfg, check=False)
    x = ctx.input("x", layer.in_shape)
    y = ctx.feature_map("y", layer.out_shape)
    ctx.conv(layer, x, [y], None, None, tile=t)
    return simulate_timing(ctx.finish()).total_cycles


class Lowering:
    """Builds one dnnvm Program: DDR feature maps and constants, then layers in order."""

    def __init__(self, cfg: DNNVMConfig, check: bool = True):
        self.cfg = cfg
        self.b = ProgramBuilder(cfg, check)
        self.hz = Hazards(self.b)
        self.constants: dict[str, np.ndarray] = {}
        self.rings = {Buf.IN: _Ring("IN", cfg.inp_slot), Buf.WGT: _Ring("WGT", cfg.wgt_slot),
                      Buf.BIAS: _Ring("BIAS", cfg.bias_buf_bytes // 2),
                      Buf.OUT: _Ring("OUT", cfg.out_buf_bytes // 2)}
        self._uid = 0

    # ---- DDR ------------------------------------------------------------------------------
    def feature_map(self, name: str, shape: tuple[int, ...]) -> FeatureMap:
        """A fresh NHWC buffer for a logical NCHW (or (N, K): one pixel of K channels) tensor."""
        n, c, h, w = shape if len(shape) == 4 else (shape[0], shape[1], 1, 1)
        buf = self.b.alloc(name, (n, h, w, c), "int8")
        return FeatureMap(name, buf.offset, n, h, w, c, c)

    def input(self, name: str, shape: tuple[int, ...]) -> FeatureMap:
        return self.feature_map(name, shape)

    def const(self, name: str, array: np.ndarray | None, shape, dtype: str) -> int:
        """A constant buffer's DDR address (`array` None: allocated only, for timing)."""
        buf = self.b.alloc(name, shape, dtype)
        if array is not None:
            self.constants[name] = np.ascontiguousarray(array, dtype=dtype).reshape(shape)
        return buf.offset

    # ---- shared steps ----------------------------------------------------------------------
    def _load(self, buf: Buf, key, ddr_key, **fields) -> tuple[int, int]:
        """Load into a slot of `buf` unless `key` is already there: (slot address, slot)."""
        ring = self.rings[buf]
        slot, hit = ring.place(key)
        if not hit:
            self.hz.write((buf, slot), LOAD_E)
            if ddr_key is not None:
                self.hz.read(("ddr", ddr_key), LOAD_E)
            i = self.b.emit(Load(buf=int(buf), sram_addr=ring.addr(slot), **fields))
            self.hz.did_write((buf, slot), i)
        return ring.addr(slot), slot

    def _load_tile(self, x: FeatureMap, key, n: int, y0: int, rows: int, x0: int, cols: int,
                   c0: int, cc: int, pads=(0, 0, 0, 0), pad_value: int = 0) -> tuple[int, int]:
        pt, pb, pl, pr = pads
        if max(pads) > MAX_PAD:
            raise TargetError(f"padding {pads} exceeds the LOAD's {MAX_PAD}")
        return self._load(Buf.IN, key, x.buffer,
                          ddr_addr=x.addr + n * x.image + y0 * x.row + x0 * x.pixel + c0,
                          rows=rows, cols=cols, vec_bytes=cc, ddr_row_stride=x.row,
                          ddr_col_stride=x.pixel, pad_top=pt, pad_bottom=pb, pad_left=pl,
                          pad_right=pr, pad_value=pad_value)

    def _compute(self, insn, engine: int, reads: list, out_slot: int, first: bool = True,
                 last: bool = True) -> int:
        if first:
            self.hz.write((Buf.OUT, out_slot), engine)
        for r in reads:
            self.hz.read(r, engine)
        i = self.b.emit(insn)
        for r in reads:
            self.hz.did_read(r, i)
        if last:
            self.hz.did_write((Buf.OUT, out_slot), i)
        return i

    def _save(self, out_slot: int, outs: list[FeatureMap], n: int, y0: int, rows: int,
              x0: int, cols: int, c0: int, cc: int) -> None:
        addr = self.rings[Buf.OUT].addr(out_slot)
        for y in outs:
            self.hz.read((Buf.OUT, out_slot), SAVE_E)
            i = self.b.emit(Save(sram_addr=addr, ddr_addr=y.addr + n * y.image + y0 * y.row
                                 + x0 * y.pixel + c0, rows=rows, cols=cols, vec_bytes=cc,
                                 ddr_row_stride=y.row, ddr_col_stride=y.pixel))
            self.hz.did_read((Buf.OUT, out_slot), i)
            self.hz.did_write(("ddr", y.buffer), i)

    def _out_slot(self) -> int:
        return self.rings[Buf.OUT].place(None)[0]

    def _layer_uid(self) -> int:
        self._uid += 1
        return self._uid

    # ---- convolution -------------------------------------------------------------------------
    def conv(self, layer: Conv2d, x: FeatureMap, outs: list[FeatureMap], weight, bias,
             tile: ConvTile | None = None) -> ConvTile:
        """Conv + its Requantize. weight: OIHW int8 (None for timing), bias: int32 [O] or None."""
        cfg = self.cfg
        t = tile or choose_conv_tile(layer, cfg)
        why = conv_fit(layer, t, cfg)
        if why:
            raise TargetError(f"{layer.op} '{layer.name}': tile {t} does not fit: {why}")
        uid = self._layer_uid()
        n_img, ic, _, _ = layer.in_shape
        oc = layer.out_channels
        kh, kw = layer.kernel
        sh, sw = layer.stride
        pt, pl, pb, pr = layer.pads
        oh, ow = layer.out_hw
        dw = layer.groups > 1
        r = layer.requant
        wic = 1 if dw else ic
        w_hwc = None if weight is None else np.transpose(np.asarray(weight, np.int8), (0, 2, 3, 1))
        w_addr = self.const(f"{layer.name}/w", w_hwc, (oc, kh, kw, wic), "int8")
        b = np.zeros(oc, np.int32) if bias is None else np.asarray(bias, np.int32)
        b_addr = self.const(f"{layer.name}/b", None if weight is None else b, (oc,), "int32")
        self.b.begin_layer(layer.name)
        spatial = [(n, y0, x0) for n in range(n_img) for y0 in range(0, oh, t.th)
                   for x0 in range(0, ow, t.tw)]
        chans = list(range(0, oc, t.toc))
        order = ([(s, o) for s in spatial for o in chans] if t.order == "spatial"
                 else [(s, o) for o in chans for s in spatial])
        for (n, y0, x0), o0 in order:
            th, tw, toc = min(t.th, oh - y0), min(t.tw, ow - x0), min(t.toc, oc - o0)
            ry, nry, zt, zb = _in_extent(y0, th, sh, kh, pt, layer.in_shape[2])
            rx, nrx, zl, zr = _in_extent(x0, tw, sw, kw, pl, layer.in_shape[3])
            chunks = [(o0, toc)] if dw else [(c, min(t.tic, ic - c)) for c in range(0, ic, t.tic)]
            out_slot = self._out_slot()
            for k, (c0, cc) in enumerate(chunks):
                first, last = k == 0, k == len(chunks) - 1
                in_addr, in_slot = self._load_tile(
                    x, (uid, n, y0, x0, c0, cc), n, ry, nry, rx, nrx, c0, cc, (zt, zb, zl, zr))
                w_addr_s, w_slot = self._load(
                    Buf.WGT, (uid, o0, c0), None, ddr_addr=w_addr + o0 * kh * kw * wic
                    + (0 if dw else c0), rows=toc, cols=kh * kw, vec_bytes=1 if dw else cc,
                    ddr_row_stride=kh * kw * wic, ddr_col_stride=wic)
                reads = [(Buf.IN, in_slot), (Buf.WGT, w_slot)]
                b_addr_s = 0
                if first:
                    b_addr_s, b_slot = self._load(
                        Buf.BIAS, (uid, o0), None, ddr_addr=b_addr + 4 * o0, rows=1, cols=toc,
                        vec_bytes=4, ddr_row_stride=0, ddr_col_stride=4)
                    reads.append((Buf.BIAS, b_slot))
                insn = Conv(in_addr=in_addr, wgt_addr=w_addr_s, bias_addr=b_addr_s,
                            out_addr=self.rings[Buf.OUT].addr(out_slot), kh=kh, kw=kw, sh=sh,
                            sw=sw, in_h=zt + nry + zb, in_w=zl + nrx + zr, ic=cc, out_h=th,
                            out_w=tw, oc=toc, shift=r.shift, lo=r.lo, hi=r.hi, first=int(first),
                            last=int(last), depthwise=int(dw))
                self._compute(insn, CONV_E, reads, out_slot, first, last)
            self._save(out_slot, outs, n, y0, th, x0, tw, o0, toc)
        self.b.end_layer()
        return t

    # ---- pooling and requantisation on the POOL engine ---------------------------------------
    def pool(self, layer: Pool2d, x: FeatureMap, outs: list[FeatureMap]) -> None:
        kind = 0 if layer.kind == "max" else 1
        self._pool(layer.name, x, outs, layer.kernel, layer.stride, layer.pads, kind,
                   layer.shift if kind else 0, layer.lo, layer.hi, -128 if kind == 0 else 0)

    def requantize(self, layer: RequantizeLayer, x: FeatureMap, outs: list[FeatureMap]) -> None:
        """Requantize / Relu alone: a 1x1 average pool is exactly round-shift-and-clip."""
        r = layer.requant
        self._pool(layer.name, x, outs, (1, 1), (1, 1), (0, 0, 0, 0), 1, r.shift, r.lo, r.hi, 0)

    def _pool(self, name, x: FeatureMap, outs, kernel, stride, pads, kind, shift, lo, hi,
              pad_value) -> None:
        cfg = self.cfg
        kh, kw = kernel
        sh, sw = stride
        pt, pl, pb, pr = pads
        oh, ow = (x.h + pt + pb - kh) // sh + 1, (x.w + pl + pr - kw) // sw + 1
        th, tw, tc = oh, ow, x.c
        out_cap = cfg.out_buf_bytes // 2

        def fits(th, tw, tc):
            return (((th - 1) * sh + kh) * ((tw - 1) * sw + kw) * tc <= cfg.inp_slot
                    and th * tw * tc <= out_cap
                    and max((th - 1) * sh + kh, (tw - 1) * sw + kw, tc) <= ISA_MAX_DIM)

        while not fits(th, tw, tc):
            if th == tw == tc == 1:
                raise TargetError(f"pool '{name}': a 1x1x1 tile with window {kh}x{kw} does not "
                                  f"fit config {cfg.name!r}'s input buffer slot "
                                  f"({cfg.inp_slot} B)")
            if th >= tw and th > 1:
                th = -(-th // 2)
            elif tw > 1:
                tw = -(-tw // 2)
            else:
                tc = -(-tc // 2)
        uid = self._layer_uid()
        self.b.begin_layer(name)
        for n in range(x.n):
            for y0 in range(0, oh, th):
                for x0 in range(0, ow, tw):
                    for c0 in range(0, x.c, tc):
                        h, w, cc = min(th, oh - y0), min(tw, ow - x0), min(tc, x.c - c0)
                        ry, nry, zt, zb = _in_extent(y0, h, sh, kh, pt, x.h)
                        rx, nrx, zl, zr = _in_extent(x0, w, sw, kw, pl, x.w)
                        in_addr, in_slot = self._load_tile(
                            x, (uid, n, y0, x0, c0), n, ry, nry, rx, nrx, c0, cc,
                            (zt, zb, zl, zr), pad_value)
                        out_slot = self._out_slot()
                        insn = Pool(in_addr=in_addr, out_addr=self.rings[Buf.OUT].addr(out_slot),
                                    kind=kind, kh=kh, kw=kw, sh=sh, sw=sw, in_h=zt + nry + zb,
                                    in_w=zl + nrx + zr, channels=cc, out_h=h, out_w=w,
                                    shift=shift, lo=lo, hi=hi)
                        self._compute(insn, POOL_E, [(Buf.IN, in_slot)], out_slot)
                        self._save(out_slot, outs, n, y0, h, x0, w, c0, cc)
        self.b.end_layer()

    # ---- element-wise add on the MISC engine -----------------------------------------------
    def add(self, layer: ResidualAdd, a: FeatureMap, b: FeatureMap,
            outs: list[FeatureMap]) -> None:
        cfg = self.cfg
        half = cfg.inp_slot // 2
        out_cap = cfg.out_buf_bytes // 2
        th, tw, tc = a.h, a.w, a.c
        while th * tw * tc > min(half, out_cap) or max(th, tw, tc) > ISA_MAX_DIM:
            if th == tw == tc == 1:
                raise TargetError(f"add '{layer.name}': no tile fits config {cfg.name!r}: one "
                                  f"element of each input needs 2 B of an input-buffer slot "
                                  f"({cfg.inp_slot} B) and 1 B of an output slot "
                                  f"({out_cap} B)")
            if th > 1:
                th = -(-th // 2)
            elif tw > 1:
                tw = -(-tw // 2)
            else:
                tc = -(-tc // 2)
        uid = self._layer_uid()
        ring = self.rings[Buf.IN]
        self.b.begin_layer(layer.name)
        for n in range(a.n):
            for y0 in range(0, a.h, th):
                for x0 in range(0, a.w, tw):
                    for c0 in range(0, a.c, tc):
                        h, w, cc = min(th, a.h - y0), min(tw, a.w - x0), min(tc, a.c - c0)
                        slot, _ = ring.place((uid, n, y0, x0, c0))
                        base = ring.addr(slot)
                        self.hz.write((Buf.IN, slot), LOAD_E)
                        for src, off in ((a, 0), (b, half)):
                            self.hz.read(("ddr", src.buffer), LOAD_E)
                            i = self.b.emit(Load(
                                buf=int(Buf.IN), sram_addr=base + off,
                                ddr_addr=src.addr + n * src.image + y0 * src.row
                                + x0 * src.pixel + c0, rows=h, cols=w, vec_bytes=cc,
                                ddr_row_stride=src.row, ddr_col_stride=src.pixel))
                        self.hz.did_write((Buf.IN, slot), i)
                        out_slot = self._out_slot()
                        insn = Elew(a_addr=base, b_addr=base + half,
                                    out_addr=self.rings[Buf.OUT].addr(out_slot), count=h * w * cc,
                                    shift_a=layer.shift_a, shift_b=layer.shift_b,
                                    out_shift=layer.out_shift, lo=layer.lo, hi=layer.hi)
                        self._compute(insn, MISC_E, [(Buf.IN, slot)], out_slot)
                        self._save(out_slot, outs, n, y0, h, x0, w, c0, cc)
        self.b.end_layer()

    def finish(self) -> Program:
        return self.b.finish()


__all__ = ["ConvTile", "FeatureMap", "Lowering", "choose_conv_tile", "conv_candidates",
           "conv_estimate", "conv_fit", "eq5_tile", "time_conv"]
