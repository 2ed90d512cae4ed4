"""The plain conv stacks: AlexNet (with LRN, as in the 2012 paper) and VGG-11/16."""
from __future__ import annotations

import onnx

from .builder import OnnxBuilder, scaled


def _classifier(b: OnnxBuilder, y: str, hidden: int, num_classes: int) -> str:
    # Dropout is absent, as in an eval-mode export.
    y = b.relu(b.gemm(y, hidden, "classifier.1", relu_follows=True), "classifier.2")
    y = b.relu(b.gemm(y, hidden, "classifier.4", relu_follows=True), "classifier.5")
    return b.gemm(y, num_classes, "classifier.6")


def alexnet(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
            opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """AlexNet (Krizhevsky et al. 2012) with its LRN layers, in torchvision's channel counts.

    The classifier input is flattened by `x.view(x.size(0), -1)` as PyTorch 1.x exported it
    (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), which importers must simplify.
    Needs size >= 63 (three 3x3/2 max-pools after a stride-4 conv)."""
    b = OnnxBuilder("alexnet", opset, seed)
    y = b.input("input", (batch, 3, size, size))
    y = b.relu(b.conv(y, scaled(64, width), 11, "features.0", stride=4, pad=2, bias=True),
               "features.1")
    y = b.lrn(y, "features.lrn1")
    y = b.maxpool(y, 3, 2, "features.2")
    y = b.relu(b.conv(y, scaled(192, width), 5, "features.3", pad=2, bias=True), "features.4")
    y = b.lrn(y, "features.lrn2")
    y = b.maxpool(y, 3, 2, "features.5")
    for i, c in ((6, 384), (8, 256), (10, 256)):
        y = b.relu(b.conv(y, scaled(c, width), 3, f"features.{i}", bias=True), f"features.{i + 1}")
    y = b.maxpool(y, 3, 2, "features.12")
    y = b.flatten_by_shape(y, "view")
    b.output(_classifier(b, y, scaled(4096, width), num_classes))
    return b.model()


VGG_CONFIGS = {
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"),
    "vgg19": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"),
}


def _vgg(name: str, size: int, batch: int, num_classes: int, width: float, opset: int,
         seed: int) -> onnx.ModelProto:
    b = OnnxBuilder(name, opset, seed)
    y = b.input("input", (batch, 3, size, size))
    i = 0
    for c in VGG_CONFIGS[name]:
        if c == "M":
            y = b.maxpool(y, 2, 2, f"features.{i}")
            i += 1
        else:
            y = b.relu(b.conv(y, scaled(c, width), 3, f"features.{i}", bias=True),
                       f"features.{i + 1}")
            i += 2
    y = b.flatten(y, "flatten")
    b.output(_classifier(b, y, scaled(4096, width), num_classes))
    return b.model()


def vgg11(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
          opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """VGG-11 (configuration A of Simonyan & Zisserman 2015), no batch norm.

    The classifier reads the whole final feature map (512 x size/32 x size/32), so the first
    Gemm is large at 224 px (25088 x 4096); use `width` to shrink it. Needs size >= 32."""
    return _vgg("vgg11", size, batch, num_classes, width, opset, seed)


def vgg16(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
          opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """VGG-16 (configuration D), no batch norm. Needs size >= 32."""
    return _vgg("vgg16", size, batch, num_classes, width, opset, seed)


def vgg19(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
          opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """VGG-19 (configuration E), no batch norm: the network swTVM evaluates. Needs size >= 32."""
    return _vgg("vgg19", size, batch, num_classes, width, opset, seed)


def _fire(b: OnnxBuilder, x: str, squeeze: int, expand: int, scope: str) -> str:
    """A Fire module: a 1x1 squeeze, then 1x1 and 3x3 expands concatenated on channels."""
    s = b.relu(b.conv(x, squeeze, 1, f"{scope}.squeeze", bias=True), f"{scope}.squeeze_activation")
    e1 = b.relu(b.conv(s, expand, 1, f"{scope}.expand1x1", bias=True),
                f"{scope}.expand1x1_activation")
    e3 = b.relu(b.conv(s, expand, 3, f"{scope}.expand3x3", bias=True),
                f"{scope}.expand3x3_activation")
    return b.concat([e1, e3], f"{scope}.cat")


def squeezenet(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
               opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """SqueezeNet 1.1 (Iandola et al. 2016, torchvision's squeezenet1_1): Fire modules, ceil-mode
    max-pools, and a 1x1 conv classifier averaged globally. Needs size >= 17."""
    b = OnnxBuilder("squeezenet", opset, seed)
    y = b.input("input", (batch, 3, size, size))
    y = b.relu(b.conv(y, scaled(64, width), 3, "features.0", stride=2, pad=0, bias=True),
               "features.1")
    y = b.maxpool(y, 3, 2, "features.2", ceil=True)
    # (torchvision index, squeeze, expand), or (index, None, None) for a max-pool
    for idx, sq, ex in ((3, 16, 64), (4, 16, 64), (5, None, None), (6, 32, 128), (7, 32, 128),
                        (8, None, None), (9, 48, 192), (10, 48, 192), (11, 64, 256),
                        (12, 64, 256)):
        if sq is None:
            y = b.maxpool(y, 3, 2, f"features.{idx}", ceil=True)
        else:
            y = _fire(b, y, scaled(sq, width), scaled(ex, width), f"features.{idx}")
    y = b.relu(b.conv(y, num_classes, 1, "classifier.1", bias=True), "classifier.2")
    y = b.flatten(b.global_avgpool(y, "classifier.3"), "flatten")
    b.output(y)
    return b.model()
