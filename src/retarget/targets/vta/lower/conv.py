"""conv2d and dense on the GEMM core, requantised on the ALU.

Data: activations NCHW{BATCH}n{BLOCK_IN}c, weights packed (O/BO, I/BI per group, KH, KW, BO, BI)
(layout.pack_oihw; depthwise: one diagonal BO x BI block per channel block and tap), and one
ACC vector per output block holding bias + rounding constant (alu.requant_vectors).

Per output tile (batch blocks x rows x cols x output channel blocks), for each reduction phase
(a tile of input channel blocks): LOAD INP with the convolution's padding done by the LOAD's
pad fields (a tile at the image border gets pads, an inner tile none), LOAD WGT, GEMM with
loops over the tile's output rows and columns and one micro-op per (output block, input block,
tap). Then bias + rounding, shift and clip on the ALU, and STORE of the int8 tile. A one-row
kernel with a row stride loads only the rows it reads (ConvGeom.skip_rows).

Every micro-op kernel of the layer is built up front (plan) and loaded by one LOAD UOP before
the first GEMM. The layer's last tile requantises and stores in pieces (chunks), so that its
store, which nothing else hides, mostly overlaps its own ALU work.

Virtual threads: tiles alternate between thread halves of INP/WGT/ACC and are emitted in
lockstep (all threads' loads of a phase, then their GEMMs, then the epilogues and stores), with
RAW tokens (load->compute, compute->store) and WAR tokens (a thread's next load waits for its
previous GEMM, its next accumulator reset for its previous store). A tile whose input (or
weights) is already resident in the thread's half is not loaded again.

With the config's `alu_stage`, the epilogue runs on the ALU module: each tile's last GEMM
pushes g2a, its requantisation pops it and pushes a2s, its store pops that and (when the
thread has a later tile) pushes s2g, which the thread's next accumulator reset pops. Each
tile's epilogue and store follow its own GEMMs in the stream (not the group's), so that tile
i's requantisation overlaps tile i+1's GEMMs (context.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ....errors import InputError, TargetError
from ..isa import MemType
from ..layout import pack_oihw
from .alu import Region, emit_steps, requant_steps, requant_vectors
from .context import LayerReport, LoweringContext
from .layers import Conv2d, Dense, reason
from .schedule import (ConvGeom, Schedule, acc_thread_base, check_schedule, choose_schedule,
                       conv_consts, conv_geom, conv_spans, resident_consts)
from .tensor import PackedTensor

MAX_XSIZE = (1 << 16) - 1


# One reduction phase of a conv tile, (p0, tci, ci0, nci): input-channel blocks [p0, p0 + tci)
# of the tile's group (weights), read from input blocks [ci0, ci0 + nci) of the feature map. A
# plain tuple: the tile search builds millions of them, and a NamedTuple costs it a third more.
Phase = tuple[int, int, int, int]


def input_key(spatial: tuple, ph: Phase) -> tuple:
    """What a thread's input half holds after loading `ph` of the tile at `spatial` (batch,
    rows and columns): the emitter and the cost model skip a LOAD whose key is already there."""
    _, _, ci0, nci = ph
    return spatial, ci0, nci


def weight_key(c0: int, tco: int, ph: Phase) -> tuple:
    """What a thread's weight half holds after loading `ph` of output blocks [c0, c0 + tco)."""
    p0, tci, _, _ = ph
    return c0, tco, p0, tci


@dataclass(frozen=True, slots=True)
class _Tile:
    n0: int
    tn: int
    oh0: int
    th: int
    ow0: int
    tw: int
    c0: int
    tco: int
    phases: tuple[Phase, ...]                       # (p0, tci, ci0, nci) per reduction phase
    offs: tuple[int, ...]                           # per output block: its first input block

    @property
    def spatial(self) -> tuple:
        return self.n0, self.tn, self.oh0, self.th, self.ow0, self.tw


