"""The functions `retarget` exports (the package's __init__ resolves them from here)."""
from __future__ import annotations

from .compiler import compile as _compile
from .errors import InputError
from .frontend.onnx import load_onnx
from .frontend.tflite import is_tflite_path, load_tflite
from .frontend.torch import from_torch as _from_torch
from .ops.reference import run_graph as run
from .passes.quantize import quantize as _quantize


def load(path, input_shapes=None, simplify: bool = True):
    """Import an ONNX model file, or a TFLite flatbuffer (`.tflite`: an int8 model in its own
    integer arithmetic, docs/quantization.md), as a Graph (simplified unless simplify=False)."""
    if is_tflite_path(path):
        if input_shapes:
            raise InputError(f"{path}: a TFLite model's input shapes are fixed in the file; "
                             f"input_shapes does not apply")
        return load_tflite(path, simplify=simplify)
    return load_onnx(path, input_shapes=input_shapes, simplify=simplify)


def compile(graph, target="cpu", **options):
    """Partition and lower `graph` for `target`; returns a runnable, savable Module.
    See retarget.compiler.compile for the options."""
    return _compile(graph, target, **options)


def from_torch(module, example_input, simplify: bool = True):
    """Import a PyTorch module by exporting it to ONNX in memory."""
    return _from_torch(module, example_input, simplify=simplify)


def quantize(graph, calibration_inputs=None, per_channel: bool = False, **options):
    """Post-training int8 quantisation with power-of-two scales (docs/quantization.md).

    calibration_inputs: sample inputs (a dict name -> array, a list of dicts, or one array
    for a single-input graph); None calibrates on random data with a warning."""
    return _quantize(graph, calibration_inputs, per_channel=per_channel, **options)


__all__ = ["compile", "from_torch", "load", "quantize", "run"]
