"""Schedules chosen by the cycle model (timing.py): tile sizes and 1 or 2 virtual threads.

`model_schedule(layer, cfg, vthreads=None)` is what `choose_schedule` uses when no cost
function is given:

1. Enumerate the fitting tilings (schedule.candidates) for 1 and 2 threads (or the one asked).
2. Rank them cheaply: convolutions by `conv_cycles`, an analytic tile-level pipeline (load,
   compute and store modules in order, the emitter's token waits, per-instruction costs from
   the config as in timing.insn_cost, the bus as a lower bound); ALU layers by dram_cost.
3. Lower the best few of each thread count into a scratch stream (no weights are packed: the
   constant buffers are only allocated) and time them with timing.simulate_timing. The fewest
   cycles wins; ties go to fewer DRAM bytes.

Choices are cached by (layer without its name, config, vthreads), so a network repeating a
layer geometry (ResNet's blocks) pays for the search once.
"""
from __future__ import annotations

from dataclasses import replace

from ..config import VTAConfig
from ..timing import TimingResult, simulate_timing
from .context import LoweringContext
from .layers import Conv2d, Dense, Layer, Pool2d, ResidualAdd, RequantizeLayer
from .schedule import (Schedule, candidates, conv_consts, conv_geom, dram_cost, estimate,
                       resident_consts)
from .tensor import ceil_div

TIMED_PER_THREAD_COUNT = 3     # schedules timed with the cycle model per thread count
_CACHE: dict[tuple, Schedule] = {}
_CACHE_LIMIT = 4096


def clear_cache() -> None:
    """Forget cached choices (for measuring the search itself)."""
    _CACHE.clear()


# ---- the analytic ranking ---------------------------------------------------------------------
def _epilogue_passes(layer: Conv2d) -> int:
    """ALU passes over each accumulator of a tile (alu.emit_requant with vectors and the
    rounding constant folded into the bias)."""
    r = layer.requant
    if r.per_channel:
        return 1 + 1 + (2 if min(r.shift) < 0 else 0) + 2
    shift = 1 if r.shift > 0 else (3 if r.shift < 0 else 0)
    return 1 + shift + 2


def conv_cycles(layer: Conv2d | Dense, cfg: VTAConfig, s: Schedule) -> int:
    """Analytic cycles of a conv/dense schedule: the emitter's (tile, phase) sequence through
    three in-order modules with its token waits, each step costed like timing.insn_cost; the
    shared bus only as a lower bound. Micro-op loads are ignored. For ranking, not reporting."""
    from .conv import _tiles, _window   # conv imports schedule; this module is imported lazily
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    g, c = conv_geom(layer, cfg), cfg
    nconst = conv_consts(layer)
    resident = resident_consts(g, cfg, nconst) > 0
    ovh, lat, bus = c.insn_overhead, c.dma_latency, c.bus_bytes
    passes = _epilogue_passes(layer)

    def dma(rows: int, row_elems: int, elem_bytes: int, pad: int = 0) -> tuple[int, int]:
        beats = rows * ceil_div(row_elems * elem_bytes, bus)
        return ovh + lat + beats + pad, beats

    tiles, v = _tiles(g, s), s.vthreads
    hw = g.h * g.w
    t_load = t_comp = t_store = 0
    bus_beats = 0
    gemm_done, store_done = [0] * v, [0] * v
    resident_keys = [(None, None)] * v
    if resident:
        d, b = dma(1, g.cob * nconst, c.acc_elem_bytes)
        t_comp, bus_beats = d, b
    for first in range(0, len(tiles), v):
        group = list(enumerate(tiles[first:first + v]))
        for p in range(len(group[0][1].phases)):
            ready = [0] * v
            for th, t in group:
                _, tci, ci0, nci = t.phases[p]
                ik = (t.n0, t.tn, t.oh0, t.th, t.ow0, t.tw, ci0, nci)
                wk = (t.c0, t.tco, t.phases[p][0], tci)
                need_i, need_w = ik != resident_keys[th][0], wk != resident_keys[th][1]
                resident_keys[th] = (ik, wk)
                cost = 0
                if need_i:
                    r_lo, r_n, ypb, ypa, rows = _window(t.oh0, t.th, g.sh, g.kh, g.pads[0], g.h)
                    c_lo, c_n, xpb, xpa, cols = _window(t.ow0, t.tw, g.sw, g.kw, g.pads[1], g.w)
                    if hw == 1 and rows * cols == 1:
                        d, b = dma(t.tn, nci, c.inp_elem_bytes)
                    elif r_n == g.h and c_n == g.w and not (ypb or ypa or xpb or xpa):
                        d, b = dma(nci, hw, c.inp_elem_bytes)
                        d, b = d * t.tn, b * t.tn
                    else:
                        d, b = dma(r_n, c_n, c.inp_elem_bytes, rows * cols - r_n * c_n)
                        d, b = d * t.tn * nci, b * t.tn * nci
                    cost, bus_beats = cost + d, bus_beats + b
                if need_w:
                    x = tci * g.kk
                    d, b = (dma(1, x * t.tco, c.wgt_elem_bytes) if x == g.cig * g.kk
                            else dma(t.tco, x, c.wgt_elem_bytes))
                    cost, bus_beats = cost + d, bus_beats + b
                if cost:
                    t_load = max(t_load, gemm_done[th]) + cost
                    ready[th] = t_load
            for th, t in group:
                _, tci, _, _ = t.phases[p]
                npos = t.th * t.tw
                if p == 0:
                    n_acc = t.tn * t.tco * npos
                    t_comp = max(t_comp, store_done[th]) + ovh + c.gemm_pipeline + n_acc
                    if not resident:
                        d, b = dma(1, t.tco * nconst, c.acc_elem_bytes)
                        t_comp, bus_beats = t_comp + d, bus_beats + b
                kernels = 1 if npos == 1 else t.tn
                work = t.tn * npos * t.tco * tci * g.kk
                t_comp = max(t_comp, ready[th]) + kernels * (ovh + c.gemm_pipeline) + work
                gemm_done[th] = t_comp
        epi_done = [0] * v
        for th, t in group:
            n_acc = t.tn * t.tco * t.th * t.tw
            t_comp += passes * (ovh + c.alu_pipeline + n_acc * c.alu_ii)
            epi_done[th] = t_comp
        for th, t in group:
            npos, opos = t.th * t.tw, g.oh * g.ow
            if opos == 1:
                d, b = dma(t.tn, t.tco, c.out_elem_bytes)
            elif npos == opos:
                d, b = dma(t.tco, opos, c.out_elem_bytes)
                d, b = d * t.tn, b * t.tn
            else:
                d, b = dma(t.th, t.tw, c.out_elem_bytes)
                d, b = d * t.tn * t.tco, b * t.tn * t.tco
            t_store = max(t_store, epi_done[th]) + d
            bus_beats += b
            store_done[th] = t_store
    return max(t_comp, t_store, bus_beats)