def pack_conv_weight(layer: Conv2d, weight: np.ndarray, cfg, depthwise: bool,
                     merged: int = 1) -> np.ndarray:
    """(O/BO, I/BI, KH, KW, BO, BI) int8 (I: the input channels of a group); depthwise:
    (C/B, 1, KH, KW, B, B) diagonal blocks; `merged` groups at a time: the block-diagonal
    weight of each merged group (conv_groups)."""
    if merged > 1:
        o, cg, kh, kw = weight.shape
        og = o // layer.groups
        wide = np.zeros((o, merged * cg, kh, kw), dtype=np.int8)
        for j in range(o):               # output channel j belongs to member group m
            m = (j // og) % merged
            wide[j, m * cg:(m + 1) * cg] = weight[j]
        weight = wide
    if not depthwise:
        return pack_oihw(weight, cfg.block_out, cfg.block_in)
    c, _, kh, kw = weight.shape
    bo = cfg.block_out
    cb = -(-c // bo)
    taps = np.zeros((cb * bo, kh, kw), dtype=np.int8)
    taps[:c] = weight[:, 0]
    taps = taps.reshape(cb, bo, kh, kw).transpose(0, 2, 3, 1)      # (cb, kh, kw, lane)
    out = np.zeros((cb, 1, kh, kw, bo, bo), dtype=np.int8)
    lane = np.arange(bo)
    out[:, 0, :, :, lane, lane] = taps.transpose(3, 0, 1, 2)
    return out


def _co_plans(g: ConvGeom, s: Schedule, first_only: bool = False) -> list[tuple]:
    """(first output block, blocks, reduction phases, first input block per output block) per
    output-channel tile."""
    groups = g.cob // g.cog
    if first_only:      # the first tile of either form starts at block 0
        co_tiles = [(0, min(s.tile_co, g.cob if conv_spans(g, s) else g.cog))]
    elif conv_spans(g, s):
        co_tiles = [(c0, min(s.tile_co, g.cob - c0)) for c0 in range(0, g.cob, s.tile_co)]
    else:
        co_tiles = [(gr * g.cog + c, min(s.tile_co, g.cog - c)) for gr in range(groups)
                    for c in range(0, g.cog, s.tile_co)]
    co_plans = []
    for c0, tco in co_tiles:
        if conv_spans(g, s):
            gr0 = c0 // g.cog
            offs = tuple(((c0 + j) // g.cog - gr0) * g.cig for j in range(tco))
            nci = ((c0 + tco - 1) // g.cog - gr0 + 1) * g.cig
            phases = ((0, g.cig, gr0 * g.cig, nci),)
        else:
            base = (c0 // g.cog) * g.cig
            offs = (0,) * tco
            phases = tuple((p0, min(s.tile_ci, g.cig - p0), base + p0, min(s.tile_ci, g.cig - p0))
                           for p0 in range(0, g.cig, s.tile_ci))
        co_plans.append((c0, tco, phases, offs))
    return co_plans


def _tiles(g: ConvGeom, s: Schedule) -> list[_Tile]:
    co_plans = _co_plans(g, s)
    ns = [(n0, min(s.tile_n, g.nb - n0)) for n0 in range(0, g.nb, s.tile_n)]
    hs = [(oh0, min(s.tile_h, g.oh - oh0)) for oh0 in range(0, g.oh, s.tile_h)]
    ws = [(ow0, min(s.tile_w, g.ow - ow0)) for ow0 in range(0, g.ow, s.tile_w)]
    return [_Tile(n0, tn, oh0, th, ow0, tw, c0, tco, phases, offs)
            for n0, tn in ns for oh0, th in hs for ow0, tw in ws
            for c0, tco, phases, offs in co_plans]


def _first_tile_head(g: ConvGeom, s: Schedule) -> _Tile:
    """_tiles(g, s)[0] with its first reduction phase only and no input offsets (what the
    tile search reads of it; a layer reduced in many phases has as many to build)."""
    if conv_spans(g, s):
        tco = min(s.tile_co, g.cob)
        phase = (0, g.cig, 0, ((tco - 1) // g.cog + 1) * g.cig)
    else:
        tco = min(s.tile_co, g.cog)
        tci = min(s.tile_ci, g.cig)
        phase = (0, tci, 0, tci)
    return _Tile(0, min(s.tile_n, g.nb), 0, min(s.tile_h, g.oh), 0, min(s.tile_w, g.ow), 0, tco,
                 (phase,), ())


def _first_tile(g: ConvGeom, s: Schedule) -> _Tile:
    """_tiles(g, s)[0] without building the others."""
    (c0, tco, phases, offs), = _co_plans(g, s, first_only=True)
    return _Tile(0, min(s.tile_n, g.nb), 0, min(s.tile_h, g.oh), 0, min(s.tile_w, g.ow), c0, tco,
                 phases, offs)


def _window(o0: int, t: int, stride: int, k: int, pad0: int, size: int):
    """(first real input index, real count, pad before, pad after, rows incl. padding)."""
    r0 = o0 * stride - pad0
    r1 = r0 + (t - 1) * stride + k
    lo, hi = max(r0, 0), min(r1, size)
    return lo, hi - lo, lo - r0, r1 - hi, r1 - r0


class _ConvEmitter:
    def __init__(self, ctx: LoweringContext, layer: Conv2d, g: ConvGeom, s: Schedule,
                 x: PackedTensor, wbuf: str, cbuf: str, out: PackedTensor, nconst: int):
        self.ctx, self.b, self.layer, self.g, self.s = ctx, ctx.b, layer, g, s
        self.x, self.wbuf, self.cbuf, self.out, self.nconst = x, wbuf, cbuf, out, nconst
        c, v = ctx.cfg, s.vthreads
        self.inp_half, self.wgt_half = c.inp_depth // v, c.wgt_depth // v
        self.acc0, self.acc_half = acc_thread_base(g, c, nconst, v)
        self.resident = resident_consts(g, c, nconst) > 0
        self.const_off = s.tile_n * s.tile_co * s.tile_h * s.tile_w
        self.gemm_iters = 0
        self.passes = len(requant_steps(ctx, Region(0, 1, 1, 1, 0, nconst), layer.requant,
                                        vectors=True, half_folded=True))

    # ---- loads ----------------------------------------------------------------------------
    def load_inp(self, t: _Tile, ph, base: int) -> None:
        g, b, buf = self.g, self.b, self.x.buffer
        _, _, ci0, nci = ph
        r_lo, r_n, ypb, ypa, rows = g.row_window(t.oh0, t.th)
        c_lo, c_n, xpb, xpa, cols = _window(t.ow0, t.tw, g.sw, g.kw, g.pads[1], g.w)
        hw = g.h * g.w
        ystride = g.w * (g.sh if g.skip_rows else 1)
        if hw == 1 and rows * cols == 1:      # a matrix: one 2-D load of [n][ci]
            b.load_2d(MemType.INP, base, buf, t.n0 * g.cib + ci0, nci, t.tn, g.cib)
            return
        whole = r_n == g.h and c_n == g.w and not (ypb or ypa or xpb or xpa) and hw <= MAX_XSIZE
        for n in range(t.tn):
            first = ((t.n0 + n) * g.cib + ci0) * hw
            if whole:
                b.load_2d(MemType.INP, base + n * nci * hw, buf, first, hw, nci, hw)
                continue
            for ci in range(nci):
                b.load_2d(MemType.INP, base + (n * nci + ci) * rows * cols, buf,
                          first + ci * hw + r_lo * g.w + c_lo, c_n, r_n, ystride, xpb, ypb, xpa,
                          ypa)

    def load_wgt(self, t: _Tile, ph, base: int) -> None:
        g = self.g
        p0, tci, _, _ = ph
        x, stride = tci * g.kk, g.cig * g.kk
        first = (t.c0 * g.cig + p0) * g.kk
        if x == stride and x * t.tco <= MAX_XSIZE:
            self.b.load_2d(MemType.WGT, base, self.wbuf, first, x * t.tco, 1, x * t.tco)
        else:
            self.b.load_2d(MemType.WGT, base, self.wbuf, first, x, t.tco, stride)

    # ---- compute --------------------------------------------------------------------------
    def load_consts(self) -> None:
        """The whole layer's bias (+ shift) vectors into the shared region, once."""
        m = self.g.cob * self.nconst
        self.b.load_2d(MemType.ACC, 0, self.cbuf, 0, m, 1, m)

    def const_base(self, t: _Tile, acc: int) -> int:
        return t.c0 * self.nconst if self.resident else acc + self.const_off

    def reset_kernel(self, t: _Tile, acc: int):
        n = t.tn * t.tco * t.th * t.tw
        return self.ctx.kernel(("reset", acc, n), lambda: ([(acc, 0, 0)], [(n, 1, 0)]))

    def start(self, t: _Tile, acc: int, reset) -> None:
        """Zero the tile's accumulators and (unless resident) load its bias (+ shift) vectors."""
        self.b.gemm(reset, reset=True)
        if not self.resident:
            m = t.tco * self.nconst
            self.b.load_2d(MemType.ACC, acc + self.const_off, self.cbuf, t.c0 * self.nconst,
                           m, 1, m)

    def kernels(self, t: _Tile, ph, acc: int, inp: int, wgt: int) -> list:
        """The GEMM micro-op kernels of (tile, phase): one per batch block, or one looping
        over the batch blocks when the tile is a single position."""
        g, ctx = self.g, self.ctx
        _, tci, _, nci = ph
        rows, cols = g.in_rows(t.th), g.in_cols(t.tw)
        npos = t.th * t.tw
        kk, kw = g.kk, g.kw

        def uops(n):
            return [(acc + (n * t.tco + j) * npos,
                     inp + ((n * nci + t.offs[j] + p) * rows + dh) * cols + dw,
                     wgt + (j * tci + p) * kk + dh * kw + dw)
                    for j in range(t.tco) for p in range(tci)
                    for dh in range(g.kh) for dw in range(g.kw)]
        # The key must name everything uops() and the loops read: two layers with equal tiles
        # but other kernel sizes, input tile shapes or strides need different micro-ops.
        key = ("gemm", acc, inp, wgt, t.tn, t.tco, t.th, t.tw, tci, nci, t.offs,
               g.kh, g.kw, rows, cols, g.row_pitch, g.sw)
        if npos == 1:    # loop over the batch blocks
            return [ctx.kernel(key, lambda: (uops(0), [(t.tn, t.tco, nci * rows * cols, 0)]))]
        # loop over the tile's output rows and columns, one GEMM per batch block
        return [ctx.kernel(key + (n,), lambda: (uops(n), [
            (t.th, t.tw, g.row_pitch * cols, 0), (t.tw, 1, g.sw, 0)])) for n in range(t.tn)]

    def chunks(self, t: _Tile, last: bool) -> list[tuple[int, int, int, int]]:
        """How the tile's epilogue and store are cut: (first co block, co blocks, first row,
        rows). One piece, except for the layer's last tile (batch tile of one), whose store
        nothing else can hide: its epilogue and store go in k pieces, so the store module
        drains piece j while the ALU works on piece j+1. k balances the ALU instructions
        each piece adds against the last piece's store (the layer's tail)."""
        if not last or t.tn != 1:
            return [(0, t.tco, 0, t.th)]
        c = self.ctx.cfg
        n = t.tco * t.th * t.tw
        beats = max(1, c.out_elem_bytes // c.bus_bytes)
        per_piece = self.passes * (c.insn_overhead + c.alu_pipeline) + c.dma_latency
        k = max(1, min(round((n * beats / per_piece) ** 0.5), t.tco * t.th))
        if k <= t.tco:
            per = -(-t.tco // k)
            return [(j, min(per, t.tco - j), 0, t.th) for j in range(0, t.tco, per)]
        rows = -(-t.th // -(-k // t.tco))
        return [(j, 1, r, min(rows, t.th - r)) for j in range(t.tco)
                for r in range(0, t.th, rows)]

    def epilogue_steps(self, t: _Tile, acc: int, piece) -> list:
        j0, nj, r0, nr = piece
        npos = t.th * t.tw
        if nj == t.tco and nr == t.th:
            r = Region(acc, t.tn, t.tco, npos, self.const_base(t, acc), self.nconst)
        else:
            r = Region(acc + j0 * npos + r0 * t.tw, 1, nj, nr * t.tw if nj == 1 else npos,
                       self.const_base(t, acc) + j0 * self.nconst, self.nconst)
        return requant_steps(self.ctx, r, self.layer.requant, vectors=True, half_folded=True)

    def store(self, t: _Tile, acc: int, piece) -> None:
        g, b, buf = self.g, self.b, self.out.buffer
        j0, nj, r0, nr = piece
        npos, opos = t.th * t.tw, g.oh * g.ow
        if opos == 1:
            b.store_2d(acc + j0, buf, t.n0 * g.cob + t.c0 + j0, nj, t.tn, g.cob)
            return
        for n in range(t.tn):
            first = ((t.n0 + n) * g.cob + t.c0) * opos
            if t.tw == g.ow and nr == t.th:       # whole rows: one run per channel block
                b.store_2d(acc + (n * t.tco + j0) * npos, buf,
                           first + j0 * opos + t.oh0 * g.ow, npos, nj, opos)
                continue
            for j in range(j0, j0 + nj):
                src = acc + (n * t.tco + j) * npos + r0 * t.tw
                dst = first + j * opos + (t.oh0 + r0) * g.ow + t.ow0
                if t.tw == g.ow:                  # full-width rows are contiguous
                    b.store_2d(src, buf, dst, nr * t.tw, 1, nr * t.tw)
                else:
                    b.store_2d(src, buf, dst, t.tw, nr, g.ow)

    # ---- the pipeline ---------------------------------------------------------------------
    def plan(self, tiles: list[_Tile]) -> list[tuple]:
        """Per tile: (ACC base, reset kernel, GEMM kernels per phase, [(epilogue ALU steps,
        store piece)]). Building every kernel up front lets run() load them all at once."""
        v, plans = self.s.vthreads, []
        for i, t in enumerate(tiles):
            th = i % v
            acc, inp, wgt = self.acc0 + th * self.acc_half, th * self.inp_half, th * self.wgt_half
            gemms = [self.kernels(t, ph, acc, inp, wgt) for ph in t.phases]
            pieces = self.chunks(t, i == len(tiles) - 1)
            epi = [(self.epilogue_steps(t, acc, pc), pc) for pc in pieces]
            plans.append((acc, self.reset_kernel(t, acc), gemms, epi))
        return plans

    def preload(self, plans: list[tuple]) -> None:
        """Load the layer's micro-op kernels before its first GEMM, in one LOAD UOP when they
        fit in half the uop buffer (each LOAD UOP costs the compute module a DMA latency and,
        issued lazily mid-layer, waited behind the load module's transfers on the shared bus);
        otherwise the first tiles' kernels only."""
        seen: dict[tuple, object] = {}
        for _, reset, gemms, epi in plans:
            for k in [reset] + [k for ks in gemms for k in ks] + \
                    [st[0] for steps, _ in epi for st in steps]:
                seen.setdefault(k.key, k)
        kernels = list(seen.values())
        if sum(len(k.uops) for k in kernels) > self.ctx.cfg.uop_depth // 2:
            v = self.s.vthreads
            kernels = [k for _, reset, gemms, _ in plans[:v] for k in [reset] + gemms[0]]
        self.b.preload_kernels(kernels)

    def run(self) -> None:
        tiles, v, tok = _tiles(self.g, self.s), self.s.vthreads, self.ctx.tokens
        # Which loads each (tile, phase) needs given what its thread's halves already hold,
        # and each thread's last load / last tile (a token is pushed only if someone waits).
        resident = [(None, None)] * v
        needs, last_load, last_tile = {}, [(-1, -1)] * v, [-1] * v
        for i, t in enumerate(tiles):
            th = i % v
            last_tile[th] = i
            for p, ph in enumerate(t.phases):
                ik, wk = input_key(t.spatial, ph), weight_key(t.c0, t.tco, ph)
                needs[i, p] = (ik != resident[th][0], wk != resident[th][1])
                resident[th] = (ik, wk)
                if any(needs[i, p]):
                    last_load[th] = (i, p)
        plans = self.plan(tiles)
        gemm_tok, store_tok = [None] * v, [None] * v
        alu_stage = self.ctx.cfg.alu_stage
        self.preload(plans)
        if self.resident:
            self.load_consts()
        for first in range(0, len(tiles), v):
            group = list(enumerate(tiles[first:first + v]))
            l2g = [None] * v
            for p in range(len(group[0][1].phases)):
                for th, t in group:
                    need_inp, need_wgt = needs[first + th, p]
                    l2g[th] = None
                    if need_inp or need_wgt:
                        tok.wait("g2l", gemm_tok[th])
                        if need_inp:
                            self.load_inp(t, t.phases[p], th * self.inp_half)
                        if need_wgt:
                            self.load_wgt(t, t.phases[p], th * self.wgt_half)
                        l2g[th] = tok.push("l2g")
                for th, t in group:
                    acc, reset, gemms, _ = plans[first + th]
                    if p == 0:
                        tok.wait("s2g", store_tok[th])
                        self.start(t, acc, reset)
                    tok.wait("l2g", l2g[th])
                    for k in gemms[p]:
                        self.b.gemm(k)
                    self.gemm_iters += t.tn * t.th * t.tw * t.tco * t.phases[p][1] * self.g.kk
                    if (first + th, p) < last_load[th]:
                        gemm_tok[th] = tok.push("g2l")
                    if alu_stage and p == len(t.phases) - 1:
                        # The ALU stage: this tile's epilogue and store right after its GEMMs.
                        tok.wait("g2a", tok.push("g2a"))
                        for steps, piece in plans[first + th][3]:
                            emit_steps(self.ctx, steps)
                            tok.wait("a2s", tok.push("a2s"))
                            self.store(t, acc, piece)
                        if first + th < last_tile[th]:
                            store_tok[th] = tok.push("s2g")
            if alu_stage:
                continue
            # Epilogues, then stores; a tile cut in pieces (the last) stores each piece as
            # soon as its ALU work is done, interleaved in the stream so that the fetch stage
            # never holds the store back behind a full compute queue.
            g2s = [None] * v
            for th, t in group:
                acc, _, _, epi = plans[first + th]
                if len(epi) > 1:
                    continue
                emit_steps(self.ctx, epi[0][0])
                g2s[th] = tok.push("g2s")
            for th, t in group:
                acc, _, _, epi = plans[first + th]
                if len(epi) == 1:
                    tok.wait("g2s", g2s[th])
                    self.store(t, acc, epi[0][1])
                else:
                    for steps, piece in epi:
                        emit_steps(self.ctx, steps)
                        tok.wait("g2s", tok.push("g2s"))
                        self.store(t, acc, piece)
                if first + th < last_tile[th]:
                    store_tok[th] = tok.push("s2g")


def _check_operands(layer: Conv2d, cfg, x: PackedTensor, weight, bias, depthwise: bool):
    where = f"{layer.op} '{layer.name}'"
    if x.nchw != tuple(layer.in_shape) or x.dtype != "int8" or x.block != cfg.block_in:
        raise InputError(f"{where}: input buffer {x.buffer!r} holds {x.dtype}{list(x.shape)} in "
                         f"blocks of {x.block}; the layer reads int8{list(layer.in_shape)} in "
                         f"blocks of BLOCK_IN={cfg.block_in}")
    want = (layer.out_channels, layer.in_shape[1] // layer.groups) + tuple(layer.kernel)
    weight = np.asarray(weight)
    if weight.shape != want or weight.dtype != np.int8:
        raise InputError(f"{where}: weight {weight.dtype}{list(weight.shape)}, expected "
                         f"int8{list(want)}")
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (layer.out_channels,) or bias.dtype != np.int32:
            raise InputError(f"{where}: bias {bias.dtype}{list(bias.shape)}, expected "
                             f"int32[{layer.out_channels}]")
    return weight, bias


def lower_conv2d(ctx: LoweringContext, layer: Conv2d, x: PackedTensor, weight: np.ndarray,
                 bias: np.ndarray | None = None, *, schedule: Schedule | None = None,
                 vthreads: int | None = None, cost=None, out: str | None = None,
                 _matrix_out: bool = False) -> PackedTensor:
    """Append `layer` to the stream: reads packed `x`, returns the packed int8 output tensor
    (a new DRAM buffer named `out`, default '<layer.name>/out'). Weights (OIHW int8) and bias
    (int32) become packed constants of the segment. `schedule` defaults to
    choose_schedule(layer, cfg, vthreads, cost)."""
    cfg = ctx.cfg
    why = reason(layer, cfg)
    if why:
        raise TargetError(why)
    g = conv_geom(layer, cfg)
    weight, bias = _check_operands(layer, cfg, x, weight, bias, g.diag)
    s = schedule or choose_schedule(layer, cfg, vthreads, cost)
    check_schedule(layer, cfg, s)
    ctx.begin_layer()
    wbuf = ctx.constant(f"{layer.name}/weight",
                        pack_conv_weight(layer, weight, cfg, g.diag, g.merged))
    cbuf = ctx.constant(f"{layer.name}/bias", requant_vectors(
        layer.requant, layer.out_channels, g.cob, cfg, bias, with_half=True))
    return _emit(ctx, layer, g, s, x, wbuf, cbuf, out, _matrix_out)


def lower_conv2d_for_timing(ctx: LoweringContext, layer: Conv2d, x: PackedTensor,
                            schedule: Schedule) -> PackedTensor:
    """The same instructions as lower_conv2d with `schedule`, but the weight and bias
    buffers are only allocated (no data packed): for timing a candidate schedule."""
    cfg = ctx.cfg
    why = reason(layer, cfg)
    if why:
        raise TargetError(why)
    g = conv_geom(layer, cfg)
    check_schedule(layer, cfg, schedule)
    ctx.begin_layer()
    wshape = (g.cob, 1 if g.diag else g.cig, g.kh, g.kw, cfg.block_out, cfg.block_in)
    wbuf = f"{layer.name}/weight"
    ctx.b.alloc(wbuf, wshape, "int8")
    cbuf = f"{layer.name}/bias"
    ctx.b.alloc(cbuf, (g.cob, conv_consts(layer), cfg.batch, cfg.block_out), "int32")
    return _emit(ctx, layer, g, schedule, x, wbuf, cbuf, None, False)


def _emit(ctx, layer: Conv2d, g: ConvGeom, s: Schedule, x: PackedTensor, wbuf: str, cbuf: str,
          out: str | PackedTensor | None, matrix_out: bool) -> PackedTensor:
    cfg = ctx.cfg
    nconst = conv_consts(layer)
    shape = layer.out_shape[:2] if matrix_out else layer.out_shape
    y = out if isinstance(out, PackedTensor) else \
        ctx.tensor(out or f"{layer.name}/out", shape, block=cfg.block_out)
    em = _ConvEmitter(ctx, layer, g, s, x, wbuf, cbuf, y, nconst)
    em.run()
    report = LayerReport(layer.name, "conv2d", s, 0, layer.macs,
                         em.gemm_iters * cfg.batch * cfg.block_in * cfg.block_out)
    if layer.in_shape[1] % cfg.block_in:
        report.notes.append(f"{layer.in_shape[1]} input channels padded to a multiple of "
                            f"BLOCK_IN={cfg.block_in}")
    if g.diag:
        report.notes.append(f"depthwise as diagonal {cfg.block_out}x{cfg.block_in} weight "
                            f"blocks: 1/{cfg.block_in} of the GEMM core's MACs are useful")
    if g.merged > 1:
        report.notes.append(f"groups={layer.groups} merged {g.merged} at a time into block-"
                            f"diagonal weights: 1/{g.merged} of the GEMM core's MACs are useful")
    ctx.end_layer(report)
    return y


def lower_dense(ctx: LoweringContext, layer: Dense, x: PackedTensor, weight: np.ndarray,
                bias: np.ndarray | None = None, *, schedule: Schedule | None = None,
                vthreads: int | None = None, cost=None, out: str | None = None) -> PackedTensor:
    """A dense layer (weight: out_features x in_features int8, i.e. Gemm transB=1) as a 1x1
    convolution on a 1x1 image. `x` is the (batch x in_features) matrix tensor (or an
    N x C x 1 x 1 activation); returns the (batch x out_features) matrix tensor."""
    weight = np.asarray(weight)
    if weight.ndim != 2:
        raise InputError(f"{layer.op} '{layer.name}': weight must be 2-D (out x in), got "
                         f"{list(weight.shape)}")
    if schedule is None:
        schedule = choose_schedule(layer, ctx.cfg, vthreads, cost)
    y = lower_conv2d(ctx, layer.as_conv(), x, weight.reshape(weight.shape + (1, 1)), bias,
                     schedule=schedule, out=out, _matrix_out=True)
    ctx.reports[-1].kind = "dense"
    return y


def lower_batched_matmul(ctx: LoweringContext, layer: Dense, a: PackedTensor, wbuf: str,
                         slices: int, out: str | None = None) -> PackedTensor:
    """`slices` independent products A_s . B_s of two activations (attention's per-head
    Q . K^T and A . V). `a` is the (slices * N) x K matrix tensor of the A_s; `wbuf` the input
    buffer holding the B_s as weight blocks (kernel.pack_weight_slices: the host lays them out
    so, as it lays out every input); `layer` the dense layer of one slice (N rows, K -> M) with
    its requantisation. Each slice is that dense layer on views of the operands and the
    result (DRAM aliases, no copies), scheduled once. Returns the (slices * N) x M matrix."""
    cfg = ctx.cfg
    conv = layer.as_conv()
    why = reason(conv, cfg)
    if why:
        raise TargetError(why)
    n, m = layer.batch, layer.out_features
    if a.shape != (slices * n, layer.in_features):
        raise InputError(f"{layer.op} '{layer.name}': A is {list(a.shape)}, expected "
                         f"[{slices * n}, {layer.in_features}] ({slices} slices of {n} rows)")
    g = conv_geom(conv, cfg)
    s = choose_schedule(layer, cfg)
    check_schedule(conv, cfg, s)
    y = ctx.tensor(out or f"{layer.name}/out", (slices * n, m), block=cfg.block_out)
    ctx.begin_layer()
    cbuf = ctx.constant(f"{layer.name}/bias", requant_vectors(
        layer.requant, m, g.cob, cfg, None, with_half=True))
    w_bytes = g.cob * g.cig * cfg.wgt_elem_bytes
    for i in range(slices):
        if i:
            ctx.begin_layer()
        name = f"{layer.name}[{i}]"
        wname = f"{wbuf}[{i}]"
        ctx.b.alias(wname, wbuf, i * w_bytes, (g.cob, g.cig, 1, 1, cfg.block_out, cfg.block_in))
        _emit(ctx, replace(conv, name=name), g, s, ctx.view(a, f"{a.buffer}[{i}]", i * n, n),
              wname, cbuf,
              ctx.view(y, f"{y.buffer}[{i}]", i * n, n), True)
        ctx.reports[-1].kind = "matmul"
    return y
