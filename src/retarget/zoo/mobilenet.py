"""MobileNet v1 (depthwise-separable convs) and v2 (inverted residuals), ReLU6 as Clip."""
from __future__ import annotations

import onnx

from .builder import OnnxBuilder, scaled

# MobileNet v1 body after the stem: (output channels, stride) of each depthwise-separable block.
V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
             (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))

# MobileNet v2: (expansion t, output channels c, repeats n, first stride s), Sandler et al. Table 2.
V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v1(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
                 opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """MobileNet v1 (Howard et al. 2017): 3x3 stem, 13 blocks of depthwise 3x3 + pointwise
    1x1, each followed by batch norm and ReLU6; global average pool; Gemm. Needs size >= 32."""
    b = OnnxBuilder("mobilenet_v1", opset, seed)
    y = b.input("input", (batch, 3, size, size))
    y = b.conv_bn(y, scaled(32, width), 3, "features.0", stride=2, act="relu6")
    for i, (c, s) in enumerate(V1_BLOCKS, start=1):
        cin = b.channels(y)
        y = b.conv_bn(y, cin, 3, f"features.{i}.dw", stride=s, groups=cin, act="relu6")
        y = b.conv_bn(y, scaled(c, width), 1, f"features.{i}.pw", pad=0, act="relu6")
    y = b.flatten(b.global_avgpool(y, "avgpool"), "flatten")
    b.output(b.gemm(y, num_classes, "classifier"))
    return b.model()


def _inverted_residual(b: OnnxBuilder, x: str, cout: int, stride: int, t: int,
                       scope: str) -> str:
    cin = b.channels(x)
    hidden = cin * t
    residual = stride == 1 and cin == cout
    y = x
    if t != 1:
        y = b.conv_bn(y, hidden, 1, f"{scope}.expand", pad=0, act="relu6")
    y = b.conv_bn(y, hidden, 3, f"{scope}.dw", stride=stride, groups=hidden, act="relu6")
    # The projection is linear (no activation): the paper's point about low-dim ReLUs.
    y = b.conv_bn(y, cout, 1, f"{scope}.project", pad=0, act=None,
                  gamma_scale=0.5 if residual else 1.0)
    return b.add(y, x, f"{scope}.add") if residual else y


def mobilenet_v2(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
                 opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """MobileNet v2 (Sandler et al. 2018): inverted residual blocks (1x1 expand, depthwise 3x3,
    linear 1x1 projection, skip Add when shapes match), a 1x1 conv to 1280 channels, global
    average pool, Flatten, Gemm. Needs size >= 32."""
    b = OnnxBuilder("mobilenet_v2", opset, seed)
    y = b.input("input", (batch, 3, size, size))
    y = b.conv_bn(y, scaled(32, width), 3, "features.0", stride=2, act="relu6")
    i = 1
    for t, c, n, s in V2_SETTINGS:
        for j in range(n):
            y = _inverted_residual(b, y, scaled(c, width), s if j == 0 else 1, t,
                                   f"features.{i}")
            i += 1
    y = b.conv_bn(y, scaled(1280, max(1.0, width)), 1, f"features.{i}", pad=0, act="relu6")
    y = b.flatten(b.global_avgpool(y, "avgpool"), "flatten")
    b.output(b.gemm(y, num_classes, "classifier.1"))
    return b.model()
