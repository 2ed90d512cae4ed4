"""Schedules: how a layer is cut into tiles that fit the SRAMs of the config in use, and the
candidates a chooser picks from.

A `Schedule` gives tile sizes over batch blocks (tile_n), output rows (tile_h), output columns
(tile_w), output channel blocks (tile_co) and input channel blocks (tile_ci, the reduction),
plus 1 or 2 virtual threads. With 2 threads every SRAM (INP, WGT, ACC) is split in halves and
consecutive tiles alternate between them, so loads for one tile overlap compute on the other.

`candidates` enumerates tilings that fit (for each channel/column choice, the most rows that
fit, then balanced). `choose.choose_schedule(layer, cfg, vthreads=None, cost=None)` lets the
cycle model pick among them, thread count included (tuning.py); given a `cost`, it returns the
candidate of least `cost(layer, cfg, schedule, estimate)`, e.g. `dram_cost`, an estimate of
DMA cycles: bytes over the bus plus a fixed latency per instruction.
Nothing here is specific to one config: every limit comes from VTAConfig's depths.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ....errors import TargetError
from ..config import VTAConfig
from .layers import Conv2d, Dense, Layer, Pool2d, RequantizeLayer, ResidualAdd, conv_groups, reason
from .tensor import ceil_div


@dataclass(frozen=True, slots=True)
class Schedule:
    tile_n: int = 1
    tile_h: int = 1
    tile_w: int = 1
    tile_co: int = 1
    tile_ci: int = 1
    vthreads: int = 1


@dataclass(frozen=True, slots=True)
class Estimate:
    """Analytic estimate of a schedule's DRAM traffic (bytes) and instruction count."""
    dram_bytes: int
    instructions: int
    tiles: int


CostFn = Callable[[Layer, VTAConfig, Schedule, Estimate], float]


def dram_cost(layer: Layer, cfg: VTAConfig, s: Schedule, e: Estimate) -> float:
    """Default cost: bus cycles for the traffic plus one DMA latency per instruction."""
    return e.dram_bytes / cfg.bus_bytes + e.instructions * max(cfg.dma_latency, 1)


# ---- convolution geometry -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConvGeom:
    """A conv (or pool) in units of SRAM elements."""
    nb: int          # batch blocks
    cib: int         # input channel blocks
    cob: int         # output channel blocks
    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    pads: tuple[int, int, int, int]
    cig: int = 1     # input blocks per group (the reduction length per output block)
    cog: int = 1     # output blocks per group
    diag: bool = False
    merged: int = 1  # groups run together as one, block-diagonal (layers.conv_groups)
    # A one-row kernel with a row stride reads only every sh-th input row: the LOAD skips the
    # others (DRAM row stride sh*w) and the tile holds one input row per output row.
    skip_rows: bool = False

    @property
    def kk(self) -> int:
        return self.kh * self.kw

    @property
    def row_pitch(self) -> int:
        """Input-tile rows between consecutive output rows."""
        return 1 if self.skip_rows else self.sh

    def in_rows(self, th: int) -> int:
        return th if self.skip_rows else (th - 1) * self.sh + self.kh

    def row_window(self, oh0: int, th: int):
        """(first real input row, real rows, pad before, pad after, tile rows) of an output
        row range, like conv._window; with skip_rows the rows are every sh-th one."""
        if self.skip_rows:
            return oh0 * self.sh, th, 0, 0, th
        r0 = oh0 * self.sh - self.pads[0]
        r1 = r0 + (th - 1) * self.sh + self.kh
        lo, hi = max(r0, 0), min(r1, self.h)
        return lo, hi - lo, lo - r0, r1 - hi, r1 - r0

    def in_cols(self, tw: int) -> int:
        return (tw - 1) * self.sw + self.kw


