"""Layers that run on the tensor ALU alone: max / average pooling, the residual add (QAdd),
and Requantize by itself (ReLU, clips, rescales). Their int8 inputs are loaded into the
accumulator with LOAD ACC_8BIT (sign-extended), int32 inputs with LOAD ACC.

- Max pooling: the window's padding comes from the LOAD's pad fields, which write zeros; a zero
  must not win over negative values, so the padded entries are set to -128 (MIN -128 over just
  those entries) before the window maximum. The output is reset, the first tap added (a copy),
  and every other tap folded in with MAX: one ALU instruction per tap, looping over the tile's
  output rows and columns, so no destination is written twice within an instruction.
- Average pooling: the same with ADD (zeros from padding count, i.e. count_include_pad=1), then
  Requantize by log2(window) with half-up rounding: the divisor must be a power of two.
- QAdd: a and b loaded side by side, each shifted left by its alignment (SHR by a negative
  amount), added, requantised by out_shift and clipped.
Tiles alternate between virtual threads' halves of ACC; compute->store RAW tokens and
store->compute WAR tokens order them (the load module is not used). With the config's
`alu_stage`, the ALU instructions wait for the compute module's loads and resets before them
(g2a), and the stores for the ALU (a2s).
"""
from __future__ import annotations

from dataclasses import dataclass

from ....errors import InputError, TargetError
from ..isa import AluOp, MemType
from .alu import Region, emit_requant, range_op, requant_vectors
from .context import LayerReport, LoweringContext
from .conv import MAX_XSIZE, _window
from .layers import Pool2d, Requant, RequantizeLayer, ResidualAdd, reason
from .schedule import ConvGeom, Schedule, alu_geom, check_schedule
from .tensor import PackedTensor
from .walk import Position, positions

PAD_VALUE = -128     # what a max-pool window's padding holds: never more than a real int8


@dataclass(frozen=True, slots=True)
class _Tile:
    """Channel blocks [c0, c0 + tc) at a tile position (walk.Position, in the conv walk's
    order: positions outermost, channel tiles innermost)."""
    pos: Position
    c0: int
    tc: int

    @property
    def size(self) -> int:
        return self.pos.tn * self.tc * self.pos.th * self.pos.tw


def _tiles(g: ConvGeom, s: Schedule) -> list[_Tile]:
    return [_Tile(p, c0, min(s.tile_co, g.cob - c0))
            for p in positions(g, s) for c0 in range(0, g.cob, s.tile_co)]


def _store(ctx: LoweringContext, g: ConvGeom, t: _Tile, acc: int, buf: str) -> None:
    """STORE the [n][c][th][tw] tile at `acc` into the (nb, cb, oh, ow) output."""
    opos, npos = g.oh * g.ow, t.pos.th * t.pos.tw
    for n in range(t.pos.tn):
        first = ((t.pos.n0 + n) * g.cob + t.c0) * opos
        if npos == opos:
            ctx.b.store_2d(acc + n * t.tc * npos, buf, first, opos, t.tc, opos)
            continue
        for c in range(t.tc):
            ctx.b.store_2d(acc + (n * t.tc + c) * npos, buf,
                           first + c * opos + t.pos.oh0 * g.ow + t.pos.ow0, t.pos.tw, t.pos.th,
                           g.ow)


def _load_elementwise(ctx, g: ConvGeom, t: _Tile, base: int, x: PackedTensor) -> None:
    """LOAD an (unpadded) [n][c][th][tw] tile of `x` into ACC at `base`."""
    mt = MemType.ACC_8BIT if x.dtype == "int8" else MemType.ACC
    hw, npos = g.h * g.w, t.pos.th * t.pos.tw
    for n in range(t.pos.tn):
        first = ((t.pos.n0 + n) * g.cib + t.c0) * hw + t.pos.oh0 * g.w + t.pos.ow0
        if t.pos.tw == g.w and npos <= MAX_XSIZE:
            ctx.b.load_2d(mt, base + n * t.tc * npos, x.buffer, first, npos, t.tc, hw)
            continue
        for c in range(t.tc):
            ctx.b.load_2d(mt, base + (n * t.tc + c) * npos, x.buffer, first + c * hw, t.pos.tw,
                          t.pos.th, g.w)


