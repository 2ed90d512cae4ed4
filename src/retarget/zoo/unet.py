"""A small U-Net (Ronneberger et al. 2015): an encoder of double convs and max-pools, a decoder
that upsamples (ConvTranspose, or nearest Resize + conv) and concatenates the skip connection."""
from __future__ import annotations

import onnx

from .builder import OnnxBuilder, scaled

UPSAMPLE_MODES = ("transpose", "resize")


def _double_conv(b: OnnxBuilder, x: str, cout: int, scope: str) -> str:
    y = b.conv_bn(x, cout, 3, f"{scope}.0")
    return b.conv_bn(y, cout, 3, f"{scope}.1")


def unet(size: int = 64, batch: int = 1, num_classes: int = 2, width: float = 1.0,
         opset: int = 17, seed: int = 0, depth: int = 3,
         upsample: str = "transpose") -> onnx.ModelProto:
    """U-Net with `depth` down/up levels starting at 32*width channels (doubling per level).

    upsample='transpose': 2x2 stride-2 ConvTranspose (the paper's up-convolution);
    upsample='resize': nearest Resize x2 then a 3x3 conv. Output: per-pixel class scores
    (batch, num_classes, size, size). `size` must be a multiple of 2**depth."""
    if upsample not in UPSAMPLE_MODES:
        raise ValueError(f"upsample must be one of {UPSAMPLE_MODES}, got {upsample!r}")
    if size % (2 ** depth):
        raise ValueError(f"unet: size {size} must be a multiple of 2**depth = {2 ** depth}")
    b = OnnxBuilder(f"unet_{upsample}", opset, seed)
    y = b.input("input", (batch, 3, size, size))
    base = scaled(32, width)
    skips = []
    for level in range(depth):
        y = _double_conv(b, y, base * 2 ** level, f"down{level}")
        skips.append(y)
        y = b.maxpool(y, 2, 2, f"pool{level}")
    y = _double_conv(b, y, base * 2 ** depth, "bottleneck")
    for level in reversed(range(depth)):
        c = base * 2 ** level
        if upsample == "transpose":
            y = b.conv_transpose(y, c, 2, 2, f"up{level}.upconv")
        else:
            y = b.conv_bn(b.resize_nearest(y, 2, f"up{level}.upsample"), c, 3, f"up{level}.reduce")
        y = b.concat([skips[level], y], f"up{level}.cat", axis=1)
        y = _double_conv(b, y, c, f"up{level}.conv")
    b.output(b.conv(y, num_classes, 1, "head", pad=0, bias=True))
    return b.model()


def unet_resize(size: int = 64, batch: int = 1, num_classes: int = 2, width: float = 1.0,
                opset: int = 17, seed: int = 0, depth: int = 3) -> onnx.ModelProto:
    """The U-Net with nearest-neighbour Resize upsampling instead of ConvTranspose."""
    return unet(size, batch, num_classes, width, opset, seed, depth, upsample="resize")
