"""GoogLeNet / Inception v1 (Szegedy et al. 2015) in torchvision's layout with batch norm."""
from __future__ import annotations

import onnx

from .builder import OnnxBuilder, scaled

# (name, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection) from the paper's Table 1.
INCEPTION = {
    "inception3a": (64, 96, 128, 16, 32, 32),
    "inception3b": (128, 128, 192, 32, 96, 64),
    "inception4a": (192, 96, 208, 16, 48, 64),
    "inception4b": (160, 112, 224, 24, 64, 64),
    "inception4c": (128, 128, 256, 24, 64, 64),
    "inception4d": (112, 144, 288, 32, 64, 64),
    "inception4e": (256, 160, 320, 32, 128, 128),
    "inception5a": (256, 160, 320, 32, 128, 128),
    "inception5b": (384, 192, 384, 48, 128, 128),
}
# Max-pools between the stages: after the stem, after 3b and after 4e.
POOL_AFTER = {"inception3b": ("maxpool3", 3), "inception4e": ("maxpool4", 2)}


def _basic_conv(b: OnnxBuilder, x: str, cout: int, k: int, scope: str, stride: int = 1) -> str:
    return b.conv_bn(x, cout, k, scope, stride=stride, eps=1e-3)


def _inception(b: OnnxBuilder, x: str, cfg: tuple[int, ...], width: float, scope: str) -> str:
    c1, r3, c3, r5, c5, pp = (scaled(c, width) for c in cfg)
    b1 = _basic_conv(b, x, c1, 1, f"{scope}.branch1")
    b2 = _basic_conv(b, _basic_conv(b, x, r3, 1, f"{scope}.branch2.0"), c3, 3,
                     f"{scope}.branch2.1")
    b3 = _basic_conv(b, _basic_conv(b, x, r5, 1, f"{scope}.branch3.0"), c5, 5,
                     f"{scope}.branch3.1")
    # The pooling branch: 3x3 max-pool, stride 1, same size, then a 1x1 projection.
    p = b.maxpool(x, 3, 1, f"{scope}.branch4.0", pad=1, ceil=True)
    b4 = _basic_conv(b, p, pp, 1, f"{scope}.branch4.1")
    return b.concat([b1, b2, b3, b4], f"{scope}.cat", axis=1)


def googlenet(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
              opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """GoogLeNet: a 7x7 stem, nine Inception blocks with four concatenated branches each
    (1x1; 1x1->3x3; 1x1->5x5; 3x3 max-pool->1x1), ceil-mode max-pools between stages,
    global average pool and a Gemm head. No auxiliary classifiers (eval-mode export).
    Needs size >= 32."""
    b = OnnxBuilder("googlenet", opset, seed)
    y = b.input("input", (batch, 3, size, size))
    y = _basic_conv(b, y, scaled(64, width), 7, "conv1", stride=2)
    y = b.maxpool(y, 3, 2, "maxpool1", ceil=True)
    y = _basic_conv(b, y, scaled(64, width), 1, "conv2")
    y = _basic_conv(b, y, scaled(192, width), 3, "conv3")
    y = b.maxpool(y, 3, 2, "maxpool2", ceil=True)
    for name, cfg in INCEPTION.items():
        y = _inception(b, y, cfg, width, name)
        if name in POOL_AFTER:
            pool_name, k = POOL_AFTER[name]
            y = b.maxpool(y, k, 2, pool_name, ceil=True)
    y = b.flatten(b.global_avgpool(y, "avgpool"), "flatten")
    b.output(b.gemm(y, num_classes, "fc"))
    return b.model()
