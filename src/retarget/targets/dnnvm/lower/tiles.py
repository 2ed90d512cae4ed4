"""dnnvm convolution tiles: what fits the on-chip buffers (eq. 6 of the DNNVM paper and the
ISA field widths), the candidates a search ranks, and the analytical estimates it ranks them by
(eq. 5 and its extensions to conv+pool groups and conv->conv pairs). The choice between the
best few, timed by the cycle model on a scratch lowering, is in lowering.py."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ....errors import TargetError
from ...accel.layers import Conv2d, Pool2d
from ..config import DNNVMConfig


ISA_MAX_DIM = 4095      # 12-bit row / column / channel fields


JUDGE_GAP = 2.0         # eq. 5 vs the best candidate: closer than this, the full model judges


NEAR = 0.01             # estimates this close count as a tie, broken by fewer instructions


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


def _in_extent(out0: int, count: int, stride: int, k: int, pad: int, size: int):
    """(first valid input index, valid count, zeros before, zeros after) that `count` outputs
    from `out0` read along one axis."""
    lo = out0 * stride - pad
    hi = (out0 + count - 1) * stride - pad + k
    v_lo, v_hi = max(lo, 0), min(hi, size)
    return v_lo, max(v_hi - v_lo, 0), v_lo - lo, hi - max(v_hi, v_lo)


def conv_fit(layer: Conv2d, t: ConvTile, cfg: DNNVMConfig, extra: int = 0) -> str | None:
    """Which buffer a tile overflows (eq. 6 with both halves of each buffer), or an ISA field
    it exceeds; None when it fits. `extra`: more bytes per output element the output slot must
    hold beside the int32 accumulators (a fused add's operand, a fused pool's result)."""
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
    out_bytes = t.th * t.tw * t.toc * (4 + extra)
    if out_bytes > cfg.out_buf_bytes // 2:
        return (f"output buffer: a {t.th}x{t.tw}x{t.toc} tile needs {out_bytes} B (int32 "
                f"accumulators{' and fused operands' if extra else ''}), a slot holds "
                f"{cfg.out_buf_bytes // 2} B")
    if t.toc > cfg.bias_slot_entries:
        return f"bias buffer: {t.toc} biases, a slot holds {cfg.bias_slot_entries}"
    if max(in_rows, in_cols, t.th, t.tw, t.toc, tic) > ISA_MAX_DIM:
        return f"a tile dimension exceeds the ISA's {ISA_MAX_DIM}"
    return None


def _widest(layer: Conv2d, cfg: DNNVMConfig, th: int, toc: int, tic: int, order: str,
            extra: int = 0):
    """The tile of the widest T_w (eq. 6) for fixed T_h, T_oc, T_ic, or None."""
    ow = layer.out_hw[1]
    lo, hi = 1, ow
    if conv_fit(layer, ConvTile(th, 1, toc, tic, order), cfg, extra):
        return None
    while lo < hi:                      # the fit is monotone in T_w
        mid = (lo + hi + 1) // 2
        if conv_fit(layer, ConvTile(th, mid, toc, tic, order), cfg, extra):
            hi = mid - 1
        else:
            lo = mid
    return ConvTile(th, lo, toc, tic, order)


def eq5_tile(layer: Conv2d, cfg: DNNVMConfig, extra: int = 0) -> ConvTile:
    """The paper's tile: T_h = h_p, T_oc = oc_p, T_ic = ic_p (each capped by the layer), the
    widest T_w that fits. When even T_w = 1 does not fit, smaller rows / channels are tried;
    a layer no tile fits is refused naming the buffer."""
    oh, _ = layer.out_hw
    oc, ic = layer.out_channels, layer.in_shape[1]
    th, toc, tic = min(cfg.h_p, oh), min(cfg.oc_p, oc), min(cfg.ic_p, ic)
    while True:
        t = _widest(layer, cfg, th, toc, tic, "spatial", extra)
        if t is not None:
            return t
        if th == toc == tic == 1:
            break
        th, toc, tic = max(1, th // 2), max(1, toc // 2), max(1, tic // 2)
    why = conv_fit(layer, ConvTile(1, 1, 1, 1), cfg, extra)
    raise TargetError(f"{layer.op} '{layer.name}' ({layer.in_shape} -> {layer.out_channels} "
                      f"channels, kernel {layer.kernel}): no tile fits config "
                      f"{cfg.name!r}; even a 1x1x1 tile overflows the {why}")


def conv_candidates(layer: Conv2d, cfg: DNNVMConfig, extra: int = 0) -> list[ConvTile]:
    """Tiles worth timing: eq. 5's, and larger ones in rows, output channels (multiples of
    oc_p, up to all), input channels (ic_p multiples, up to all) and both loop orders."""
    oh, _ = layer.out_hw
    oc, ic = layer.out_channels, layer.in_shape[1]
    dw = layer.groups > 1
    tics = [oc] if dw else _ladder(cfg.ic_p, ic)
    out = []
    for th in _ladder(cfg.h_p, oh):
        for toc in _ladder(cfg.oc_p, oc):
            for tic in ([toc] if dw else tics):
                for order in ("spatial", "oc"):
                    t = _widest(layer, cfg, th, toc, tic, order, extra)
                    if t is not None:
                        out.append(t)
    return out


def _conv_count(layer: Conv2d, t: ConvTile) -> int:
    """CONV instructions a tile choice emits."""
    oh, ow = layer.out_hw
    nic = 1 if layer.groups > 1 else -(-layer.in_shape[1] // t.tic)
    return (layer.in_shape[0] * -(-oh // t.th) * -(-ow // t.tw) * -(-layer.out_channels // t.toc)
            * nic)


def conv_estimate(layer: Conv2d, t: ConvTile, cfg: DNNVMConfig) -> float:
    """Closed-form cycles of a tile choice, for ranking: how many loads, CONVs and saves the
    lowering emits (counting what the two-slot buffers let it reuse), each engine's busy time
    (per-instruction costs as timing.insn_cost), the DDR port's, the largest of them, plus
    the first tile's loads and the last tile's save that nothing hides."""
    n = layer.in_shape[0]
    oh, ow = layer.out_hw
    kh, kw = layer.kernel
    sh, sw = layer.stride
    oc, ic = layer.out_channels, layer.in_shape[1]
    dw = layer.groups > 1
    c = cfg
    n_sp = n * -(-oh // t.th) * -(-ow // t.tw)
    noc = -(-oc // t.toc)
    nic = 1 if dw else -(-ic // t.tic)
    tic = t.toc if dw else t.tic
    in_tile = ((t.th - 1) * sh + kh) * ((t.tw - 1) * sw + kw) * tic
    w_tile = t.toc * kh * kw * (1 if dw else t.tic)
    if dw:
        in_loads, w_loads = n_sp * noc, (noc if t.order == "oc" or noc <= 2 else n_sp * noc)
        b_loads = noc if t.order == "oc" or noc <= 2 else n_sp * noc
    elif t.order == "spatial":
        in_loads = n_sp * (nic if nic <= 2 else noc * nic)
        w_loads = noc * nic if noc * nic <= 2 else n_sp * noc * nic
        b_loads = noc if noc <= 2 else n_sp * noc
    else:
        in_loads = n_sp * nic if n_sp * nic <= 2 else n_sp * nic * noc
        w_loads = noc * nic if nic <= 2 else noc * n_sp * nic
        b_loads = noc
    tiles = n_sp * noc
    load_bytes = in_loads * in_tile + w_loads * w_tile + b_loads * 4 * t.toc
    out_bytes = n * oh * ow * oc
    per = c.insn_overhead + c.ddr_latency
    # every input-channel chunk of a tile (the last may be narrower: channel augmentation)
    window = c.window_steps(kh, kw, 1, True) if dw else sum(
        c.window_steps(kh, kw, min(t.tic, ic - c0)) for c0 in range(0, ic, t.tic))
    steps = -(-t.th // c.h_p) * t.tw * window * -(-t.toc // c.oc_p)
    conv = (_conv_count(layer, t) * (c.conv_pipeline + c.insn_overhead)
            + tiles * steps * c.step_cycles)
    load = (in_loads + w_loads + b_loads) * per + load_bytes / c.ddr_bytes_per_cycle
    save = tiles * per + out_bytes / c.ddr_bytes_per_cycle
    port = (load_bytes + out_bytes) / c.ddr_bytes_per_cycle
    fill = 2 * per + (in_tile + w_tile) / c.ddr_bytes_per_cycle
    drain = per + t.th * t.tw * t.toc / c.ddr_bytes_per_cycle
    # the first tile's loads and the last save overlap nothing; the rest overlaps
    return fill + max(conv, load - fill, save - drain, port - fill - drain, 0) + drain


@dataclass(frozen=True, slots=True)
class ConvHead:
    """One convolution of a conv group: the layer, where its output goes, its constants."""
    layer: Conv2d
    outs: tuple[FeatureMap, ...]
    weight: object = None          # OIHW int8, or None when only timed
    bias: object = None


def _merged(heads: list[ConvHead]) -> Conv2d:
    """Horizontally fused convs as one conv over all their output channels (what tiling sees)."""
    first = heads[0].layer
    for h in heads[1:]:
        g = h.layer
        if (g.in_shape, g.kernel, g.stride, g.pads, g.groups) != \
                (first.in_shape, first.kernel, first.stride, first.pads, first.groups) \
                or g.groups != 1:
            raise TargetError(f"horizontal fusion of '{first.name}' and '{g.name}': the convs "
                              f"must read one input through one window (dense, same kernel, "
                              f"stride and pads)")
    return replace(first, name=" + ".join(h.layer.name for h in heads),
                   out_channels=sum(h.layer.out_channels for h in heads))


def _shrink_to_fit(th: int, tw: int, tc: int, fits, refusal) -> tuple[int, int, int]:
    """Halve the larger of rows and columns (then channels) until `fits(th, tw, tc)`;
    TargetError(refusal()) when not even a 1x1x1 tile does."""
    while not fits(th, tw, tc):
        if th == tw == tc == 1:
            raise TargetError(refusal())
        if th >= tw and th > 1:
            th = -(-th // 2)
        elif tw > 1:
            tw = -(-tw // 2)
        else:
            tc = -(-tc // 2)
    return th, tw, tc


def pool_group_ok(layer: Conv2d, pool: Pool2d) -> str | None:
    """Why horizontally fused convs (merged as `layer`) and a pool reading the same input
    cannot share its tiles, or None: the convs 1x1, stride 1, unpadded (each output pixel is
    its input pixel) and the pool stride 1, keeping the map's size (so the conv's and the
    pool's output rows are the same input rows, the pool's also reading a halo)."""
    if (layer.kernel, layer.stride, layer.pads, layer.groups) != ((1, 1), (1, 1), (0,) * 4, 1):
        return "the convs are not dense 1x1 stride-1 unpadded convolutions"
    if pool.stride != (1, 1) or pool.out_hw != layer.out_hw or pool.in_shape != layer.in_shape:
        return "the pool does not keep the map's size at stride 1"
    return None


def pool_group_fit(layer: Conv2d, pool: Pool2d, t: ConvTile, cfg: DNNVMConfig) -> str | None:
    """conv_fit for the convs of a group sharing tiles with a pool (t spans the map's width),
    plus the pool's halo rows in the input slot and its int8 result in an output slot."""
    why = conv_fit(layer, t, cfg)
    if why:
        return why
    h = layer.in_shape[2]
    rows = min(t.th + pool.kernel[0] - 1, h)
    if rows * t.tw * t.tic > cfg.inp_slot:
        return (f"input buffer: {rows} rows (the pool's halo included) x {t.tw} x {t.tic} need "
                f"{rows * t.tw * t.tic} B, a slot holds {cfg.inp_slot} B")
    half = cfg.out_buf_bytes // 4
    if t.th * t.tw * t.toc * 4 > half:
        return (f"output buffer: {t.th}x{t.tw}x{t.toc} int32 accumulators need "
                f"{t.th * t.tw * t.toc * 4} B, half a slot (the pool has the other) holds "
                f"{half} B")
    if t.tw * t.tic > half:
        return (f"output buffer: a pooled row of {t.tw}x{t.tic} needs {t.tw * t.tic} B, half "
                f"a slot (the convs have the other) holds {half} B")
    return None


@dataclass(frozen=True, slots=True)
class ConvConvTile:
    """A fused conv -> conv: the second conv's output rows x columns per tile and its
    output-channel chunk; the first conv's output-channel chunk (the second's input-channel
    chunk: the intermediate is kept in OUT as int8 chunks of `tmid` channels) and its
    input-channel chunk. `stream`: the two convs' weights do not fit the weight buffer at
    once, so both are streamed through its two slots per tile (each chunk of the first conv's
    weights per intermediate chunk, each of the second's per output chunk), and the second
    conv's output chunks take turns in two places of the output slot. `whole` (streamed, one
    image, one tile covering the map): the group has the whole output buffer (both slots),
    so the weights are streamed once."""
    th: int
    tw: int
    toc2: int
    tmid: int
    tic1: int
    stream: bool = False
    whole: bool = False


def _packed(pixels: int, channels: int, chunk: int) -> int:
    """Bytes of OUT that `channels` int8 results of `pixels` pixels take when computed in
    chunks of `chunk` channels packed one after another: each chunk's int32 accumulators start
    where its int8 result will be, so the last chunk needs room for 4 bytes per element."""
    chunk = min(chunk, channels)
    n = -(-channels // chunk)
    last = channels - (n - 1) * chunk
    end = ((n - 1) * chunk + 4 * last) * pixels            # the last chunk's accumulators
    if n > 1:                                             # the last full chunk's
        end = max(end, (n + 2) * chunk * pixels)
    return end


def _mid_extent(l2: Conv2d, y0: int, th: int, x0: int, tw: int):
    """The intermediate's rows and columns a tile of the second conv reads (first, count,
    zeros before, zeros after), along each axis."""
    (kh, kw), (sh, sw) = l2.kernel, l2.stride
    return (_in_extent(y0, th, sh, kh, l2.pads[0], l2.in_shape[2]),
            _in_extent(x0, tw, sw, kw, l2.pads[1], l2.in_shape[3]))


def conv_conv_ok(l1: Conv2d, l2: Conv2d) -> str | None:
    """Why two convs cannot be fused as CONV -> CONV (None when they can): the second reads
    exactly the first's result, is dense (any kernel, stride and padding the CONV encodes),
    and the first is dense or depthwise."""
    if l2.in_shape != l1.out_shape:
        return f"'{l2.name}' reads {l2.in_shape}, '{l1.name}' produces {l1.out_shape}"
    if l2.groups != 1:
        return f"'{l2.name}' is grouped: its input chunks would have to follow its output's"
    if l1.in_shape[0] != 1 and l1.in_shape[0] != l2.in_shape[0]:
        return "batch mismatch"
    if max(l2.pads) > MAX_PAD:
        return f"'{l2.name}' pads {l2.pads} exceed the CONV's {MAX_PAD}"
    return None


def conv_conv_resident(l1: Conv2d, l2: Conv2d, cfg: DNNVMConfig) -> str | None:
    """Why both convs' weights and biases cannot stay resident at once (None when they can):
    then the pair is fused only with its weights streamed (ConvConvTile.stream)."""
    c1, c2 = l1.out_channels, l2.out_channels
    ic1 = l1.in_shape[1]
    dw1 = l1.groups > 1
    w = c1 * l1.kernel[0] * l1.kernel[1] * (1 if dw1 else ic1) + \
        c2 * l2.kernel[0] * l2.kernel[1] * c1
    if w > cfg.wgt_buf_bytes:
        return (f"weight buffer: both convs' weights ({w} B) must stay resident, the buffer "
                f"holds {cfg.wgt_buf_bytes} B")
    if 4 * (c1 + c2) > cfg.bias_buf_bytes:
        return (f"bias buffer: {c1 + c2} resident biases need {4 * (c1 + c2)} B, the buffer "
                f"holds {cfg.bias_buf_bytes} B")
    return None


def _stream_chunks_fit(l1: Conv2d, l2: Conv2d, t: ConvConvTile, cfg: DNNVMConfig) -> str | None:
    """Streamed weights: a chunk of each conv's weights fits a weight slot, its biases a bias
    slot."""
    dw1 = l1.groups > 1
    tmid = min(t.tmid, l1.out_channels)
    toc2 = min(t.toc2, l2.out_channels)
    w1 = tmid * l1.kernel[0] * l1.kernel[1] * (1 if dw1 else min(t.tic1, l1.in_shape[1]))
    # the second conv's weights of an output chunk for every intermediate chunk at once
    # (stored chunk-major in DDR: one LOAD of the full chunks, one of the last)
    w2 = toc2 * l2.kernel[0] * l2.kernel[1] * l1.out_channels
    if toc2 * l2.kernel[0] * l2.kernel[1] * tmid >= 1 << 16 or \
            l2.out_channels * l2.kernel[0] * l2.kernel[1] * tmid >= 1 << 24:
        return "a streamed weight chunk exceeds the LOAD's vector or stride field"
    if max(w1, w2) > cfg.wgt_slot:
        return (f"weight buffer: streamed weight chunks of {w1} B and {w2} B, a slot holds "
                f"{cfg.wgt_slot} B")
    if 4 * max(tmid, toc2) > cfg.bias_buf_bytes // 2:
        return (f"bias buffer: {max(tmid, toc2)} streamed biases, a slot holds "
                f"{cfg.bias_buf_bytes // 2} B")
    return None


def _cc_out_regions(c2: int, toc2: int, stream: bool) -> int:
    """Places for the second conv's output chunks in the output slot: every chunk its own
    (resident weights), or two taking turns (streamed)."""
    n = -(-c2 // toc2)
    return min(n, 2) if stream else n


def conv_conv_fit(l1: Conv2d, l2: Conv2d, t: ConvConvTile, cfg: DNNVMConfig,
                  add: bool = False) -> str | None:
    """Which buffer a fused conv -> conv overflows (None when it fits): both convs' weights
    and biases stay resident (the whole weight and bias buffers; with `t.stream` a chunk of
    each fits a slot instead), the first conv's input tile one input slot, and one output slot
    holds the intermediate rows and columns the second conv's window needs (all channels,
    int8) beside the second conv's accumulators."""
    why = conv_conv_ok(l1, l2)
    if why:
        return why
    c1, c2 = l1.out_channels, l2.out_channels
    ic1 = l1.in_shape[1]
    dw1 = l1.groups > 1
    why = _stream_chunks_fit(l1, l2, t, cfg) if t.stream else conv_conv_resident(l1, l2, cfg)
    if why:
        return why
    # the worst tile is an interior one: its window reads no padding
    (kh2, kw2), (sh2, sw2) = l2.kernel, l2.stride
    rows = min((t.th - 1) * sh2 + kh2, l1.out_hw[0])
    cols = min((t.tw - 1) * sw2 + kw2, l1.out_hw[1])
    tmid = min(t.tmid, c1)
    (kh1, kw1), (sh1, sw1) = l1.kernel, l1.stride
    in_rows, in_cols = (rows - 1) * sh1 + kh1, (cols - 1) * sw1 + kw1
    tic1 = tmid if dw1 else min(t.tic1, ic1)
    if in_rows * in_cols * tic1 > cfg.inp_slot:
        return (f"input buffer: the first conv's {in_rows}x{in_cols}x{tic1} input tile needs "
                f"{in_rows * in_cols * tic1} B, a slot holds {cfg.inp_slot} B")
    if t.stream:
        toc2 = min(t.toc2, c2)
        k = _cc_out_regions(c2, toc2, True)
        need = _packed(rows * cols, c1, tmid) + k * t.th * t.tw * toc2 * (5 if add else 4)
    else:
        need = _packed(rows * cols, c1, tmid) + _packed(t.th * t.tw, c2, t.toc2) + \
            (t.th * t.tw * c2 if add else 0)
    if t.whole and (not t.stream or l2.in_shape[0] != 1 or t.th < l2.out_hw[0]
                    or t.tw < l2.out_hw[1]):
        return "the whole output buffer is for one streamed tile covering one image"
    cap = cfg.out_buf_bytes if t.whole else cfg.out_buf_bytes // 2
    if need > cap:
        return (f"output buffer: {rows}x{cols}x{c1} intermediate and a {t.th}x{t.tw}x{c2} "
                f"result (int32 while they accumulate{', and the add operand' if add else ''})"
                f" need {need} B, {'the buffer' if t.whole else 'a slot'} holds {cap} B")
    if max(in_rows, in_cols, rows, cols, t.th, t.tw, t.toc2, tmid, tic1) > ISA_MAX_DIM:
        return f"a tile dimension exceeds the ISA's {ISA_MAX_DIM}"
    return None


def _ladder(step: int, total: int) -> list[int]:
    """step, 2*step, 4*step, ... below total, then total."""
    out, v = [], min(step, total)
    while v < total:
        out.append(v)
        v *= 2
    return out + [total]


def _widest_cc(l1, l2, cfg, th, toc2, tmid, tic1, add=False,
               stream=False) -> ConvConvTile | None:
    ow = l2.out_hw[1]
    if conv_conv_fit(l1, l2, ConvConvTile(th, 1, toc2, tmid, tic1, stream), cfg, add):
        return None
    lo, hi = 1, ow
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if conv_conv_fit(l1, l2, ConvConvTile(th, mid, toc2, tmid, tic1, stream), cfg, add):
            hi = mid - 1
        else:
            lo = mid
    return ConvConvTile(th, lo, toc2, tmid, tic1, stream)


def conv_conv_candidates(l1: Conv2d, l2: Conv2d, cfg: DNNVMConfig,
                         add: bool = False) -> list[ConvConvTile]:
    """Fused tiles worth estimating: rows in multiples of h_p, or such that the intermediate
    rows they need are (no PE row idle in the first conv); intermediate chunks in multiples of
    both ic_p and oc_p, or all channels; the second conv's channels in oc_p multiples or all;
    the first conv's input channels all at once when they fit, else ic_p multiples; each with
    its widest fitting width. A pair whose weights cannot stay resident gets streamed tiles."""
    stream = conv_conv_resident(l1, l2, cfg) is not None
    oh2 = l2.out_hw[0]
    c1, c2, ic1 = l1.out_channels, l2.out_channels, l1.in_shape[1]
    (kh2, _), (sh2, _) = l2.kernel, l2.stride
    rows = set(_ladder(cfg.h_p, oh2))
    for k in range(1, 9):
        rows.add(min(k * cfg.h_p, oh2))
        r = (k * cfg.h_p - kh2) // sh2 + 1
        if 1 <= r <= oh2:
            rows.add(r)
    step = cfg.ic_p * cfg.oc_p // math.gcd(cfg.ic_p, cfg.oc_p)
    tmids = sorted(set(_ladder(step, c1)) | {min(cfg.ic_p, c1)})
    toc2s = _ladder(cfg.oc_p, c2)
    tic1s = [c1] if l1.groups > 1 else list(reversed(_ladder(cfg.ic_p, ic1)))
    out = []
    # streamed weights: only one tile covering the map with the whole output buffer, so each
    # weight is loaded once, as alone (more tiles would load every weight once per tile)
    for th in [] if stream else sorted(rows):
        for tmid in tmids:
            for toc2 in toc2s:
                for tic1 in tic1s:
                    t = _widest_cc(l1, l2, cfg, th, toc2, tmid, tic1, add, stream)
                    if t is not None:
                        out.append(t)
                        break                  # the most input channels that fit
    if stream and l2.in_shape[0] == 1:         # one tile with the whole output buffer
        for tmid in tmids:
            for toc2 in toc2s:
                for tic1 in tic1s:
                    t = ConvConvTile(oh2, l2.out_hw[1], toc2, tmid, tic1, True, True)
                    if conv_conv_fit(l1, l2, t, cfg, add) is None:
                        out.append(t)
                        break
    return out


def conv_conv_estimate(l1: Conv2d, l2: Conv2d, t: ConvConvTile, cfg: DNNVMConfig,
                       add: bool = False) -> float:
    """Closed-form cycles of a fused conv -> conv (as conv_estimate): the CONV engine's steps
    over every tile (the first conv's halo rows and columns recomputed), the loads (each
    tile's input once per input chunk, resident weights once) and the saves, the busiest
    engine or the DDR port, plus the first tile's loads and the last save."""
    c = cfg
    n = l1.in_shape[0]
    oh, ow = l2.out_hw
    c1, c2, ic1 = l1.out_channels, l2.out_channels, l1.in_shape[1]
    (kh1, kw1), (sh1, sw1) = l1.kernel, l1.stride
    (kh2, kw2) = l2.kernel
    dw1 = l1.groups > 1
    nmid = -(-c1 // t.tmid)
    nic1 = 1 if dw1 else -(-ic1 // t.tic1)
    no2 = -(-c2 // t.toc2)
    per = c.insn_overhead + c.ddr_latency
    insn = c.insn_overhead + c.conv_pipeline
    # the first conv's steps over all its input-channel chunks (the last may be narrower)
    window1 = c.window_steps(kh1, kw1, 1, True) if dw1 else sum(
        c.window_steps(kh1, kw1, min(t.tic1, ic1 - c0)) for c0 in range(0, ic1, t.tic1))
    conv = load_b = 0.0
    loads = 0
    for y0 in range(0, oh, t.th):
        for x0 in range(0, ow, t.tw):
            th, tw = min(t.th, oh - y0), min(t.tw, ow - x0)
            (_, rows, _, _), (_, cols, _, _) = _mid_extent(l2, y0, th, x0, tw)
            s1 = -(-rows // c.h_p) * cols * window1 * -(-t.tmid // c.oc_p)
            conv += nmid * (s1 * c.step_cycles + nic1 * insn)
            s2 = (-(-th // c.h_p) * tw * c.window_steps(kh2, kw2, min(t.tmid, c1))
                  * -(-t.toc2 // c.oc_p))
            conv += no2 * nmid * (s2 * c.step_cycles + insn)
            in_tile = ((rows - 1) * sh1 + kh1) * ((cols - 1) * sw1 + kw1) * \
                (t.tmid if dw1 else min(t.tic1, ic1))
            k = nmid if (dw1 or nic1 > 1) else 1
            loads += k * nic1 if not dw1 else k
            load_b += (k * nic1 if not dw1 else k) * in_tile
    conv *= n
    load_b *= n
    loads *= n
    w = c1 * kh1 * kw1 * (1 if dw1 else ic1) + c2 * kh2 * kw2 * c1
    # resident weights are loaded once; streamed ones once per tile
    reps = n * -(-oh // t.th) * -(-ow // t.tw) if t.stream and not t.whole else 1
    w2_loads = no2 * (1 if c1 % t.tmid == 0 else 2) if t.stream else no2 * nmid
    loads += reps * (nmid * nic1 + w2_loads + nmid + no2)
    load_b += reps * (w + 4 * (c1 + c2))
    out_b = n * oh * ow * c2
    saves = n * -(-oh // t.th) * -(-ow // t.tw) * no2
    if add:                            # the operand: one load per saved chunk, ELEW on MISC
        loads += saves
        load_b += out_b
    load = loads * per + load_b / c.ddr_bytes_per_cycle
    save = saves * per + out_b / c.ddr_bytes_per_cycle
    port = (load_b + out_b) / c.ddr_bytes_per_cycle
    fill = 2 * per + (load_b / max(loads, 1)) / c.ddr_bytes_per_cycle
    drain = per + t.th * t.tw * t.toc2 / c.ddr_bytes_per_cycle
    return max(conv, load, save, port) + fill + drain
