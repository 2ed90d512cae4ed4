"""ResNet-18 (basic blocks), ResNet-50 and ResNet-152 (bottlenecks), ResNeXt-50 32x4d
(grouped bottlenecks), a RegNetY-400MF-shaped net (grouped 3x3 with squeeze-and-excitation)
and a ResNeSt-14d-shaped net (split attention), laid out as torchvision's / timm's export."""
from __future__ import annotations

from functools import partial

import onnx

from .builder import OnnxBuilder, scaled

# A residual branch's last norm is scaled down so that summing 8..16 branches keeps the
# activations O(1) (random weights have no training to keep them in check).
RESIDUAL_GAMMA = 0.3


def _stem(b: OnnxBuilder, x: str, width: float) -> str:
    y = b.conv(x, scaled(64, width), 7, "conv1", stride=2, pad=3)
    y = b.relu(b.batchnorm(y, "bn1"), "relu")
    return b.maxpool(y, 3, 2, "maxpool", pad=1)


def _downsample(b: OnnxBuilder, x: str, cout: int, stride: int, scope: str) -> str:
    if stride == 1 and b.channels(x) == cout:
        return x
    y = b.conv(x, cout, 1, f"{scope}.downsample.0", stride=stride, pad=0)
    return b.batchnorm(y, f"{scope}.downsample.1")


def _basic_block(b: OnnxBuilder, x: str, planes: int, stride: int, scope: str) -> str:
    y = b.conv(x, planes, 3, f"{scope}.conv1", stride=stride)
    y = b.relu(b.batchnorm(y, f"{scope}.bn1"), f"{scope}.relu")
    y = b.conv(y, planes, 3, f"{scope}.conv2")
    y = b.batchnorm(y, f"{scope}.bn2", gamma_scale=RESIDUAL_GAMMA)
    y = b.add(y, _downsample(b, x, planes, stride, scope), f"{scope}.add")
    return b.relu(y, f"{scope}.relu_1")


def _bottleneck(b: OnnxBuilder, x: str, planes: int, stride: int, scope: str,
                groups: int = 1, base_width: int = 64) -> str:
    # torchvision's "ResNet v1.5": the stride sits on the 3x3 conv, not the first 1x1.
    # ResNeXt widens the 3x3 to `groups` groups of `base_width` / 64 * planes channels.
    width = planes * base_width // 64 * groups
    y = b.conv(x, width, 1, f"{scope}.conv1", pad=0)
    y = b.relu(b.batchnorm(y, f"{scope}.bn1"), f"{scope}.relu")
    y = b.conv(y, width, 3, f"{scope}.conv2", stride=stride, groups=groups)
    y = b.relu(b.batchnorm(y, f"{scope}.bn2"), f"{scope}.relu_1")
    y = b.conv(y, planes * 4, 1, f"{scope}.conv3", pad=0)
    y = b.batchnorm(y, f"{scope}.bn3", gamma_scale=RESIDUAL_GAMMA)
    y = b.add(y, _downsample(b, x, planes * 4, stride, scope), f"{scope}.add")
    return b.relu(y, f"{scope}.relu_2")


def _resnet(name: str, block, layers: tuple[int, ...], size: int, batch: int, num_classes: int,
            width: float, opset: int, seed: int) -> onnx.ModelProto:
    b = OnnxBuilder(name, opset, seed)
    y = _stem(b, b.input("input", (batch, 3, size, size)), width)
    for i, n_blocks in enumerate(layers):
        planes = scaled(64 * 2 ** i, width)
        for j in range(n_blocks):
            stride = 2 if (i > 0 and j == 0) else 1
            y = block(b, y, planes, stride, f"layer{i + 1}.{j}")
    y = b.flatten(b.global_avgpool(y, "avgpool"), "flatten")
    b.output(b.gemm(y, num_classes, "fc"))
    return b.model()