def _pipeline(ctx: LoweringContext, g: ConvGeom, s: Schedule, compute, out: str) -> None:
    """Emit every tile: compute(tile, acc_base) then its STORE, threads in lockstep."""
    tiles, v, tok = _tiles(g, s), s.vthreads, ctx.tokens
    half = ctx.cfg.acc_depth // v
    store_tok = [None] * v
    last = {i % v: i for i in range(len(tiles))}
    if ctx.cfg.alu_stage:
        # The ALU stage: every ALU instruction waits for the compute work (loads, resets)
        # before it in the stream (strict mode, context.py); a tile's store follows its
        # ALU work through a2s, and its thread's next tile waits for the store through s2g.
        tok.strict_alu = True
        for i, t in enumerate(tiles):
            th = i % v
            tok.wait("s2g", store_tok[th])
            compute(t, th * half)
            tok.wait("a2s", tok.push("a2s"))
            _store(ctx, g, t, th * half, out)
            if i < last[th]:
                store_tok[th] = tok.push("s2g")
        tok.strict_alu = False
        return
    for first in range(0, len(tiles), v):
        group = list(enumerate(tiles[first:first + v]))
        g2s = [None] * v
        for th, t in group:
            tok.wait("s2g", store_tok[th])
            compute(t, th * half)
            g2s[th] = tok.push("g2s")
        for th, t in group:
            tok.wait("g2s", g2s[th])
            _store(ctx, g, t, th * half, out)
            if first + th < last[th]:
                store_tok[th] = tok.push("s2g")


def _check_input(layer, cfg, x: PackedTensor, shape, dtype: str = "int8") -> None:
    if x.nchw != tuple(shape) or x.dtype != dtype or x.block != cfg.block_out:
        raise InputError(f"{type(layer).__name__} '{layer.name}': input buffer {x.buffer!r} "
                         f"holds {x.dtype}{list(x.shape)} in blocks of {x.block}; expected "
                         f"{dtype}{list(shape)} in blocks of BLOCK_OUT={cfg.block_out}")


def _prologue(ctx, layer, s: Schedule) -> Schedule:
    why = reason(layer, ctx.cfg)
    if why:
        raise TargetError(why)
    check_schedule(layer, ctx.cfg, s)
    ctx.begin_layer()
    return s


# ---- pooling -----------------------------------------------------------------------------
def _pad_fix(ctx, base: int, regions: int, rows: int, cols: int, pads) -> None:
    """Set the padded entries of `regions` consecutive rows x cols regions to PAD_VALUE (the
    LOAD wrote zeros there)."""
    ypb, ypa, xpb, xpa = pads
    size, mid = rows * cols, rows - ypb - ypa
    spans = [(0, ypb * cols), ((rows - ypa) * cols, ypa * cols)]       # whole padded rows
    for off, n in spans:
        if n:
            k = ctx.kernel(("padrows", base + off, regions, size, n),
                           lambda: ([(base + off, 0)], [(regions, size, 0), (n, 1, 0)]))
            ctx.b.alu(k, AluOp.MIN, PAD_VALUE)
    for first, n in ((ypb * cols, xpb), (ypb * cols + cols - xpa, xpa)):  # padded columns
        if n and mid:
            k = ctx.kernel(("padcols", base + first, regions, size, mid, cols, n),
                           lambda: ([(base + first + j, 0) for j in range(n)],
                                    [(regions, size, 0), (mid, cols, 0)]))
            ctx.b.alu(k, AluOp.MIN, PAD_VALUE)


def lower_pool2d(ctx: LoweringContext, layer: Pool2d, x: PackedTensor, *,
                 schedule: Schedule, out: str | None = None) -> PackedTensor:
    """Max or average pooling of packed int8 `x` on the ALU with `schedule`; returns the
    packed output."""
    cfg = ctx.cfg
    _check_input(layer, cfg, x, layer.in_shape)
    s = _prologue(ctx, layer, schedule)
    g = alu_geom(layer, cfg)
    y = ctx.tensor(out or f"{layer.name}/out", layer.out_shape, block=cfg.block_out)
    out_cap = s.tile_n * s.tile_co * s.tile_h * s.tile_w
    is_max = layer.kind == "max"

    def compute(t: _Tile, acc: int) -> None:
        inp = acc + out_cap
        r_lo, r_n, ypb, ypa, rows = _window(t.pos.oh0, t.pos.th, g.sh, g.kh, g.pads[0], g.h)
        c_lo, c_n, xpb, xpa, cols = _window(t.pos.ow0, t.pos.tw, g.sw, g.kw, g.pads[1], g.w)
        hw, regions = g.h * g.w, t.pos.tn * t.tc
        for n in range(t.pos.tn):
            for c in range(t.tc):
                ctx.b.load_2d(MemType.ACC_8BIT, inp + (n * t.tc + c) * rows * cols, x.buffer,
                              ((t.pos.n0 + n) * g.cib + t.c0 + c) * hw + r_lo * g.w + c_lo,
                              c_n, r_n, g.w, xpb, ypb, xpa, ypa)
        if is_max and (ypb or ypa or xpb or xpa):
            _pad_fix(ctx, inp, regions, rows, cols, (ypb, ypa, xpb, xpa))
        n_out = t.size
        k = ctx.kernel(("reset", acc, n_out), lambda: ([(acc, 0, 0)], [(n_out, 1, 0)]))
        ctx.b.gemm(k, reset=True)
        npos = t.pos.th * t.pos.tw
        for tap in range(g.kk):
            dh, dw = divmod(tap, g.kw)
            k = ctx.kernel(("tap", acc, inp, regions, t.pos.th, t.pos.tw, rows, cols, dh, dw, g.sh,
                            g.sw), lambda: (
                [(acc + r * npos, inp + r * rows * cols + dh * cols + dw)
                 for r in range(regions)],
                [(t.pos.th, t.pos.tw, g.sh * cols), (t.pos.tw, 1, g.sw)]))
            ctx.b.alu(k, AluOp.MAX if is_max and tap else AluOp.ADD)
        if is_max:
            if layer.hi < 127:
                range_op(ctx, acc, n_out, AluOp.MIN, layer.hi)
            if layer.lo > -128:
                range_op(ctx, acc, n_out, AluOp.MAX, layer.lo)
        else:
            emit_requant(ctx, Region(acc, t.pos.tn, t.tc, npos), Requant(layer.shift, layer.lo,
                                                                      layer.hi),
                         vectors=False, half_folded=False)

    _pipeline(ctx, g, s, compute, y.buffer)
    ctx.end_layer(LayerReport(layer.name, f"{layer.kind}pool", s, 0))
    return y