def conv_geom(layer: Conv2d | Pool2d, cfg: VTAConfig) -> ConvGeom:
    n, c, h, w = layer.in_shape
    oh, ow = layer.out_hw
    nb = ceil_div(n, cfg.batch)
    if isinstance(layer, Pool2d):
        cb = ceil_div(c, cfg.block_out)
        return ConvGeom(nb, cb, cb, h, w, oh, ow, *layer.kernel, *layer.stride, layer.pads)
    groups = conv_groups(layer, cfg)
    if isinstance(groups, str):
        raise TargetError(f"{layer.op} '{layer.name}': {groups}")
    cig, cog, diag, merged = groups
    cib, cob = ceil_div(c, cfg.block_in), ceil_div(layer.out_channels, cfg.block_out)
    kh, sh = layer.kernel[0], layer.stride[0]
    return ConvGeom(nb, cib, cob, h, w, oh, ow, *layer.kernel, *layer.stride, layer.pads,
                    cig, cog, diag, merged, skip_rows=kh == 1 and sh > 1 and h > 1)


def conv_consts(layer: Conv2d) -> int:
    """ACC vectors per output block: bias (+ rounding), and for per-channel shifts the shift
    vector, plus the clamp bounds when some shift is a left shift (see requant.py)."""
    r = layer.requant
    if not r.per_channel:
        return 1
    return 2 + (2 if min(r.shift) < 0 else 0)


def conv_spans(g: ConvGeom, s: Schedule) -> bool:
    """Whether output tiles span several groups (then each tile reduces whole groups)."""
    return s.tile_co > g.cog


def resident_consts(g: ConvGeom, cfg: VTAConfig, nconst: int) -> int:
    """ACC entries of the layer's constant vectors when they are loaded once for the whole
    layer (into ACC entries [0, cob * nconst), shared by the threads), else 0 (then each tile
    loads its own after its accumulators). Loading once keeps a bias DMA per tile off the
    compute module, where it waited behind the load module's transfers on the shared bus; the
    region is capped at 1/8 of ACC so that the tiles keep most of it."""
    n = g.cob * nconst
    return n if n <= cfg.acc_depth // 8 else 0


def acc_thread_base(g: ConvGeom, cfg: VTAConfig, nconst: int, vthreads: int) -> tuple[int, int]:
    """(first ACC entry of thread 0's half, entries per thread)."""
    shared = resident_consts(g, cfg, nconst)
    return shared, (cfg.acc_depth - shared) // vthreads