# ---- timing a candidate on the cycle model ---------------------------------------------------
def lower_for_timing(layer: Layer, cfg: VTAConfig, s: Schedule):
    """`layer` alone, lowered with schedule `s` into a scratch stream (inputs allocated, no
    data; weights and bias vectors only allocated, not packed): (context, output tensor)."""
    from .alu_layers import lower_pool2d, lower_requantize, lower_residual_add
    from .conv import lower_conv2d_for_timing
    ctx = LoweringContext(cfg)
    if isinstance(layer, (Conv2d, Dense)):
        conv = layer.as_conv() if isinstance(layer, Dense) else layer
        x = ctx.input("x", conv.in_shape)
        y = lower_conv2d_for_timing(ctx, conv, x, s)
    elif isinstance(layer, Pool2d):
        y = lower_pool2d(ctx, layer, ctx.input("x", layer.in_shape), schedule=s)
    elif isinstance(layer, ResidualAdd):
        a, b = ctx.input("a", layer.shape), ctx.input("b", layer.shape)
        y = lower_residual_add(ctx, layer, a, b, schedule=s)
    elif isinstance(layer, RequantizeLayer):
        y = lower_requantize(ctx, layer, ctx.input("x", layer.shape, layer.in_dtype), schedule=s)
    else:
        raise TypeError(f"no lowering for {type(layer).__name__}")
    return ctx, y


def time_schedule(layer: Layer, cfg: VTAConfig, s: Schedule) -> TimingResult:
    """The cycle model's answer for `layer` lowered alone with schedule `s`."""
    ctx, y = lower_for_timing(layer, cfg, s)
    return simulate_timing(ctx.finish([y]).program)


def model_cost(layer: Layer, cfg: VTAConfig, s: Schedule, e=None) -> float:
    """A CostFn (schedule.choose_schedule's `cost`) that times each candidate: exact but
    costs one scratch lowering and one timing run per candidate."""
    return float(time_schedule(layer, cfg, s).total_cycles)


def _rank_key(layer: Layer, cfg: VTAConfig, s: Schedule) -> float:
    if isinstance(layer, (Conv2d, Dense)):
        return conv_cycles(layer, cfg, s)
    return dram_cost(layer, cfg, s, estimate(layer, cfg, s))


def model_schedule(layer: Layer, cfg: VTAConfig, vthreads: int | None = None,
                   timed: int = TIMED_PER_THREAD_COUNT) -> Schedule | None:
    """The schedule of fewest model cycles among the `timed` best-ranked candidates of each
    thread count (both when vthreads is None). None when no tiling fits. Cached."""
    key = (replace(layer, name=""), cfg, vthreads, timed)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    best = None
    for v in ((1, 2) if vthreads is None else (vthreads,)):
        cands = candidates(layer, cfg, v)
        cands.sort(key=lambda s: _rank_key(layer, cfg, s))
        for s in cands[:timed]:
            cyc = time_schedule(layer, cfg, s).total_cycles
            tie = estimate(layer, cfg, s).dram_bytes
            if best is None or (cyc, tie) < best[0]:
                best = ((cyc, tie), s)
    if best is None:
        return None
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = best[1]
    return best[1]
