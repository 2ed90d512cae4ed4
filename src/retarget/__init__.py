"""retarget: retarget trained neural networks to new hardware.

Public API
- load(path, input_shapes=None) -> Graph        import an ONNX or TFLite file
- from_torch(module, example_input) -> Graph    import a PyTorch module (needs the torch extra)
- run(graph, inputs, intermediates=False)        run on the NumPy reference executor
- quantize(graph, calibration_inputs=None, per_channel=False) -> Graph
                                                 int8 with power-of-two scales
- compile(graph, target="cpu", cpu_nodes=(), min_region_macs=None, config=None,
          calibration=None) -> Module           prepare (vta: quantise), partition and lower
                                                 for a target (compiler.py)
"""
from .errors import RetargetError
from .ir import Graph, Node, TensorType, Value
from .targets.cpu.reference import run_graph as run

__version__ = "0.1.0"


def load(path, input_shapes=None, simplify: bool = True):
    """Import an ONNX model file, or a TFLite flatbuffer (`.tflite`: an int8 model in its own
    integer arithmetic, docs/quantization.md), as a Graph (simplified unless simplify=False)."""
    from .frontend.tflite import is_tflite_path
    if is_tflite_path(path):
        if input_shapes:
            from .errors import InputError
            raise InputError(f"{path}: a TFLite model's input shapes are fixed in the file; "
                             f"input_shapes does not apply")
        from .frontend.tflite import load_tflite
        return load_tflite(path, simplify=simplify)
    from .frontend.onnx import load_onnx
    return load_onnx(path, input_shapes=input_shapes, simplify=simplify)


def compile(graph, target="cpu", **options):
    """Partition and lower `graph` for `target`; returns a runnable, savable Module.
    See retarget.compiler.compile for the options."""
    from .compiler import compile as _compile
    return _compile(graph, target, **options)


def from_torch(module, example_input, simplify: bool = True):
    """Import a PyTorch module by exporting it to ONNX in memory."""
    from .frontend.torch import from_torch as _from_torch
    return _from_torch(module, example_input, simplify=simplify)


def quantize(graph, calibration_inputs=None, per_channel: bool = False, **options):
    """Post-training int8 quantisation with power-of-two scales (docs/quantization.md).

    calibration_inputs: sample inputs (a dict name -> array, a list of dicts, or one array
    for a single-input graph); None calibrates on random data with a warning."""
    from .passes.quantize import quantize as _quantize
    return _quantize(graph, calibration_inputs, per_channel=per_channel, **options)


__all__ = ["Graph", "Node", "TensorType", "Value", "RetargetError", "load", "from_torch", "run",
           "compile", "quantize"]
