"""PyTorch frontend: nn.Module -> Graph through an in-memory ONNX export.

Going through ONNX keeps one importer (frontend/onnx.py) for both paths. The export uses
PyTorch's TorchScript-based exporter (`dynamo=False`): it ships with torch and works offline.
torch >= 2.9 defaults to the torch.export-based exporter, which needs the separate
`onnxscript` package; it is used only when the TorchScript exporter is gone and onnxscript is
installed.
"""
from __future__ import annotations

import io
import warnings
from typing import Sequence

import onnx

from ..errors import ModelLoadError
from ..ir.graph import Graph
from .onnx import import_model

# The exporter writes this opset; the importer reads 11..21.
TORCH_EXPORT_OPSET = 17


def _torch():
    try:   # optional heavy dependency (the torch extra): imported only when used
        import torch
    except ImportError:
        raise ImportError("the PyTorch frontend needs torch: pip install retarget[torch]") from None
    return torch


def export_onnx(module, example_input, input_names: Sequence[str] | None = None,
                opset: int = TORCH_EXPORT_OPSET) -> onnx.ModelProto:
    """Export `module` (in eval mode, without gradients) to an ONNX ModelProto in memory."""
    torch = _torch()
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    names = list(input_names) if input_names is not None else (
        ["input"] if len(args) == 1 else [f"input{i}" for i in range(len(args))])
    if len(names) != len(args):
        raise ValueError(f"input_names has {len(names)} names for {len(args)} example inputs")
    was_training = module.training
    module.eval()  # BatchNorm uses running stats, Dropout is the identity
    buf = io.BytesIO()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # The TorchScript exporter announces its deprecation on every call.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            try:
                torch.onnx.export(module, args, buf, dynamo=False, input_names=names,
                                  opset_version=opset, do_constant_folding=True)
            except TypeError as e:  # an exporter without the dynamo switch / TorchScript path
                if "dynamo" not in str(e):
                    raise
                _export_dynamo(torch, module, args, buf, names, opset)
    except ImportError as e:
        raise ModelLoadError(f"torch.onnx.export needs a package that is missing: {e}") from None
    finally:
        module.train(was_training)
    return onnx.load_from_string(buf.getvalue())


def _export_dynamo(torch, module, args, buf, names, opset) -> None:
    try:   # optional dependency of torch's dynamo exporter: imported only when used
        import onnxscript  # noqa: F401
    except ImportError:
        raise ModelLoadError("this torch has only the torch.export-based ONNX exporter, which "
                             "needs onnxscript: pip install onnxscript") from None
    program = torch.onnx.export(module, args, dynamo=True, input_names=names, opset_version=opset)
    buf.write(program.model_proto.SerializeToString())


def from_torch(module, example_input, simplify: bool = True,
               input_names: Sequence[str] | None = None) -> Graph:
    """Import a PyTorch module; the graph's input shapes are those of `example_input`.

    `example_input` is a tensor or a tuple of tensors; `input_names` names the graph inputs
    ("input", or "input0", "input1", ... by default)."""
    model = export_onnx(module, example_input, input_names)
    return import_model(model, simplify=simplify)
