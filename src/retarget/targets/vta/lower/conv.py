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
weights) is already resident in the thread's half is not loaded again. The order of tiles and
phases, the threads and which loads each phase makes come from walk.conv_walk, which the cost
model (tuning.conv_cycles) walks too.

With the config's `alu_stage`, the epilogue runs on the ALU module: each tile's last GEMM
pushes g2a, its requantisation pops it and pushes a2s, its store pops that and (when the
thread has a later tile) pushes s2g, which the thread's next accumulator reset pops. Each
tile's epilogue and store follow its own GEMMs in the stream (not the group's), so that tile
i's requantisation overlaps tile i+1's GEMMs (context.py).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ....errors import InputError, TargetError
from ..isa import MemType
from ..layout import pack_oihw
from .alu import Region, emit_steps, requant_steps, requant_vectors
from .context import LayerReport, LoweringContext
from .layers import Conv2d, Dense, reason
from .schedule import (ConvGeom, Schedule, acc_thread_base, check_schedule, conv_consts,
                       conv_geom, resident_consts)
from .tensor import PackedTensor
from .walk import Phase, TileStep, conv_rounds

MAX_XSIZE = (1 << 16) - 1


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
    def load_inp(self, t: TileStep, ph: Phase, base: int) -> None:
        g, b, buf = self.g, self.b, self.x.buffer
        ci0, nci = ph.ci0, ph.nci
        r_lo, r_n, ypb, ypa, rows = g.row_window(t.pos.oh0, t.pos.th)
        c_lo, c_n, xpb, xpa, cols = _window(t.pos.ow0, t.pos.tw, g.sw, g.kw, g.pads[1], g.w)
        hw = g.h * g.w
        ystride = g.w * (g.sh if g.skip_rows else 1)
        if hw == 1 and rows * cols == 1:      # a matrix: one 2-D load of [n][ci]
            b.load_2d(MemType.INP, base, buf, t.pos.n0 * g.cib + ci0, nci, t.pos.tn, g.cib)
            return
        whole = r_n == g.h and c_n == g.w and not (ypb or ypa or xpb or xpa) and hw <= MAX_XSIZE
        for n in range(t.pos.tn):
            first = ((t.pos.n0 + n) * g.cib + ci0) * hw
            if whole:
                b.load_2d(MemType.INP, base + n * nci * hw, buf, first, hw, nci, hw)
                continue
            for ci in range(nci):
                b.load_2d(MemType.INP, base + (n * nci + ci) * rows * cols, buf,
                          first + ci * hw + r_lo * g.w + c_lo, c_n, r_n, ystride, xpb, ypb, xpa,
                          ypa)

    def load_wgt(self, t: TileStep, ph: Phase, base: int) -> None:
        g = self.g
        p0, tci = ph.p0, ph.tci
        x, stride = tci * g.kk, g.cig * g.kk
        first = (t.cout.c0 * g.cig + p0) * g.kk
        if x == stride and x * t.cout.tco <= MAX_XSIZE:
            self.b.load_2d(MemType.WGT, base, self.wbuf, first, x * t.cout.tco, 1, x * t.cout.tco)
        else:
            self.b.load_2d(MemType.WGT, base, self.wbuf, first, x, t.cout.tco, stride)

    # ---- compute --------------------------------------------------------------------------
    def load_consts(self) -> None:
        """The whole layer's bias (+ shift) vectors into the shared region, once."""
        m = self.g.cob * self.nconst
        self.b.load_2d(MemType.ACC, 0, self.cbuf, 0, m, 1, m)

    def const_base(self, t: TileStep, acc: int) -> int:
        return t.cout.c0 * self.nconst if self.resident else acc + self.const_off

    def reset_kernel(self, t: TileStep, acc: int):
        n = t.pos.tn * t.cout.tco * t.pos.th * t.pos.tw
        return self.ctx.kernel(("reset", acc, n), lambda: ([(acc, 0, 0)], [(n, 1, 0)]))

    def start(self, t: TileStep, acc: int, reset) -> None:
        """Zero the tile's accumulators and (unless resident) load its bias (+ shift) vectors."""
        self.b.gemm(reset, reset=True)
        if not self.resident:
            m = t.cout.tco * self.nconst
            self.b.load_2d(MemType.ACC, acc + self.const_off, self.cbuf, t.cout.c0 * self.nconst,
                           m, 1, m)

    def kernels(self, t: TileStep, ph: Phase, acc: int, inp: int, wgt: int) -> list:
        """The GEMM micro-op kernels of (tile, phase): one per batch block, or one looping
        over the batch blocks when the tile is a single position."""
        g, ctx = self.g, self.ctx
        tci, nci = ph.tci, ph.nci
        tn, th, tw, tco, offs = t.pos.tn, t.pos.th, t.pos.tw, t.cout.tco, t.cout.offs
        rows, cols = g.in_rows(th), g.in_cols(tw)
        npos = th * tw
        kk, kw = g.kk, g.kw

        def uops(n):
            return [(acc + (n * tco + j) * npos,
                     inp + ((n * nci + offs[j] + p) * rows + dh) * cols + dw,
                     wgt + (j * tci + p) * kk + dh * kw + dw)
                    for j in range(tco) for p in range(tci)
                    for dh in range(g.kh) for dw in range(g.kw)]
        # The key must name everything uops() and the loops read: two layers with equal tiles
        # but other kernel sizes, input tile shapes or strides need different micro-ops.
        key = ("gemm", acc, inp, wgt, tn, tco, th, tw, tci, nci, offs,
               g.kh, g.kw, rows, cols, g.row_pitch, g.sw)
        if npos == 1:    # loop over the batch blocks
            return [ctx.kernel(key, lambda: (uops(0), [(tn, tco, nci * rows * cols, 0)]))]
        # loop over the tile's output rows and columns, one GEMM per batch block
        return [ctx.kernel(key + (n,), lambda: (uops(n), [
            (th, tw, g.row_pitch * cols, 0), (tw, 1, g.sw, 0)])) for n in range(tn)]

    def chunks(self, t: TileStep, last: bool) -> list[tuple[int, int, int, int]]:
        """How the tile's epilogue and store are cut: (first co block, co blocks, first row,
        rows). One piece, except for the layer's last tile (batch tile of one), whose store
        nothing else can hide: its epilogue and store go in k pieces, so the store module
        drains piece j while the ALU works on piece j+1. k balances the ALU instructions
        each piece adds against the last piece's store (the layer's tail)."""
        if not last or t.pos.tn != 1:
            return [(0, t.cout.tco, 0, t.pos.th)]
        c = self.ctx.cfg
        n = t.cout.tco * t.pos.th * t.pos.tw
        beats = max(1, c.out_elem_bytes // c.bus_bytes)
        per_piece = self.passes * (c.insn_overhead + c.alu_pipeline) + c.dma_latency
        k = max(1, min(round((n * beats / per_piece) ** 0.5), t.cout.tco * t.pos.th))
        if k <= t.cout.tco:
            per = -(-t.cout.tco // k)
            return [(j, min(per, t.cout.tco - j), 0, t.pos.th) for j in range(0, t.cout.tco, per)]
        rows = -(-t.pos.th // -(-k // t.cout.tco))
        return [(j, 1, r, min(rows, t.pos.th - r)) for j in range(t.cout.tco)
                for r in range(0, t.pos.th, rows)]

    def epilogue_steps(self, t: TileStep, acc: int, piece) -> list:
        j0, nj, r0, nr = piece
        npos = t.pos.th * t.pos.tw
        if nj == t.cout.tco and nr == t.pos.th:
            r = Region(acc, t.pos.tn, t.cout.tco, npos, self.const_base(t, acc), self.nconst)
        else:
            r = Region(acc + j0 * npos + r0 * t.pos.tw, 1, nj, nr * t.pos.tw if nj == 1 else npos,
                       self.const_base(t, acc) + j0 * self.nconst, self.nconst)
        return requant_steps(self.ctx, r, self.layer.requant, vectors=True, half_folded=True)

    def store(self, t: TileStep, acc: int, piece) -> None:
        g, b, buf = self.g, self.b, self.out.buffer
        j0, nj, r0, nr = piece
        npos, opos = t.pos.th * t.pos.tw, g.oh * g.ow
        if opos == 1:
            b.store_2d(acc + j0, buf, t.pos.n0 * g.cob + t.cout.c0 + j0, nj, t.pos.tn, g.cob)
            return
        for n in range(t.pos.tn):
            first = ((t.pos.n0 + n) * g.cob + t.cout.c0) * opos
            if t.pos.tw == g.ow and nr == t.pos.th:       # whole rows: one run per channel block
                b.store_2d(acc + (n * t.cout.tco + j0) * npos, buf,
                           first + j0 * opos + t.pos.oh0 * g.ow, npos, nj, opos)
                continue
            for j in range(j0, j0 + nj):
                src = acc + (n * t.cout.tco + j) * npos + r0 * t.pos.tw
                dst = first + j * opos + (t.pos.oh0 + r0) * g.ow + t.pos.ow0
                if t.pos.tw == g.ow:                  # full-width rows are contiguous
                    b.store_2d(src, buf, dst, nr * t.pos.tw, 1, nr * t.pos.tw)
                else:
                    b.store_2d(src, buf, dst, t.pos.tw, nr, g.ow)

    # ---- the pipeline ---------------------------------------------------------------------
    def plan(self, tiles: list[TileStep]) -> list[tuple]:
        """Per tile: (ACC base, reset kernel, GEMM kernels per phase, [(epilogue ALU steps,
        store piece)]). Building every kernel up front lets run() load them all at once."""
        plans = []
        for t in tiles:
            th = t.thread
            acc, inp, wgt = self.acc0 + th * self.acc_half, th * self.inp_half, th * self.wgt_half
            gemms = [self.kernels(t, ph, acc, inp, wgt) for ph in t.cout.phases]
            pieces = self.chunks(t, t.index == len(tiles) - 1)
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
        rounds = list(conv_rounds(self.g, self.s))
        tiles = [t for rnd in rounds for t in rnd]
        v, tok = self.s.vthreads, self.ctx.tokens
        # Each thread's last phase that loads: its GEMMs push g2l only if a load of the thread
        # waits for them (a token is pushed only if someone pops it).
        last_load = [(-1, -1)] * v
        for t in tiles:
            for st in t.steps:
                if st.load_input or st.load_weights:
                    last_load[t.thread] = (t.index, st.index)
        plans = self.plan(tiles)
        gemm_tok, store_tok = [None] * v, [None] * v
        alu_stage = self.ctx.cfg.alu_stage
        self.preload(plans)
        if self.resident:
            self.load_consts()
        for rnd in rounds:
            l2g = [None] * v
            for p in range(len(rnd[0].steps)):
                for t in rnd:
                    st, th = t.steps[p], t.thread
                    l2g[th] = None
                    if st.load_input or st.load_weights:
                        tok.wait("g2l", gemm_tok[th])
                        if st.load_input:
                            self.load_inp(t, st.phase, th * self.inp_half)
                        if st.load_weights:
                            self.load_wgt(t, st.phase, th * self.wgt_half)
                        l2g[th] = tok.push("l2g")
                for t in rnd:
                    st, th = t.steps[p], t.thread
                    acc, reset, gemms, epi = plans[t.index]
                    if st.index == 0:
                        tok.wait("s2g", store_tok[th])
                        self.start(t, acc, reset)
                    tok.wait("l2g", l2g[th])
                    for k in gemms[p]:
                        self.b.gemm(k)
                    self.gemm_iters += (t.pos.tn * t.pos.th * t.pos.tw * t.cout.tco
                                        * st.phase.tci * self.g.kk)
                    if (t.index, p) < last_load[th]:
                        gemm_tok[th] = tok.push("g2l")
                    if alu_stage and st.last:
                        # The ALU stage: this tile's epilogue and store right after its GEMMs.
                        tok.wait("g2a", tok.push("g2a"))
                        for steps, piece in epi:
                            emit_steps(self.ctx, steps)
                            tok.wait("a2s", tok.push("a2s"))
                            self.store(t, acc, piece)
                        if t.more:
                            store_tok[th] = tok.push("s2g")
            if alu_stage:
                continue
            # Epilogues, then stores; a tile cut in pieces (the last) stores each piece as
            # soon as its ALU work is done, interleaved in the stream so that the fetch stage
            # never holds the store back behind a full compute queue.
            g2s = [None] * v
            for t in rnd:
                acc, _, _, epi = plans[t.index]
                if len(epi) > 1:
                    continue
                emit_steps(self.ctx, epi[0][0])
                g2s[t.thread] = tok.push("g2s")
            for t in rnd:
                acc, _, _, epi = plans[t.index]
                if len(epi) == 1:
                    tok.wait("g2s", g2s[t.thread])
                    self.store(t, acc, epi[0][1])
                else:
                    for steps, piece in epi:
                        emit_steps(self.ctx, steps)
                        tok.wait("g2s", tok.push("g2s"))
                        self.store(t, acc, piece)
                if t.more:
                    store_tok[t.thread] = tok.push("s2g")


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
                 bias: np.ndarray | None = None, *, schedule: Schedule, out: str | None = None,
                 _matrix_out: bool = False) -> PackedTensor:
    """Append `layer` to the stream with `schedule`: reads packed `x`, returns the packed int8
    output tensor (a new DRAM buffer named `out`, default '<layer.name>/out'). Weights (OIHW
    int8) and bias (int32) become packed constants of the segment. (The package's
    lower_conv2d, choose.py, chooses the schedule when none is given.)"""
    cfg = ctx.cfg
    why = reason(layer, cfg)
    if why:
        raise TargetError(why)
    g = conv_geom(layer, cfg)
    weight, bias = _check_operands(layer, cfg, x, weight, bias, g.diag)
    s = schedule
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
                bias: np.ndarray | None = None, *, schedule: Schedule,
                out: str | None = None) -> PackedTensor:
    """A dense layer (weight: out_features x in_features int8, i.e. Gemm transB=1) as a 1x1
    convolution on a 1x1 image. `x` is the (batch x in_features) matrix tensor (or an
    N x C x 1 x 1 activation); returns the (batch x out_features) matrix tensor."""
    weight = np.asarray(weight)
    if weight.ndim != 2:
        raise InputError(f"{layer.op} '{layer.name}': weight must be 2-D (out x in), got "
                         f"{list(weight.shape)}")
    y = lower_conv2d(ctx, layer.as_conv(), x, weight.reshape(weight.shape + (1, 1)), bias,
                     schedule=schedule, out=out, _matrix_out=True)
    ctx.reports[-1].kind = "dense"
    return y


def lower_batched_matmul(ctx: LoweringContext, layer: Dense, a: PackedTensor, wbuf: str,
                         slices: int, out: str | None = None, *,
                         schedule: Schedule) -> PackedTensor:
    """`slices` independent products A_s . B_s of two activations (attention's per-head
    Q . K^T and A . V). `a` is the (slices * N) x K matrix tensor of the A_s; `wbuf` the input
    buffer holding the B_s as weight blocks (kernel.pack_weight_slices: the host lays them out
    so, as it lays out every input); `layer` the dense layer of one slice (N rows, K -> M) with
    its requantisation. Each slice is that dense layer on views of the operands and the
    result (DRAM aliases, no copies), all with `schedule` (the dense layer's). Returns the
    (slices * N) x M matrix."""
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
    s = schedule
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