def resnet18(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
             opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18: four stages of two basic blocks (He et al. 2016)."""
    return _resnet("resnet18", _basic_block, (2, 2, 2, 2), size, batch, num_classes, width,
                   opset, seed)


def resnet50(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
             opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """ResNet-50: bottleneck blocks (1x1 reduce, 3x3, 1x1 expand x4) in stages 3-4-6-3."""
    return _resnet("resnet50", _bottleneck, (3, 4, 6, 3), size, batch, num_classes, width,
                   opset, seed)


def resnet152(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
              opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """ResNet-152: bottleneck blocks in stages 3-8-36-3 (the DNNVM paper's deepest network)."""
    return _resnet("resnet152", _bottleneck, (3, 8, 36, 3), size, batch, num_classes, width,
                   opset, seed)


def resnext50(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
              opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """ResNeXt-50 32x4d (Xie et al. 2017): ResNet-50's stages with each bottleneck's 3x3 split
    into 32 groups of 4 channels per 64 planes (the grouped convolution accelerators must
    handle beyond depthwise)."""
    return _resnet("resnext50", partial(_bottleneck, groups=32, base_width=4), (3, 4, 6, 3),
                   size, batch, num_classes, width, opset, seed)


def _se(b: OnnxBuilder, x: str, channels: int, scope: str) -> str:
    """Squeeze-and-excitation: global pool, 1x1 reduce + ReLU, 1x1 expand + Sigmoid, scale."""
    s = b.global_avgpool(x, f"{scope}.pool")
    s = b.relu(b.conv(s, channels, 1, f"{scope}.fc1", pad=0, bias=True), f"{scope}.act")
    s = b.conv(s, b.channels(x), 1, f"{scope}.fc2", pad=0, bias=True)
    return b.binary("Mul", x, b._node("Sigmoid", f"{scope}.gate", [s], b.shape(s)), scope)


def _regnet_y_block(b: OnnxBuilder, x: str, width: int, stride: int, group_width: int,
                    scope: str) -> str:
    cin = b.channels(x)
    y = b.conv_bn(x, width, 1, f"{scope}.conv1", pad=0)
    y = b.conv_bn(y, width, 3, f"{scope}.conv2", stride=stride, groups=width // group_width)
    y = _se(b, y, max(1, cin // 4), f"{scope}.se")
    y = b.conv_bn(y, width, 1, f"{scope}.conv3", pad=0, act=None, gamma_scale=RESIDUAL_GAMMA)
    if stride != 1 or cin != width:
        x = b.conv_bn(x, width, 1, f"{scope}.downsample", stride=stride, pad=0, act=None)
    return b.relu(b.add(y, x, f"{scope}.add"), f"{scope}.relu")


def regnet_y(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
             opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """RegNetY-400MF's shape (Radosavovic et al. 2020): a 3x3/2 stem of 32, then stages of
    widths 48, 104, 208, 440 (x `width`, kept multiples of the group width 8) and depths
    1, 3, 6, 6 of blocks with a grouped 3x3 (8 channels per group) and squeeze-and-excitation."""
    b = OnnxBuilder("regnet_y", opset, seed)
    y = b.conv_bn(b.input("input", (batch, 3, size, size)), 32, 3, "stem", stride=2)
    for i, (w, depth) in enumerate(zip((48, 104, 208, 440), (1, 3, 6, 6))):
        w = scaled(w, width, divisor=8)
        for j in range(depth):
            y = _regnet_y_block(b, y, w, 2 if j == 0 else 1, 8, f"s{i + 1}.b{j + 1}")
    y = b.flatten(b.global_avgpool(y, "head.pool"), "head.flatten")
    b.output(b.gemm(y, num_classes, "head.fc"))
    return b.model()


def _split_attention(b: OnnxBuilder, x: str, width: int, scope: str, radix: int = 2) -> str:
    """ResNeSt's split-attention 3x3 (radix splits, cardinality 1): a grouped conv to radix x
    width, the splits summed, pooled and squeezed through two 1x1 convs, a softmax across the
    splits (rSoftmax), and the splits weighted by it and summed."""
    n, _, h, w = b.shape(x)
    y = b.conv_bn(x, width * radix, 3, f"{scope}.conv", groups=radix)
    y5 = b.reshape(y, (n, radix, width, h, w), f"{scope}.splits")
    a = b.global_avgpool(b.reduce_sum(y5, [1], f"{scope}.sum", keepdims=0), f"{scope}.pool")
    a = b.conv_bn(a, max(width * radix // 4, 32), 1, f"{scope}.fc1", pad=0)
    a = b.conv(a, width * radix, 1, f"{scope}.fc2", pad=0, bias=True)
    a = b.softmax(b.reshape(a, (n, radix, width, 1, 1), f"{scope}.rsoftmax"), f"{scope}.rsoftmax",
                  axis=1)
    return b.reduce_sum(b.binary("Mul", y5, a, f"{scope}.attend"), [1], f"{scope}.out",
                        keepdims=0)


def _resnest_block(b: OnnxBuilder, x: str, planes: int, stride: int, scope: str) -> str:
    cin = b.channels(x)
    y = b.conv_bn(x, planes, 1, f"{scope}.conv1", pad=0)
    y = _split_attention(b, y, planes, f"{scope}.conv2")
    if stride > 1:   # ResNeSt's "avd": the stride as a 3x3 average pool after the 3x3
        y = b.avgpool(y, 3, stride, f"{scope}.avd_last", pad=1)
    y = b.conv_bn(y, planes * 4, 1, f"{scope}.conv3", pad=0, act=None,
                  gamma_scale=RESIDUAL_GAMMA)
    if stride > 1 or cin != planes * 4:   # "avg_down" shortcut
        s = b.avgpool(x, stride, stride, f"{scope}.downsample.0") if stride > 1 else x
        x = b.conv_bn(s, planes * 4, 1, f"{scope}.downsample.1", pad=0, act=None)
    return b.relu(b.add(y, x, f"{scope}.add"), f"{scope}.relu")


def resnest14d(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
               opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """ResNeSt-14d's shape (Zhang et al. 2022, timm's resnest14d): a deep 3-conv stem, one
    bottleneck per stage whose 3x3 is split attention (radix 2), the stride as an average pool
    after it, average-pool shortcuts. Needs size >= 32."""
    b = OnnxBuilder("resnest14d", opset, seed)
    y = b.input("input", (batch, 3, size, size))
    stem = scaled(32, width)
    y = b.conv_bn(y, stem, 3, "conv1.0", stride=2)
    y = b.conv_bn(y, stem, 3, "conv1.3")
    y = b.conv_bn(y, 2 * stem, 3, "conv1.6")
    y = b.maxpool(y, 3, 2, "maxpool", pad=1)
    for i in range(4):
        y = _resnest_block(b, y, scaled(64 * 2 ** i, width), 1 if i == 0 else 2, f"layer{i + 1}.0")
    y = b.flatten(b.global_avgpool(y, "global_pool"), "flatten")
    b.output(b.gemm(y, num_classes, "fc"))
    return b.model()
