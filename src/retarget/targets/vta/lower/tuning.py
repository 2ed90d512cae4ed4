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

Steps 2 and 3 are the shared tile search (targets/accel/tile_search.py: rank, judge). Choices
are cached by (layer without its name, config, vthreads), so a network repeating a layer
geometry (ResNet's blocks) pays for the search once.
"""
from __future__ import annotations

from dataclasses import replace

from ...accel.tile_search import ChoiceCache, judge, rank
from ..config import VTAConfig
from ..timing import TimingResult, simulate_timing
from .context import LoweringContext
from .layers import Conv2d, Dense, Layer, Pool2d, Requant, RequantizeLayer, ResidualAdd
from .schedule import (Schedule, candidates, conv_consts, conv_geom, dram_cost, estimate,
                       resident_consts)
from .tensor import ceil_div

# Schedules timed with the cycle model per thread count (a timing costs one scratch lowering,
# ~30 us per instruction in Python, which dominates compile time): convolutions are ranked by
# conv_cycles, which orders them well (on ResNet-18's C2..C11 its top two always hold the
# model's best 2-thread tiling); ALU layers only by their DRAM traffic, but their choices
# matter less (a few ALU passes per element whatever the tiling).
TIMED_PER_THREAD_COUNT = 2
TIMED_ALU = 1
SCREENED = 24                  # candidates ranked by conv_cycles after the closed-form screen
NEAR = 0.10                    # a thread count more than 10% worse by the estimate is not timed
_CACHE: ChoiceCache[tuple[Schedule, int]] = ChoiceCache()   # -> (schedule, its model cycles)


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
                    r_lo, r_n, ypb, ypa, rows = g.row_window(t.oh0, t.th)
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


def compute_floor(layer: Conv2d | Dense, cfg: VTAConfig) -> int:
    """Cycles no schedule of `layer` can beat on the model: the compute module's micro-op
    iterations alone (GEMM products and resets at II 1, requantisation passes at alu_ii), one
    after another. Costs nothing to evaluate, unlike model_cycles."""
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    g = conv_geom(layer, cfg)
    acc = g.nb * g.oh * g.ow * g.cob          # output vectors
    return acc * (g.cig * g.kk + 1 + _epilogue_passes(layer) * cfg.alu_ii)


def conv_cycles_lower_bound(layer: Conv2d | Dense, cfg: VTAConfig, s: Schedule) -> int:
    """Closed-form lower bound of conv_cycles: the compute module's own work (GEMM products,
    resets, requantisation passes, per-instruction costs) plus the wait for the first tile's
    first loads (less the reset that overlaps it), O(1) per schedule."""
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    g, c = conv_geom(layer, cfg), cfg
    nt, ht, wt = ceil_div(g.nb, s.tile_n), ceil_div(g.oh, s.tile_h), ceil_div(g.ow, s.tile_w)
    spans = s.tile_co > g.cog
    groups = g.cob // g.cog
    nco = ceil_div(g.cob, s.tile_co) if spans else groups * ceil_div(g.cog, s.tile_co)
    nph = 1 if spans else ceil_div(g.cig, s.tile_ci)
    items = nt * ht * wt * nco
    # the micro-op iterations (compute_floor) plus each instruction's overhead and pipeline
    compute = (compute_floor(layer, cfg) + items * (nph + 1) * (c.insn_overhead + c.gemm_pipeline)
               + _epilogue_passes(layer) * items * (c.insn_overhead + c.alu_pipeline))
    # Nothing but the first tile's reset can run before its first phase has been loaded: a
    # big first load (wide weight tiles) costs that much more on every thread count.
    from .conv import _first_tile
    t0 = _first_tile(g, s)
    reset0 = c.insn_overhead + c.gemm_pipeline + t0.tn * t0.tco * t0.th * t0.tw
    return compute + max(0, _first_load_cycles(g, cfg, t0) - reset0)


def _first_load_cycles(g, c: VTAConfig, t) -> int:
    """Load-module cycles of a tile's first phase (inputs and weights), as conv_cycles costs
    them (the bus to itself)."""
    from .conv import _window
    ovh_lat = c.insn_overhead + c.dma_latency
    _, tci, _, nci = t.phases[0]
    _, r_n, ypb, ypa, rows = g.row_window(t.oh0, t.th)
    _, c_n, xpb, xpa, cols = _window(t.ow0, t.tw, g.sw, g.kw, g.pads[1], g.w)
    eb, bus = c.inp_elem_bytes, c.bus_bytes
    if g.h * g.w == 1 and rows * cols == 1:
        inp = ovh_lat + t.tn * ceil_div(nci * eb, bus)
    elif r_n == g.h and c_n == g.w and not (ypb or ypa or xpb or xpa):
        inp = t.tn * (ovh_lat + nci * ceil_div(g.h * g.w * eb, bus))
    else:
        inp = t.tn * nci * (ovh_lat + r_n * ceil_div(c_n * eb, bus) + rows * cols - r_n * c_n)
    x = tci * g.kk
    wgt = ovh_lat + (ceil_div(x * t.tco * c.wgt_elem_bytes, bus) if x == g.cig * g.kk
                     else t.tco * ceil_div(x * c.wgt_elem_bytes, bus))
    return inp + wgt


def _screen(layer: Conv2d | Dense, cfg: VTAConfig, s: Schedule) -> float:
    """Closed-form screen: with two threads loads overlap the other thread's compute, so the
    larger of the compute bound and the bus time; with one, a thread's next load waits for
    its GEMM and the GEMM for the load, so the two mostly add up."""
    bus = estimate(layer, cfg, s).dram_bytes / cfg.bus_bytes
    lb = conv_cycles_lower_bound(layer, cfg, s)
    return lb + bus if s.vthreads == 1 else max(lb, bus)


def _ranked(layer: Layer, cfg: VTAConfig, cands: list[Schedule], keep: int) -> list:
    """The `keep` candidates of least analytic cost, as (cost, schedule). Convolutions: every
    candidate gets a closed-form screen (_screen: compute lower bound and DRAM bytes over the
    bus); conv_cycles is evaluated on the SCREENED best by that screen (the screen's order
    matches conv_cycles' well; this bounds the search for layers with hundreds of tilings)."""
    if not isinstance(layer, (Conv2d, Dense)):
        return rank(cands, lambda s: dram_cost(layer, cfg, s, estimate(layer, cfg, s)), keep)
    return rank(cands, lambda s: conv_cycles(layer, cfg, s), keep,
                screen=lambda s: _screen(layer, cfg, s), screened=SCREENED)


def _geometry_key(layer: Layer):
    """The layer without what cannot change its best schedule: its name, and requantisation
    values beyond the form that sets the ALU passes and constant vectors (shift sign per
    tensor, or per channel whether any shift is a left shift)."""
    layer = replace(layer, name="")
    if isinstance(layer, ResidualAdd):      # a shift is one ALU pass whatever its amount
        sign = lambda v: (v > 0) - (v < 0)  # noqa: E731
        return replace(layer, shift_a=sign(layer.shift_a), shift_b=sign(layer.shift_b),
                       out_shift=sign(layer.out_shift), lo=0, hi=0)
    if not isinstance(layer, (Conv2d, Dense, RequantizeLayer)):
        return layer
    r = layer.requant
    if r.per_channel:
        form = (-1 if min(r.shift) < 0 else 1,) * len(r.shift)
    else:
        form = (r.shift > 0) - (r.shift < 0)
    return replace(layer, requant=Requant(form, 0, 0))


def model_schedule(layer: Layer, cfg: VTAConfig, vthreads: int | None = None,
                   timed: int = TIMED_PER_THREAD_COUNT) -> Schedule | None:
    """The schedule of fewest model cycles among the `timed` best-ranked candidates of each
    thread count (both when vthreads is None; a thread count whose best analytic estimate is
    more than NEAR worse than the other's is not timed). None when no tiling fits. Cached by
    geometry and config."""
    best = _model_choice(layer, cfg, vthreads, timed)
    return None if best is None else best[0]


def model_cycles(layer: Layer, cfg: VTAConfig, vthreads: int | None = None) -> int | None:
    """Model cycles of `layer` lowered alone with model_schedule's choice (None when no tiling
    fits): what a lowering decision between two forms of a layer compares. Shares
    model_schedule's cache, so lowering the chosen form later costs no second search."""
    best = _model_choice(layer, cfg, vthreads, TIMED_PER_THREAD_COUNT)
    return None if best is None else best[1]


def _model_choice(layer: Layer, cfg: VTAConfig, vthreads: int | None,
                  timed: int) -> tuple[Schedule, int] | None:
    key = (_geometry_key(layer), cfg, vthreads, timed)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if not isinstance(layer, (Conv2d, Dense)):
        timed = min(timed, TIMED_ALU)
    ranked = {v: _ranked(layer, cfg, candidates(layer, cfg, v), timed)
              for v in ((1, 2) if vthreads is None else (vthreads,))}
    ranked = {v: r for v, r in ranked.items() if r}
    if not ranked:
        return None
    best_est = min(r[0][0] for r in ranked.values())
    best = None
    for v, r in ranked.items():
        if r[0][0] <= best_est * (1 + NEAR):
            best = judge(r, time=lambda s: time_schedule(layer, cfg, s).total_cycles,
                         tie=lambda s: estimate(layer, cfg, s).dram_bytes, best=best)
    return _CACHE.put(key, (best[1], best[0][0]))
