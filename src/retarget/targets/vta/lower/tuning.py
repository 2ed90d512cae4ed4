"""Schedules chosen by the cycle model (timing.py): tile sizes and 1 or 2 virtual threads.

`model_schedule(layer, cfg, vthreads=None)` is what `choose_schedule` uses when no cost
function is given:

1. Enumerate the fitting tilings (schedule.candidates) for 1 and 2 threads (or the one asked).
2. Convolutions: a closed-form screen (_screen: compute lower bound, DRAM bytes over the bus)
   keeps the SCREENED best of each thread count; `conv_cycles`, an analytic tile-level pipeline
   (load, compute and store modules in order, the emitter's token waits, per-instruction costs
   from the config as in timing.insn_cost, the bus as a lower bound), orders those, and its
   best wins (ties: fewer DRAM bytes). ALU layers: the least DRAM traffic (dram_cost).
3. Nothing is lowered to be timed, except near-ties: when several of the estimate's best are
   within CLOSE of it and each is small (JUDGED_INSNS), they are lowered into a scratch stream
   (weights only allocated) and timed with timing.simulate_timing; the fewest cycles wins.
   On every convolution of the zoo the choice is within 1 % of the best the full model finds
   among the estimate's top candidates (choice_vs_model; benchmarks/bench_vta_estimate.py at
   224, tests/targets/vta/lower/test_estimate_choice.py at test sizes). The full model stays the judge
   of the program finally emitted, and of `model_cycles`, which times the chosen schedule
   when a decision needs its cycles.

Steps 2-3 use the shared tile search (targets/accel/tile_search.py: rank, judge). Choices are
cached by (layer without its name, config, vthreads), so a network repeating a layer geometry
(ResNet's blocks) pays for the search once.
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from ...accel.tile_search import ChoiceCache, judge, rank
from ..config import VTAConfig
from ..timing import TimingResult, simulate_timing
from .context import LoweringContext
from .layers import Conv2d, Dense, Layer, Pool2d, Requant, RequantizeLayer, ResidualAdd
from .schedule import (Schedule, _axis_real, candidates, conv_consts, conv_geom, dram_cost,
                       estimate, resident_consts)
from .tensor import ceil_div
from .walk import (ChannelTile, Position, TileStep, clear_cache as clear_walk_cache,
                   conv_rounds, conv_walk, first_tile)
from .conv import _window, lower_conv2d_for_timing
from .alu_layers import lower_pool2d, lower_requantize, lower_residual_add

SCREENED = 24                  # candidates per thread count ranked by conv_cycles after the screen
# Where the estimate cannot separate the best candidates, the full model judges: the candidates
# (at most JUDGED, from the JUDGED best of each thread count) whose estimate is within CLOSE of
# the best, when there are several and each is cheap to time (at most JUDGED_INSNS
# instructions by the estimate). The estimate's blind spots (the shared bus, fetch stalls
# behind full command queues) are worth a few per cent at most, so they only matter there.
CLOSE = 0.02
JUDGED = 4
JUDGED_INSNS = 512
_CACHE: ChoiceCache[Schedule | None] = ChoiceCache()     # geometry key -> chosen schedule
_CYCLES: ChoiceCache[int] = ChoiceCache()               # geometry key -> model cycles of it


def clear_cache() -> None:
    """Forget cached choices and the memo of the search's arithmetic (for measuring the
    search itself as a fresh process runs it)."""
    _CACHE.clear()
    _CYCLES.clear()
    _axis_real.cache_clear()
    clear_walk_cache()


def searched_layers() -> list[tuple[Layer, VTAConfig, int | None]]:
    """(layer geometry, config, vthreads asked) of every choice made since the cache was last
    cleared (a geometry is the layer without its name: see _geometry_key)."""
    return list(_CACHE.keys())


# ---- the analytic ranking ---------------------------------------------------------------------
class _TileCosts(NamedTuple):
    """What a conv tile costs beyond its loads, by its shape alone (conv_cycles)."""
    gemm: int              # kernels * (overhead + GEMM pipeline) per phase
    reset: int             # cycles of the accumulator reset
    epilogue: int          # cycles of the requantisation ALU passes
    store_cycles: int      # its stores: cycles on the store module
    store_beats: int       # and bus beats
    const_cycles: int      # its bias / requant load (0 when the constants are resident)
    const_beats: int
    work: int              # tn * positions * tco * kernel taps (GEMM iterations per input block)


def _epilogue_passes(layer: Conv2d) -> int:
    """ALU passes over each accumulator of a tile (alu.emit_requant with vectors and the
    rounding constant folded into the bias)."""
    r = layer.requant
    if r.per_channel:
        return 1 + 1 + (2 if min(r.shift) < 0 else 0) + 2
    shift = 1 if r.shift > 0 else (3 if r.shift < 0 else 0)
    return 1 + shift + 2


def conv_cycles(layer: Conv2d | Dense, cfg: VTAConfig, s: Schedule) -> int:
    """Analytic cycles of a conv/dense schedule: the tile walk (walk.conv_walk, what the emitter
    emits) through three in-order modules with the emitter's token waits, each step costed like
    timing.insn_cost; the shared bus only as a lower bound. Micro-op loads are ignored. For
    ranking, not reporting."""
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    g, c = conv_geom(layer, cfg), cfg
    nconst = conv_consts(layer)
    resident = resident_consts(g, cfg, nconst) > 0
    ovh, lat, bus = c.insn_overhead, c.dma_latency, c.bus_bytes
    # config properties are computed on each access: read them once (this loop runs per tile)
    inp_eb, wgt_eb, acc_eb, out_eb = (c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes,
                                      c.out_elem_bytes)
    gemm_pipe, alu_pipe, alu_ii = c.gemm_pipeline, c.alu_pipeline, c.alu_ii
    depth = max(1, c.cmd_queue_depth)
    kk, cig_kk = g.kk, g.cig * g.kk
    passes = _epilogue_passes(layer)
    hw = g.h * g.w

    def dma(rows: int, row_elems: int, elem_bytes: int, pad: int = 0) -> tuple[int, int]:
        beats = rows * ceil_div(row_elems * elem_bytes, bus)
        return ovh + lat + beats + pad, beats

    def input_loads(t: Position, nci: int) -> tuple[int, int, int]:
        """(cycles, beats) of each input LOAD of a tile phase, and how many there are."""
        r_lo, r_n, ypb, ypa, rows = g.row_window(t.oh0, t.th)
        c_lo, c_n, xpb, xpa, cols = _window(t.ow0, t.tw, g.sw, g.kw, g.pads[1], g.w)
        if hw == 1 and rows * cols == 1:
            return dma(t.tn, nci, inp_eb) + (1,)
        if r_n == g.h and c_n == g.w and not (ypb or ypa or xpb or xpa):
            return dma(nci, hw, inp_eb) + (t.tn,)
        return dma(r_n, c_n, inp_eb, rows * cols - r_n * c_n) + (t.tn * nci,)

    def store_cost(tn: int, th: int, tw: int, tco: int) -> tuple[int, int]:
        npos, opos = th * tw, g.oh * g.ow
        if opos == 1:
            return dma(tn, tco, out_eb)
        if npos == opos:
            d, b = dma(tco, opos, out_eb)
            return d * tn, b * tn
        d, b = dma(th, tw, out_eb)
        return d * tn * tco, b * tn * tco

    # The walk repeats positions' input windows (one per channel tile), weight transfers and
    # tile shapes: each is costed once. (cycles, beats, count) by (position, nci); (cycles,
    # beats) by (tci, tco); _TileCosts by (tn, th, tw, tco).
    inp_loads: dict[tuple, tuple[int, int, int]] = {}
    wgt_loads: dict[tuple, tuple[int, int]] = {}
    shapes: dict[tuple, _TileCosts] = {}

    def inp_load(pos: Position, nci: int) -> tuple[int, int, int]:
        il = inp_loads.get((pos, nci))
        if il is None:
            il = inp_loads[pos, nci] = input_loads(pos, nci)
        return il

    def wgt_load(tci: int, tco: int) -> tuple[int, int]:
        wl = wgt_loads.get((tci, tco))
        if wl is None:
            x = tci * kk
            wl = wgt_loads[tci, tco] = (dma(1, x * tco, wgt_eb) if x == cig_kk
                                        else dma(tco, x, wgt_eb))
        return wl

    def tile_costs(t: TileStep) -> _TileCosts:
        pos, tco = t.pos, t.cout.tco
        key = (pos.tn, pos.th, pos.tw, tco)
        sh = shapes.get(key)
        if sh is None:
            tn, th, tw, _ = key
            npos = th * tw
            n_acc = tn * tco * npos
            kernels = 1 if npos == 1 else tn
            const = (0, 0) if resident else dma(1, tco * nconst, acc_eb)
            sh = shapes[key] = _TileCosts(kernels * (ovh + gemm_pipe), ovh + gemm_pipe + n_acc,
                                          passes * (ovh + alu_pipe + n_acc * alu_ii),
                                          *store_cost(tn, th, tw, tco), *const,
                                          tn * npos * tco * kk)
        return sh

    v = s.vthreads
    t_load = t_comp = t_store = t_alu = 0
    alu_stage = c.alu_stage
    bus_beats = 0
    if resident:
        d, b = dma(1, g.cob * nconst, acc_eb)
        t_comp, bus_beats = d, b
    if v == 1:
        return _one_thread(conv_walk(g, s), t_comp, bus_beats, alu_stage, depth, inp_load,
                           wgt_load, shapes, tile_costs)
    gemm_done, store_done = [0] * v, [0] * v
    for rnd in conv_rounds(g, s):
        # per tile of the round: (thread, position, output blocks, phase steps, costs), read
        # into locals (as PhaseStep's fields below): this loop runs per phase of every tile of
        # every two-thread candidate the search ranks, and attribute reads cost it a sixth more
        tiles = [(t.thread, t.pos, t.cout.tco, t.steps,
                  shapes.get((t.pos.tn, t.pos.th, t.pos.tw, t.cout.tco)) or tile_costs(t))
                 for t in rnd]                # tile_costs, inlined
        for p in range(len(rnd[0].steps)):
            ready = [0] * v
            runs = []      # this phase's loads in stream order: (first start, cost each, count)
            nloads = 0
            for th, pos, tco, steps, _ in tiles:
                ph, _, _, load_input, load_weights = steps[p]
                if not (load_input or load_weights):
                    continue
                if gemm_done[th] > t_load:
                    t_load = gemm_done[th]
                if load_input:
                    d, b, count = inp_load(pos, ph.nci)
                    runs.append((t_load, d, count))
                    nloads += count
                    t_load, bus_beats = t_load + d * count, bus_beats + b * count
                if load_weights:
                    d, b = wgt_load(ph.tci, tco)
                    runs.append((t_load, d, 1))
                    nloads += 1
                    t_load, bus_beats = t_load + d, bus_beats + b
                ready[th] = t_load
            # In-order fetch: the compute instructions after these loads are dispatched only
            # once the load module's command queue has room for the last of them, i.e. once
            # the load `depth` places earlier has started (as timing.py dispatches).
            gate, m = 0, nloads - 1 - depth
            if m >= 0:
                for start, d, count in runs:
                    if m < count:
                        gate = start + d * m
                        break
                    m -= count
            for th, _, _, steps, sh in tiles:
                ph, index, last, _, _ = steps[p]
                if index == 0:
                    t_comp = max(t_comp, store_done[th], gate) + sh.reset + sh.const_cycles
                    bus_beats += sh.const_beats
                t_comp = max(t_comp, ready[th], gate) + sh.gemm + sh.work * ph.tci
                gemm_done[th] = t_comp
                if alu_stage and last:
                    # the ALU stage: this tile's epilogue on its own module, then its store
                    t_alu = max(t_alu, t_comp) + sh.epilogue
                    t_store = max(t_store, t_alu) + sh.store_cycles
                    bus_beats += sh.store_beats
                    store_done[th] = t_store
        if alu_stage:
            continue
        epi_done = [0] * v
        for th, _, _, _, sh in tiles:
            t_comp += sh.epilogue
            epi_done[th] = t_comp
        for th, _, _, _, sh in tiles:
            t_store = max(t_store, epi_done[th]) + sh.store_cycles
            bus_beats += sh.store_beats
            store_done[th] = t_store
    return max(t_comp, t_alu, t_store, bus_beats)


def _one_thread(walk, t_comp, bus_beats, alu_stage, depth, inp_load, wgt_load, shapes,
                tile_costs) -> int:
    """conv_cycles' loop for one virtual thread (most candidates): the same steps with the
    per-thread lists and the round of one taken out."""
    t_load = t_store = t_alu = 0
    gemm_done = store_done = 0
    for t in walk:
        pos, tco = t.pos, t.cout.tco
        sh = shapes.get((pos.tn, pos.th, pos.tw, tco)) or tile_costs(t)    # tile_costs, inlined
        gemm, reset, epilogue, store_cycles, store_beats, const_cycles, const_beats, work = sh
        # unpacked rather than read by attribute (PhaseStep's and _TileCosts' fields, in
        # order): this loop runs per phase of every tile of every candidate the search ranks
        for ph, index, last, load_input, load_weights in t.steps:
            ready = gate = 0
            if load_input or load_weights:
                if gemm_done > t_load:
                    t_load = gemm_done
                loads = 0                    # LOADs queued so far in this phase
                first_start = first_d = first_n = None
                if load_input:
                    d, b, count = inp_load(pos, ph.nci)
                    first_start, first_d, first_n = t_load, d, count
                    loads = count
                    t_load, bus_beats = t_load + d * count, bus_beats + b * count
                if load_weights:
                    d, b = wgt_load(ph.tci, tco)
                    w_start = t_load
                    loads += 1
                    t_load, bus_beats = t_load + d, bus_beats + b
                ready = t_load
                # In-order fetch (as in conv_cycles): compute waits until the LOAD `depth`
                # places before this phase's last one has started.
                m = loads - 1 - depth
                if m >= 0:
                    if first_n is not None and m < first_n:
                        gate = first_start + first_d * m
                    else:
                        m -= first_n or 0
                        if load_weights and m < 1:
                            gate = w_start
            if index == 0:
                t_comp = max(t_comp, store_done, gate) + reset + const_cycles
                bus_beats += const_beats
            t_comp = max(t_comp, ready, gate) + gemm + work * ph.tci
            gemm_done = t_comp
            if alu_stage and last:
                t_alu = max(t_alu, t_comp) + epilogue
                t_store = max(t_store, t_alu) + store_cycles
                bus_beats += store_beats
                store_done = t_store
        if alu_stage:
            continue
        t_comp += epilogue
        t_store = max(t_store, t_comp) + store_cycles
        bus_beats += store_beats
        store_done = t_store
    return max(t_comp, t_alu, t_store, bus_beats)


# ---- timing a candidate on the cycle model ---------------------------------------------------
def lower_for_timing(layer: Layer, cfg: VTAConfig, s: Schedule):
    """`layer` alone, lowered with schedule `s` into a scratch stream (inputs allocated, no
    data; weights and bias vectors only allocated, not packed): (context, output tensor)."""
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
    if cfg.alu_stage:                         # GEMM and ALU on separate modules
        return acc * max(g.cig * g.kk + 1, _epilogue_passes(layer) * cfg.alu_ii)
    return acc * (g.cig * g.kk + 1 + _epilogue_passes(layer) * cfg.alu_ii)


def conv_cycles_lower_bound(layer: Conv2d | Dense, cfg: VTAConfig, s: Schedule) -> int:
    """Closed-form lower bound of conv_cycles: the compute module's own work (GEMM products,
    resets, requantisation passes, per-instruction costs) plus the wait for the first tile's
    first loads (less the reset that overlaps it), O(1) per schedule."""
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    return _lower_bound(conv_geom(layer, cfg), cfg, s, _epilogue_passes(layer),
                        compute_floor(layer, cfg))


def _lower_bound(g, c: VTAConfig, s: Schedule, passes: int, floor: int) -> int:
    """conv_cycles_lower_bound with the layer's geometry `g`, epilogue passes and
    compute_floor given (they depend on the layer alone)."""
    nt, ht, wt = ceil_div(g.nb, s.tile_n), ceil_div(g.oh, s.tile_h), ceil_div(g.ow, s.tile_w)
    spans = s.tile_co > g.cog
    groups = g.cob // g.cog
    nco = ceil_div(g.cob, s.tile_co) if spans else groups * ceil_div(g.cog, s.tile_co)
    nph = 1 if spans else ceil_div(g.cig, s.tile_ci)
    items = nt * ht * wt * nco
    # the micro-op iterations (compute_floor) plus each instruction's overhead and pipeline
    if c.alu_stage:      # the GEMM module and the ALU module, each on its own
        acc = g.nb * g.oh * g.ow * g.cob
        compute = max(acc * (g.cig * g.kk + 1)
                      + items * (nph + 1) * (c.insn_overhead + c.gemm_pipeline),
                      passes * (acc * c.alu_ii + items * (c.insn_overhead + c.alu_pipeline)))
    else:
        compute = (floor
                   + items * (nph + 1) * (c.insn_overhead + c.gemm_pipeline)
                   + passes * items * (c.insn_overhead + c.alu_pipeline))
    # Nothing but the first tile's reset can run before its first phase has been loaded: a
    # big first load (wide weight tiles) costs that much more on every thread count.
    pos, cout = first_tile(g, s)
    reset0 = c.insn_overhead + c.gemm_pipeline + pos.tn * cout.tco * pos.th * pos.tw
    return compute + max(0, _first_load_cycles(g, c, pos, cout) - reset0)


def _first_load_cycles(g, c: VTAConfig, t: Position, cout: ChannelTile) -> int:
    """Load-module cycles of a tile's first phase (inputs and weights), as conv_cycles costs
    them (the bus to itself)."""
    ovh_lat = c.insn_overhead + c.dma_latency
    tci, nci, tco = cout.phases[0].tci, cout.phases[0].nci, cout.tco
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
    wgt = ovh_lat + (ceil_div(x * tco * c.wgt_elem_bytes, bus) if x == g.cig * g.kk
                     else tco * ceil_div(x * c.wgt_elem_bytes, bus))
    return inp + wgt


def _screen(layer: Conv2d | Dense, cfg: VTAConfig, s: Schedule) -> float:
    """Closed-form screen: with two threads loads overlap the other thread's compute, so the
    larger of the compute bound and the bus time; with one, a thread's next load waits for
    its GEMM and the GEMM for the load, so the two mostly add up."""
    return _screener(layer, cfg)(s)


def _screener(layer: Conv2d | Dense, cfg: VTAConfig):
    """_screen(layer, cfg, .) as a function of the schedule, with what depends on the layer
    alone computed once and estimate_conv's DRAM bytes, _lower_bound and _first_load_cycles
    inlined (the same integer arithmetic; the screen runs on every candidate)."""
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    g, c, nconst = conv_geom(layer, cfg), cfg, conv_consts(layer)
    passes, floor, bus = _epilogue_passes(layer), compute_floor(layer, cfg), cfg.bus_bytes
    nb, cib, cob, cig, cog, kk = g.nb, g.cib, g.cob, g.cig, g.cog, g.kk
    oh, ow, h, w, kh, kw, sh, sw, pads = g.oh, g.ow, g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.pads
    skip_rows, row_window = g.skip_rows, g.row_window
    groups = cob // cog
    inp_eb, wgt_eb = c.inp_elem_bytes, c.wgt_elem_bytes
    # estimate_conv's terms that do not depend on the schedule
    wtot = cob * cig * kk * wgt_eb
    out = nb * cob * oh * ow * c.out_elem_bytes
    const_once = resident_consts(g, cfg, nconst) > 0
    const_bytes = cob * nconst * c.acc_elem_bytes
    # _lower_bound's
    ovh, gemm_pipe, alu_pipe, alu_ii = c.insn_overhead, c.gemm_pipeline, c.alu_pipeline, c.alu_ii
    alu_stage = c.alu_stage
    acc_all = nb * oh * ow * cob
    ovh_lat = ovh + c.dma_latency
    hw1 = h * w == 1
    whole_in = ceil_div(h * w * inp_eb, bus)
    cig_kk = cig * kk

    def screen(s: Schedule) -> float:
        v, tn_, th_, tw_, tco_, tci_ = (s.vthreads, s.tile_n, s.tile_h, s.tile_w, s.tile_co,
                                        s.tile_ci)
        sp = ceil_div(nb, tn_) * ceil_div(oh, th_) * ceil_div(ow, tw_)
        spans = tco_ > cog
        nco = ceil_div(cob, tco_) if spans else groups * ceil_div(cog, tco_)
        nph = 1 if spans else ceil_div(cig, tci_)
        # estimate_conv(...).dram_bytes
        rows = oh if skip_rows else _axis_real(h, oh, th_, kh, sh, pads[0])
        cols = _axis_real(w, ow, tw_, kw, sw, pads[1])
        per_block = rows * cols * nb * inp_eb
        if groups == 1 and nph == 1:
            inp = per_block * cib * min(v, nco)
        else:
            inp = per_block * cig * nco if not spans else per_block * cib
        wgt = wtot * (min(v, sp) if nco == 1 and nph == 1 else sp)
        consts = (1 if const_once else sp) * const_bytes
        dram = (inp + wgt + out + consts) / bus
        # _lower_bound
        items = sp * nco
        if alu_stage:
            compute = max(acc_all * (cig_kk + 1) + items * (nph + 1) * (ovh + gemm_pipe),
                          passes * (acc_all * alu_ii + items * (ovh + alu_pipe)))
        else:
            compute = (floor + items * (nph + 1) * (ovh + gemm_pipe)
                       + passes * items * (ovh + alu_pipe))
        # the first tile (walk.first_tile) and its first phase's loads
        tn, th, tw = min(tn_, nb), min(th_, oh), min(tw_, ow)
        if spans:
            tco = min(tco_, cob)
            tci = cig
            nci = ((tco - 1) // cog + 1) * cig
        else:
            tco = min(tco_, cog)
            tci = nci = min(tci_, cig)
        reset0 = ovh + gemm_pipe + tn * tco * th * tw
        _, r_n, ypb, ypa, trows = row_window(0, th)
        _, c_n, xpb, xpa, tcols = _window(0, tw, sw, kw, pads[1], w)
        if hw1 and trows * tcols == 1:
            ld = ovh_lat + tn * ceil_div(nci * inp_eb, bus)
        elif r_n == h and c_n == w and not (ypb or ypa or xpb or xpa):
            ld = tn * (ovh_lat + nci * whole_in)
        else:
            ld = tn * nci * (ovh_lat + r_n * ceil_div(c_n * inp_eb, bus) + trows * tcols
                             - r_n * c_n)
        x = tci * kk
        ld += ovh_lat + (ceil_div(x * tco * wgt_eb, bus) if x == cig_kk
                         else tco * ceil_div(x * wgt_eb, bus))
        lb = compute + max(0, ld - reset0)
        return lb + dram if v == 1 else max(lb, dram)
    return screen


def _ranked(layer: Layer, cfg: VTAConfig, cands: list[Schedule], keep: int) -> list:
    """The `keep` candidates of least analytic cost, as (cost, schedule). Convolutions:
    every candidate gets a closed-form screen (_screen); conv_cycles is evaluated on the SCREENED
    best by the screen (the screen's order matches conv_cycles' well; this bounds the search for
    layers with hundreds of tilings)."""
    if not isinstance(layer, (Conv2d, Dense)):
        return rank(cands, lambda s: dram_cost(layer, cfg, s, estimate(layer, cfg, s)), keep)
    return rank(cands, lambda s: conv_cycles(layer, cfg, s), keep,
                screen=_screener(layer, cfg), screened=SCREENED)


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


def model_schedule(layer: Layer, cfg: VTAConfig, vthreads: int | None = None) -> Schedule | None:
    """The schedule the analytic ranking puts first over the thread counts asked (both when
    vthreads is None; ties go to fewer DRAM bytes). None when no tiling fits. Cached by geometry
    and config."""
    key = (_geometry_key(layer), cfg, vthreads)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    conv = isinstance(layer, (Conv2d, Dense))
    ranked = [_ranked(layer, cfg, candidates(layer, cfg, v), JUDGED if conv else 1)
              for v in ((1, 2) if vthreads is None else (vthreads,))]
    ranked = [(cost, s) for r in ranked for cost, s in r]
    if not ranked:
        return None
    tie = lambda s: estimate(layer, cfg, s).dram_bytes  # noqa: E731
    ranked.sort(key=lambda r: (r[0], tie(r[1])))
    first = ranked[0][1]
    close = [r for r in ranked[:JUDGED] if r[0] <= ranked[0][0] * (1 + CLOSE)]
    if conv and len(close) > 1 and \
            all(estimate(layer, cfg, s).instructions <= JUDGED_INSNS for _, s in close):
        first = judge(close, time=lambda s: time_schedule(layer, cfg, s).total_cycles,
                      tie=tie)[1]
    return _CACHE.put(key, first)


def model_cycles(layer: Layer, cfg: VTAConfig, vthreads: int | None = None) -> int | None:
    """Cycles of `layer` lowered alone with model_schedule's choice, on the full cycle model
    (None when no tiling fits): what a lowering decision between two forms of a layer compares.
    Cached like the choice, so each geometry is timed once."""
    key = (_geometry_key(layer), cfg, vthreads)
    hit = _CYCLES.get(key)
    if hit is not None:
        return hit
    s = model_schedule(layer, cfg, vthreads)
    if s is None:
        return None
    return _CYCLES.put(key, time_schedule(layer, cfg, s).total_cycles)


def choice_vs_model(layer: Layer, cfg: VTAConfig, pool: int = 12) -> tuple[float, int]:
    """How close model_schedule's choice comes to the full model's best: (model cycles of the
    choice / least model cycles in the pool, pool size). The pool is every candidate when a
    thread count has at most 2 * `pool`, else the `pool` best by conv_cycles per thread count,
    plus the choice. Costs one timing per pooled candidate: for checking the estimate (tests,
    benchmarks/bench_vta_estimate.py), not for compiling."""
    cands: set[Schedule] = set()
    for v in (1, 2):
        c = candidates(layer, cfg, v)
        cands.update(c if len(c) <= 2 * pool
                     else sorted(c, key=lambda s: conv_cycles(layer, cfg, s))[:pool])
    chosen = model_schedule(layer, cfg)
    cands.add(chosen)
    model = {s: time_schedule(layer, cfg, s).total_cycles for s in cands}
    return model[chosen] / min(model.values()), len(cands)
