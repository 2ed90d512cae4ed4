"""Layer descriptions the VTA lowering functions take: small frozen dataclasses of shapes and
integer parameters (no arrays; weights and biases are passed to the lowering call).

Each layer's integer meaning is the op table's (ops/nn.py Conv, ops/linalg.py Gemm,
ops/quantized.py Requantize / QAdd, ops/pool.py MaxPool); `reference.py` composes exactly those
ops. `reason(layer, cfg)` says why a layer cannot be lowered for a config (None when it can),
so a target can show the reason and keep the layer on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from ....ops.quantized import INT8_MAX, INT8_MIN
from ..config import VTAConfig

# The ALU shifts by the low 5 bits of its amount; a right shift beyond 31 or a left shift that
# could overflow int32 before the clip (see alu.py) is refused instead of computed wrongly.
MAX_RIGHT_SHIFT, MAX_LEFT_SHIFT = 31, 30
MAX_PAD = 15            # the LOAD's 4-bit padding fields


def window_out_hw(in_shape, kernel, stride, pads) -> tuple[int, int]:
    """Output height and width of a sliding window (convolution or pooling) over NCHW."""
    (_, _, h, w), (kh, kw), (sh, sw) = in_shape, kernel, stride
    pt, pl, pb, pr = pads
    return (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1


@dataclass(frozen=True, slots=True)
class Requant:
    """int32 -> int8: clip(round_half_up(x * 2**-shift), lo, hi), as ops.quantized.requantize.
    `shift` is one int (per tensor) or a tuple with one int per channel; a negative shift is a
    left shift. ReLU is lo=0; ReLU6-like clips narrow hi."""
    shift: int | tuple[int, ...] = 0
    lo: int = INT8_MIN
    hi: int = INT8_MAX

    @property
    def per_channel(self) -> bool:
        return isinstance(self.shift, tuple)

    def shifts(self, channels: int) -> tuple[int, ...]:
        return self.shift if self.per_channel else (self.shift,) * channels


@dataclass(frozen=True, slots=True)
class Conv2d:
    """Conv (int8 x int8 -> int32, int32 bias) then Requantize. `in_shape` is NCHW; weights
    are OIHW with I = in_channels / groups. pads = (top, left, bottom, right)."""
    name: str
    in_shape: tuple[int, int, int, int]
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    groups: int = 1
    requant: Requant = Requant()
    op: str = "Conv"          # the op as the user's graph names it, for messages

    @property
    def out_hw(self) -> tuple[int, int]:
        return window_out_hw(self.in_shape, self.kernel, self.stride, self.pads)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.in_shape[0], self.out_channels) + self.out_hw

    @property
    def macs(self) -> int:
        n, c = self.in_shape[:2]
        oh, ow = self.out_hw
        return n * self.out_channels * oh * ow * (c // self.groups) * self.kernel[0] * self.kernel[1]


@dataclass(frozen=True, slots=True)
class Dense:
    """Gemm: (batch x in_features) int8 times weight (out_features x in_features) int8, i.e.
    ONNX Gemm with transB=1, plus int32 bias, then Requantize."""
    name: str
    batch: int
    in_features: int
    out_features: int
    requant: Requant = Requant()
    op: str = "Gemm"          # Gemm or MatMul, as the user's graph names it, for messages

    def as_conv(self) -> Conv2d:
        """The same computation as a 1x1 convolution on a 1x1 image (identical packed bytes)."""
        return Conv2d(self.name, (self.batch, self.in_features, 1, 1), self.out_features,
                      (1, 1), requant=self.requant, op=self.op)

    @property
    def out_shape(self) -> tuple[int, int]:
        return (self.batch, self.out_features)


@dataclass(frozen=True, slots=True)
class ResidualAdd:
    """QAdd of two int8 NCHW tensors of one shape: clip(round((a << shift_a) + (b << shift_b),
    out_shift), lo, hi)."""
    name: str
    shape: tuple[int, int, int, int]
    shift_a: int = 0
    shift_b: int = 0
    out_shift: int = 0
    lo: int = INT8_MIN
    hi: int = INT8_MAX

    @property
    def requant(self) -> Requant:
        return Requant(self.out_shift, self.lo, self.hi)


@dataclass(frozen=True, slots=True)
class RequantizeLayer:
    """Requantize alone on an int8 or int32 NCHW tensor: ReLU (shift 0, lo 0), a clip, or a
    rescale. in_dtype 'int32' reads a packed int32 tensor."""
    name: str
    shape: tuple[int, int, int, int]
    requant: Requant = Requant()
    in_dtype: str = "int8"


@dataclass(frozen=True, slots=True)
class Pool2d:
    """MaxPool ('max') or average pooling ('avg') of an int8 NCHW tensor. Average pooling is
    sum-then-shift: Requantize(Conv(x, ones, group=C), shift=log2(kh*kw)) with half-up
    rounding, which needs a power-of-two window and counts padding (count_include_pad=1)."""
    name: str
    kind: str
    in_shape: tuple[int, int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    lo: int = INT8_MIN
    hi: int = INT8_MAX

    @property
    def out_hw(self) -> tuple[int, int]:
        return window_out_hw(self.in_shape, self.kernel, self.stride, self.pads)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return self.in_shape[:2] + self.out_hw

    @property
    def shift(self) -> int:
        return (self.kernel[0] * self.kernel[1]).bit_length() - 1


Layer = Conv2d | Dense | ResidualAdd | RequantizeLayer | Pool2d


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


def conv_groups(layer: Conv2d, cfg: VTAConfig) -> tuple[int, int, bool] | str:
    """(input blocks per group, output blocks per group, depthwise) or the reason the grouping
    does not map onto whole BLOCK_IN x BLOCK_OUT weight blocks."""
    c, o, g = layer.in_shape[1], layer.out_channels, layer.groups
    bi, bo = cfg.block_in, cfg.block_out
    if g == 1:
        return -(-c // bi), -(-o // bo), False
    if c % g or o % g:
        return f"groups={g} does not divide {c} input / {o} output channels"
    if g == c == o:
        if bi != bo:
            return f"depthwise needs BLOCK_IN == BLOCK_OUT (config has {bi} and {bo})"
        return 1, 1, True        # each channel block against its own diagonal weight block
    if (c // g) % bi == 0 and (o // g) % bo == 0:
        return (c // g) // bi, (o // g) // bo, False
    return (f"groups={g} with {c // g} input / {o // g} output channels per group is neither "
            f"depthwise nor a multiple of BLOCK_IN={bi} / BLOCK_OUT={bo}")


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