# ---- residual add --------------------------------------------------------------------------
def lower_residual_add(ctx: LoweringContext, layer: ResidualAdd, a: PackedTensor,
                       b: PackedTensor, *, schedule: Schedule,
                       out: str | None = None) -> PackedTensor:
    """QAdd of packed int8 `a` and `b` (same shape) on the ALU with `schedule`; returns the
    packed output."""
    cfg = ctx.cfg
    _check_input(layer, cfg, a, layer.shape)
    _check_input(layer, cfg, b, layer.shape)
    s = _prologue(ctx, layer, schedule)
    g = alu_geom(layer, cfg)
    y = ctx.tensor(out or f"{layer.name}/out", layer.shape, block=cfg.block_out)
    cap = s.tile_n * s.tile_co * s.tile_h * s.tile_w

    def compute(t: _Tile, acc: int) -> None:
        _load_elementwise(ctx, g, t, acc, a)
        _load_elementwise(ctx, g, t, acc + cap, b)
        n = t.size
        if layer.shift_a:
            range_op(ctx, acc, n, AluOp.SHR, -layer.shift_a)
        if layer.shift_b:
            range_op(ctx, acc + cap, n, AluOp.SHR, -layer.shift_b)
        k = ctx.kernel(("add2", acc, acc + cap, n), lambda: ([(acc, acc + cap)], [(n, 1, 1)]))
        ctx.b.alu(k, AluOp.ADD)
        emit_requant(ctx, Region(acc, t.pos.tn, t.tc, t.pos.th * t.pos.tw), layer.requant,
                     vectors=False, half_folded=False)

    _pipeline(ctx, g, s, compute, y.buffer)
    ctx.end_layer(LayerReport(layer.name, "residual_add", s, 0))
    return y


# ---- requantize alone -------------------------------------------------------------------------
def lower_requantize(ctx: LoweringContext, layer: RequantizeLayer, x: PackedTensor, *,
                     schedule: Schedule, out: str | None = None) -> PackedTensor:
    """Requantize (ReLU / clip / rescale, per-tensor or per-channel shift) of packed `x`
    (int8 or int32) on the ALU with `schedule`; returns the packed int8 output."""
    cfg = ctx.cfg
    _check_input(layer, cfg, x, layer.shape, layer.in_dtype)
    s = _prologue(ctx, layer, schedule)
    g = alu_geom(layer, cfg)
    y = ctx.tensor(out or f"{layer.name}/out", layer.shape, block=cfg.block_out)
    r = layer.requant
    cap = s.tile_n * s.tile_co * s.tile_h * s.tile_w
    cbuf, nconst = None, 0
    if r.per_channel:
        vecs = requant_vectors(r, layer.shape[1], g.cob, cfg, None, with_half=True)
        cbuf, nconst = ctx.constant(f"{layer.name}/shifts", vecs), vecs.shape[1]

    def compute(t: _Tile, acc: int) -> None:
        _load_elementwise(ctx, g, t, acc, x)
        if cbuf:
            m = t.tc * nconst
            ctx.b.load_2d(MemType.ACC, acc + cap, cbuf, t.c0 * nconst, m, 1, m)
        emit_requant(ctx, Region(acc, t.pos.tn, t.tc, t.pos.th * t.pos.tw, acc + cap, nconst), r,
                     vectors=bool(cbuf), half_folded=bool(cbuf))

    _pipeline(ctx, g, s, compute, y.buffer)
    ctx.end_layer(LayerReport(layer.name, "requantize", s, 0))
    return y


__all__ = ["lower_pool2d", "lower_residual_add", "lower_requantize"]
