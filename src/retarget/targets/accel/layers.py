"""Layer descriptions an integer accelerator's lowering takes: small frozen dataclasses of
shapes and integer parameters (no arrays; weights and biases are passed to the lowering call).

Each layer's integer meaning is the op table's (ops/nn.py Conv, ops/linalg.py Gemm,
ops/quantized.py Requantize / QAdd, ops/pool.py MaxPool); `reference.py` composes exactly those
ops. `graph_layers.py` builds them from a quantised graph's nodes; what a given accelerator can
lower is its own `reason` function.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ops.quantized import INT8_MAX, INT8_MIN


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


__all__ = ["Conv2d", "Dense", "Layer", "Pool2d", "Requant", "RequantizeLayer", "ResidualAdd",
           "window_out_hw"]
