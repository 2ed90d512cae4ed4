"""A zoo of well-known networks as ONNX models with seeded random weights.

Each builder returns an `onnx.ModelProto` shaped like a PyTorch export (unfused
BatchNormalization, Flatten + Gemm heads, ReLU6 as Clip, and in AlexNet the Shape -> Gather ->
Unsqueeze -> Concat -> Reshape chain older exports emit), with He-scaled weights so activations
stay O(1). They all take the same keywords:

    size (input height = width), batch, num_classes, width (channel multiplier), opset
    (11..18; default 17), seed

    from retarget import zoo
    model = zoo.build("resnet18", size=64, num_classes=10)   # an onnx.ModelProto
    zoo.NAMES    # resnet18 resnet50 resnet152 resnext50 regnet_y resnest14d vgg11 vgg16 vgg19 alexnet squeezenet googlenet mobilenet_v1 mobilenet_v2
                 # unet (ConvTranspose up-path) unet_resize (nearest Resize up-path)
                 # vit convnext mobilevit levit (transformer era: LayerNorm, attention, GELU)

The model's input is named "input" (float32, batch x 3 x size x size) and its output "output".
"""
from __future__ import annotations

from typing import Callable

import onnx

from .builder import OnnxBuilder, scaled
from .classic import alexnet, squeezenet, vgg11, vgg16, vgg19
from .googlenet import googlenet
from .mobilenet import mobilenet_v1, mobilenet_v2
from .resnet import regnet_y, resnest14d, resnet18, resnet50, resnet152, resnext50
from .transformer import convnext, levit, mobilevit, vit
from .unet import unet, unet_resize
from ..data import DATA_DIR
from .skeleton import load_filled

BUILDERS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "resnet152": resnet152,
    "resnext50": resnext50,
    "regnet_y": regnet_y,
    "resnest14d": resnest14d,
    "vgg11": vgg11,
    "vgg16": vgg16,
    "vgg19": vgg19,
    "alexnet": alexnet,
    "squeezenet": squeezenet,
    "googlenet": googlenet,
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "unet": unet,
    "unet_resize": unet_resize,
    "vit": vit,
    "convnext": convnext,
    "mobilevit": mobilevit,
    "levit": levit,
}
NAMES: tuple[str, ...] = tuple(BUILDERS)

# The smallest input size each network accepts (its pools/strides need at least this much).
MIN_SIZE = {"alexnet": 63, "resnest14d": 32, "squeezenet": 17, "vit": 16, "convnext": 32, "mobilevit": 32, "levit": 64, "unet": 8, "unet_resize": 8}


def build(name: str, **kwargs) -> onnx.ModelProto:
    """Build the zoo network `name` (see NAMES) with the given keywords (size, batch,
    num_classes, width, opset, seed, plus per-network extras documented on each builder)."""
    try:
        fn = BUILDERS[name]
    except KeyError:
        raise KeyError(f"unknown zoo network {name!r}; known: {', '.join(NAMES)}") from None
    return fn(**kwargs)


def build_bytes(name: str, **kwargs) -> bytes:
    """The serialized ONNX model, ready to write to a .onnx file."""
    return build(name, **kwargs).SerializeToString()


__all__ = ["NAMES", "BUILDERS", "MIN_SIZE", "EXPORTS", "build", "build_bytes", "exported", "OnnxBuilder", "scaled"] + list(NAMES)


# Real PyTorch exports of timm networks (scripts/export_timm.py), shipped as graphs whose
# weights are regenerated on load (zoo/skeleton.py). Input "input" [1, 3, 224, 224], output
# "output" [1, 1000].
def _export_dir():
    return DATA_DIR / "timm"


EXPORTS: tuple[str, ...] = (
    "vit_tiny_patch16_224", "deit_tiny_patch16_224", "swin_tiny_patch4_window7_224",
    "convnext_atto", "poolformer_s12", "mobilevitv2_050", "efficientvit_b0", "levit_128s",
    "resnest14d", "regnety_004",
)


def exported(name: str, seed: int = 0) -> onnx.ModelProto:
    """The timm network `name` (see EXPORTS) as PyTorch exported it at opset 17, with seeded
    random weights of the recorded statistics."""
    if name not in EXPORTS:
        raise KeyError(f"no shipped export {name!r}; shipped: {', '.join(EXPORTS)}")
    return load_filled(_export_dir() / f"{name}.onnx.gz", seed)
