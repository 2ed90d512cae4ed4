"""Export timm networks at random weights to ONNX (opset 17) and write their graphs, without
the weights, to src/retarget/data/timm/ (retarget.zoo.skeleton: the weights are regenerated
with the same statistics when loaded).

Needs torch, torchvision and timm, which retarget itself does not:

    python -m venv /tmp/timmenv
    /tmp/timmenv/bin/pip install torch==2.14.1 torchvision==0.29.1 timm onnx numpy
    PYTHONPATH=src /tmp/timmenv/bin/python scripts/export_timm.py [names...]

The full export (with its random weights) must pass onnx's checker before it is written.
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import onnx
import timm
import torch

from retarget.zoo.skeleton import save_stripped

# The transformer-era networks retarget is tested on, by timm's names; all at 224 x 224, batch 1.
MODELS = (
    "vit_tiny_patch16_224",
    "deit_tiny_patch16_224",
    "swin_tiny_patch4_window7_224",
    "convnext_atto",
    "poolformer_s12",
    "mobilevitv2_050",
    "efficientvit_b0",
    "levit_128s",
    "resnest14d",
    "regnety_004",
)
OUT = Path(__file__).resolve().parents[1] / "src" / "retarget" / "data" / "timm"


def randomise_batchnorm(model: torch.nn.Module) -> None:
    """Give every BatchNorm random statistics and affine parameters. timm zero-initialises the
    last BatchNorm of each residual block, and the exporter folds BatchNorm into the conv
    before it, so those convs would otherwise be exported with all-zero weights."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(0.1 * torch.randn(n))
            m.running_var.copy_(0.5 + torch.rand(n))
            if m.affine:
                m.weight.data.copy_(0.5 + torch.rand(n))
                m.bias.data.copy_(0.1 * torch.randn(n))


def export(name: str, opset: int = 17) -> onnx.ModelProto:
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    with torch.no_grad():
        randomise_batchnorm(model)
    x = torch.randn(1, 3, 224, 224)
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, (x,), buf, opset_version=opset, dynamo=False,
                          input_names=["input"], output_names=["output"])
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto)
    proto.doc_string = f"timm {timm.__version__} {name}, torch {torch.__version__}, opset {opset}"
    return proto


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(MODELS))
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        proto = export(name)
        n = save_stripped(proto, OUT / f"{name}.onnx.gz")
        print(f"{name:32s} {len(proto.graph.node):5d} nodes  {proto.ByteSize() / 1e6:7.1f} MB -> "
              f"{n / 1e3:7.1f} kB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
