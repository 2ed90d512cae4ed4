"""What of the shared layer descriptions (targets/accel/layers.py) VTA can lower.

`reason(layer, cfg)` says why a layer cannot be lowered for a config (None when it can), so a
target can show the reason and keep the layer on the CPU.
"""
from __future__ import annotations

from ....ops.quantized import INT8_MAX, INT8_MIN
from ...accel.layers import (Conv2d, Dense, Layer, Pool2d, Requant,  # noqa: F401
                             RequantizeLayer, ResidualAdd, window_out_hw)
from ..config import VTAConfig

# The ALU shifts by the low 5 bits of its amount; a right shift beyond 31 or a left shift that
# could overflow int32 before the clip (see alu.py) is refused instead of computed wrongly.
MAX_RIGHT_SHIFT, MAX_LEFT_SHIFT = 31, 30
MAX_PAD = 15            # the LOAD's 4-bit padding fields


# ---- what maps and what does not ------------------------------------------------------------
def requant_reason(r: Requant, channels: int) -> str | None:
    if not INT8_MIN <= r.lo <= r.hi <= INT8_MAX:
        return f"clip range [{r.lo}, {r.hi}] is not inside int8 (the STORE keeps 8 bits)"
    shifts = r.shifts(channels)
    if r.per_channel and len(shifts) != channels:
        return f"{len(shifts)} per-channel shifts for {channels} channels"
    for s in shifts:
        if not -MAX_LEFT_SHIFT <= s <= MAX_RIGHT_SHIFT:
            return (f"shift {s} outside [-{MAX_LEFT_SHIFT}, {MAX_RIGHT_SHIFT}] (the ALU shifts "
                    f"by 5 bits; larger shifts are a calibration problem)")
    return None


def _window_reason(kernel, stride, pads) -> str | None:
    kh, kw = kernel
    if min(kernel) < 1 or min(stride) < 1:
        return f"kernel {kernel} / stride {stride} must be positive"
    pt, pl, pb, pr = pads
    if min(pads) < 0:
        return f"negative pads {pads}"
    if max(pt, pb) >= kh or max(pl, pr) >= kw:
        # A window made only of padding would need a load of zero real rows (which the LOAD
        # cannot express); such layers are degenerate anyway.
        return f"pads {pads} not smaller than the kernel {kh}x{kw}"
    if max(pads) > MAX_PAD:
        return f"pads {pads} exceed the LOAD's 4-bit padding ({MAX_PAD})"
    return None


def conv_groups(layer: Conv2d, cfg: VTAConfig) -> tuple[int, int, bool, int] | str:
    """(input blocks per group, output blocks per group, depthwise, groups merged) or the reason
    the grouping does not map onto whole BLOCK_IN x BLOCK_OUT weight blocks.

    Groups whose channels do not fill whole blocks (ResNeXt's 4 per group, RegNet's 8) are
    merged: `merged` consecutive groups form one group of whole blocks whose weight is block
    diagonal, zero between its member groups (merged x the useful MACs on the GEMM core, no
    relayout of the activations). Depthwise keeps its own form, one diagonal block per
    channel block."""
    c, o, g = layer.in_shape[1], layer.out_channels, layer.groups
    bi, bo = cfg.block_in, cfg.block_out
    if g == 1:
        return -(-c // bi), -(-o // bo), False, 1
    if c % g or o % g:
        return f"groups={g} does not divide {c} input / {o} output channels"
    if g == c == o:
        if bi != bo:
            return f"depthwise needs BLOCK_IN == BLOCK_OUT (config has {bi} and {bo})"
        return 1, 1, True, 1     # each channel block against its own diagonal weight block
    cg, og = c // g, o // g

    def fits(k: int) -> bool:
        # k groups fill whole blocks; an odd last merged group (RegNet's 13 groups of 8) is
        # filled by the channel padding every tensor already has up to whole blocks
        if (k * cg) % bi or (k * og) % bo:
            return False
        n = -(-g // k)
        return g % k == 0 or (n * k * cg == -(-c // bi) * bi and n * k * og == -(-o // bo) * bo)

    merged = next((k for k in range(1, g + 1) if fits(k)), None)
    if merged is None:
        return (f"groups={g} with {cg} input / {og} output channels per group is neither "
                f"depthwise nor a multiple of BLOCK_IN={bi} / BLOCK_OUT={bo}, and no number of "
                f"consecutive groups fills whole weight blocks")
    return merged * cg // bi, merged * og // bo, False, merged


def reason(layer: Layer, cfg: VTAConfig) -> str | None:
    """Why `layer` cannot be lowered for `cfg` (None: it can). Shown to users by a target."""
    where = f"{type(layer).__name__} '{layer.name}'"
    if isinstance(layer, Dense):
        layer = layer.as_conv()
    if isinstance(layer, Conv2d):
        why = _window_reason(layer.kernel, layer.stride, layer.pads)
        if why is None and min(layer.out_hw) < 1:
            why = f"empty output {layer.out_hw}"
        if why is None:
            g = conv_groups(layer, cfg)
            why = g if isinstance(g, str) else None
        why = why or requant_reason(layer.requant, layer.out_channels)
    elif isinstance(layer, Pool2d):
        why = _window_reason(layer.kernel, layer.stride, layer.pads)
        if why is None and layer.kind not in ("max", "avg"):
            why = f"pool kind {layer.kind!r}; known: max, avg"
        if why is None and layer.kind == "avg":
            k = layer.kernel[0] * layer.kernel[1]
            if k & (k - 1):
                why = f"average over {k} elements: not a power of two (the ALU divides by shifting)"
        why = why or requant_reason(Requant(0, layer.lo, layer.hi), 1)
    elif isinstance(layer, ResidualAdd):
        if not (0 <= layer.shift_a <= 23 and 0 <= layer.shift_b <= 23):
            why = f"alignment shifts {layer.shift_a}, {layer.shift_b} outside 0..23"
        else:
            why = requant_reason(layer.requant, layer.shape[1])
    elif isinstance(layer, RequantizeLayer):
        why = (None if layer.in_dtype in ("int8", "int32")
               else f"input dtype {layer.in_dtype}; the ALU loads int8 or int32")
        why = why or requant_reason(layer.requant, layer.shape[1])
    else:
        return f"{type(layer).__name__}: no VTA lowering"
    if why is None and _block_mismatch(layer, cfg):
        why = _block_mismatch(layer, cfg)
    return None if why is None else f"{where}: {why}"


def _block_mismatch(layer, cfg: VTAConfig) -> str | None:
    # ALU layers read int8 activations as BATCH x BLOCK_OUT accumulator rows; the packed layout
    # has BLOCK_IN channels per element, so the two must agree (they do in every preset).
    if not isinstance(layer, Conv2d) and cfg.block_in != cfg.block_out:
        return (f"ALU layers need BLOCK_IN == BLOCK_OUT so activations keep one packed layout "
                f"(config has {cfg.block_in} and {cfg.block_out})")
    return None