def conv_usage(g: ConvGeom, s: Schedule, nconst: int, resident: bool = False) -> dict[str, int]:
    """SRAM entries one thread needs (inp, wgt, acc) and micro-ops of the GEMM kernel.
    `resident`: the constant vectors live in the shared region, not in the thread's ACC."""
    if conv_spans(g, s):
        inp_blocks, wci = (s.tile_co // g.cog) * g.cig, g.cig
    else:
        inp_blocks, wci = s.tile_ci, s.tile_ci
    return {"inp": s.tile_n * inp_blocks * g.in_rows(s.tile_h) * g.in_cols(s.tile_w),
            "wgt": s.tile_co * wci * g.kk,
            "acc": s.tile_n * s.tile_co * s.tile_h * s.tile_w
            + (0 if resident else s.tile_co * nconst),
            "uop": s.tile_co * wci * g.kk}


@dataclass(frozen=True, slots=True)
class Capacity:
    """SRAM entries one thread may use (its half with 2 threads; ACC less the shared constant
    region) and whether the constants are resident: what conv_fits compares usage with."""
    inp: int
    wgt: int
    acc: int
    uop: int
    resident: bool

    @staticmethod
    def of(g: ConvGeom, cfg: VTAConfig, nconst: int, vthreads: int) -> "Capacity":
        _, acc_cap = acc_thread_base(g, cfg, nconst, vthreads)
        return Capacity(cfg.inp_depth // vthreads, cfg.wgt_depth // vthreads, acc_cap,
                        cfg.uop_depth // 2, resident_consts(g, cfg, nconst) > 0)


def conv_fits(g: ConvGeom, cfg: VTAConfig, s: Schedule, nconst: int,
              cap: Capacity | None = None) -> str | None:
    """None when the schedule fits, else what overflows. `cap`: Capacity.of(g, cfg, nconst,
    s.vthreads), when the caller has it already (the candidate search asks thousands of times)."""
    if conv_spans(g, s) and (s.tile_co % g.cog or s.tile_ci != g.cig):
        return "a tile spanning groups must hold whole groups and reduce each group at once"
    if not conv_spans(g, s) and s.tile_ci > g.cig:
        return "tile_ci larger than the reduction"
    cap = cap or Capacity.of(g, cfg, nconst, s.vthreads)
    use = conv_usage(g, s, nconst, cap.resident)
    over = [f"{k} {use[k]} > {getattr(cap, k)}" for k in use if use[k] > getattr(cap, k)]
    return "; ".join(over) if over else None


def _conv_fit(g: ConvGeom, nconst: int, cap: Capacity):
    """fit(tn, th, tw, tco, tci): conv_fits(g, cfg, Schedule(tn, th, tw, tco, tci, v), nconst,
    cap) is None, without building the schedule or the usage dict (the candidate search asks
    tens of thousands of times)."""
    cog, cig, kk = g.cog, g.cig, g.kk
    in_cols = g.in_cols
    in_rows = g.in_rows
    const_acc = 0 if cap.resident else nconst
    c_inp, c_wgt, c_acc, c_uop = cap.inp, cap.wgt, cap.acc, cap.uop

    def fit(tn: int, th: int, tw: int, tco: int, tci: int) -> bool:
        if tco > cog:           # conv_spans
            if tco % cog or tci != cig:
                return False
            inp_blocks, wci = (tco // cog) * cig, cig
        else:
            if tci > cig:
                return False
            inp_blocks, wci = tci, tci
        w = tco * wci * kk       # weights and micro-ops alike
        return (tn * inp_blocks * in_rows(th) * in_cols(tw) <= c_inp and w <= c_wgt
                and tn * tco * th * tw + tco * const_acc <= c_acc and w <= c_uop)
    return fit


def _distinct_tiles(n: int) -> list[int]:
    """Tile sizes giving distinct tile counts: ceil(n / k) for k = 1..n, largest first."""
    return sorted({ceil_div(n, k) for k in range(1, n + 1)}, reverse=True)


@lru_cache(maxsize=4096)      # a pure function of ints that the tile search asks again and again
def _axis_real(size: int, out: int, tile: int, k: int, s: int, pad0: int) -> int:
    """Input elements actually read along one axis, summed over tiles (padding excluded)."""
    total = 0
    for o0 in range(0, out, tile):
        t = min(tile, out - o0)
        r0 = o0 * s - pad0
        r1 = r0 + (t - 1) * s + k
        total += min(r1, size) - max(r0, 0)
    return total


def estimate_conv(layer: Conv2d, cfg: VTAConfig, s: Schedule, g: ConvGeom | None = None,
                  nconst: int | None = None) -> Estimate:
    """`g` = conv_geom(layer, cfg) and `nconst` = conv_consts(layer), when the caller has them
    (the tile search asks for thousands of schedules of one layer)."""
    if g is None:
        g = conv_geom(layer, cfg)
    v = s.vthreads
    nt, ht, wt = ceil_div(g.nb, s.tile_n), ceil_div(g.oh, s.tile_h), ceil_div(g.ow, s.tile_w)
    sp = nt * ht * wt
    spans = conv_spans(g, s)
    groups = g.cob // g.cog
    nco = ceil_div(g.cob, s.tile_co) if spans else groups * ceil_div(g.cog, s.tile_co)
    nph = 1 if spans else ceil_div(g.cig, s.tile_ci)
    rows = g.oh if g.skip_rows else _axis_real(g.h, g.oh, s.tile_h, g.kh, g.sh, g.pads[0])
    cols = _axis_real(g.w, g.ow, s.tile_w, g.kw, g.sw, g.pads[1])
    per_block = rows * cols * g.nb * cfg.inp_elem_bytes     # one input block, every tile
    if groups == 1 and nph == 1:
        inp = per_block * g.cib * min(v, nco)                # reused across output tiles
    else:
        inp = per_block * g.cig * nco if not spans else per_block * g.cib
    wtot = g.cob * g.cig * g.kk * cfg.wgt_elem_bytes
    wgt = wtot * (min(v, sp) if nco == 1 and nph == 1 else sp)
    if nconst is None:
        nconst = conv_consts(layer)
    out = g.nb * g.cob * g.oh * g.ow * cfg.out_elem_bytes
    const_loads = 1 if resident_consts(g, cfg, nconst) else sp   # once per layer, or per tile
    consts = const_loads * g.cob * nconst * cfg.acc_elem_bytes
    items = sp * nco
    merged_in = g.in_rows(s.tile_h) * g.in_cols(s.tile_w) == 1
    loads = items * nph * ((1 if merged_in else s.tile_n * s.tile_ci) + 1)
    gemms = items * nph * (1 if s.tile_h * s.tile_w == 1 else s.tile_n)
    stores = items * (1 if s.tile_h * s.tile_w == g.oh * g.ow else s.tile_n * s.tile_co)
    insns = loads + gemms + stores + items * 8
    return Estimate(inp + wgt + out + consts, insns, items)


# ---- ALU layers ------------------------------------------------------------------------------
def alu_geom(layer: Pool2d | ResidualAdd | RequantizeLayer, cfg: VTAConfig) -> ConvGeom:
    """Elementwise layers as a 1x1 'pool' (the same tiling over n, rows, cols, channels)."""
    if isinstance(layer, Pool2d):
        return conv_geom(layer, cfg)
    n, c, h, w = layer.shape
    cb = ceil_div(c, cfg.block_out)
    return ConvGeom(ceil_div(n, cfg.batch), cb, cb, h, w, h, w, 1, 1, 1, 1, (0, 0, 0, 0))


def alu_acc_use(layer, g: ConvGeom, s: Schedule) -> int:
    tile = s.tile_n * s.tile_co
    out = tile * s.tile_h * s.tile_w
    if isinstance(layer, Pool2d):
        return out + tile * g.in_rows(s.tile_h) * g.in_cols(s.tile_w)
    if isinstance(layer, ResidualAdd):
        return 2 * out
    r = layer.requant
    nconst = (2 + (2 if min(r.shift) < 0 else 0)) if r.per_channel else 0
    return out + s.tile_co * nconst


def alu_fits(layer, g: ConvGeom, cfg: VTAConfig, s: Schedule) -> str | None:
    cap = cfg.acc_depth // s.vthreads
    use = alu_acc_use(layer, g, s)
    if use > cap:
        return f"acc {use} > {cap}"
    if isinstance(layer, Pool2d):
        # A pooling tap steps a tile row by sh rows of the tile's input window: that stride
        # is a micro-op loop's src factor, a field only as wide as an INP index (the ISA
        # shares it with the GEMM), so a wide window on a small INP buffer cannot be encoded.
        step = g.sh * g.in_cols(s.tile_w)
        if step >= cfg.inp_depth:
            return (f"pooling row step {step} does not fit the src factor field "
                    f"(< {cfg.inp_depth}, the INP depth)")
    return None


def estimate_alu(layer, cfg: VTAConfig, s: Schedule) -> Estimate:
    g = alu_geom(layer, cfg)
    nt, ht, wt = ceil_div(g.nb, s.tile_n), ceil_div(g.oh, s.tile_h), ceil_div(g.ow, s.tile_w)
    nc = ceil_div(g.cob, s.tile_co)
    items = nt * ht * wt * nc
    rows = _axis_real(g.h, g.oh, s.tile_h, g.kh, g.sh, g.pads[0])
    cols = _axis_real(g.w, g.ow, s.tile_w, g.kw, g.sw, g.pads[1])
    e = cfg.batch * cfg.block_out
    inp = rows * cols * g.nb * g.cib * e * (2 if isinstance(layer, ResidualAdd) else 1)
    out = g.nb * g.cob * g.oh * g.ow * e
    full_w = s.tile_w == g.ow and g.kh == 1 and g.kw == 1
    per_item = (s.tile_n if full_w else s.tile_n * s.tile_co) * 2
    taps = g.kh * g.kw
    insns = items * (per_item + taps + 6)
    return Estimate(inp + out, insns, items)


# ---- the chooser -----------------------------------------------------------------------------
def _max_rows(fits: Callable[[int], bool], limit: int) -> int:
    """Largest th in 1..limit with fits(th) (usage grows with th), 0 if none."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _balanced(n: int, tile: int) -> int:
    return ceil_div(n, ceil_div(n, tile))


def candidates(layer: Layer, cfg: VTAConfig, vthreads: int = 1) -> list[Schedule]:
    """Tilings that fit: for each (batch, channel, reduction) tiling, the widest column tile
    for which some rows fit, with the most rows that fit, balanced over the tiles."""
    if vthreads not in (1, 2):
        raise TargetError(f"vthreads={vthreads}: VTA schedules use 1 or 2 virtual threads")
    why = reason(layer, cfg)
    if why:
        raise TargetError(why)
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    if isinstance(layer, Conv2d):
        g = conv_geom(layer, cfg)
        nconst = conv_consts(layer)
        co_opts = [(t, ci) for t in _distinct_tiles(g.cog) for ci in _distinct_tiles(g.cig)]
        if g.cob > g.cog:   # tiles over whole groups
            co_opts += [(m * g.cog, g.cig) for m in _distinct_tiles(g.cob // g.cog) if m > 1]

        cap = Capacity.of(g, cfg, nconst, vthreads)
        fit = _conv_fit(g, nconst, cap)
    else:
        g = alu_geom(layer, cfg)
        co_opts = [(t, 1) for t in _distinct_tiles(g.cob)]

        def fit(tn, th, tw, tco, tci):
            return alu_fits(layer, g, cfg, Schedule(tn, th, tw, tco, tci, vthreads)) is None
    out = []
    for tn in _distinct_tiles(g.nb):
        for tco, tci in co_opts:
            for tw in _distinct_tiles(g.ow):
                if not fit(tn, 1, tw, tco, tci):
                    continue
                th = _max_rows(lambda h: fit(tn, h, tw, tco, tci), g.oh)
                out.append(Schedule(tn, _balanced(g.oh, th), _balanced(g.ow, tw), tco, tci,
                                    vthreads))
                break
    return out


def estimate(layer: Layer, cfg: VTAConfig, s: Schedule) -> Estimate:
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    if isinstance(layer, Conv2d):
        return estimate_conv(layer, cfg, s)
    return estimate_alu(layer, cfg, s)


def check_schedule(layer: Layer, cfg: VTAConfig, s: Schedule) -> None:
    """TargetError when a given schedule does not fit (or is malformed)."""
    where = f"{type(layer).__name__} '{layer.name}'"
    if s.vthreads not in (1, 2) or min(s.tile_n, s.tile_h, s.tile_w, s.tile_co, s.tile_ci) < 1:
        raise TargetError(f"{where}: malformed schedule {s}")
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    if isinstance(layer, Conv2d):
        g = conv_geom(layer, cfg)
        why = conv_fits(g, cfg, s, conv_consts(layer))
    else:
        g = alu_geom(layer, cfg)
        why = alu_fits(layer, g, cfg, s)
    if why is None and (s.tile_n > g.nb or s.tile_h > g.oh or s.tile_w > g.ow
                        or s.tile_co > g.cob):
        why = "tile larger than the tensor"
    if why:
        raise TargetError(f"{where}: schedule {s} does not fit config {cfg.name!r}: {why}")
