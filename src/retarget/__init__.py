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

The names are defined in api.py and resolved here on first use (PEP 562). The package is
also the home of processes that need one small part of it, such as the nvdla compiler
(`python -m retarget.targets.nvdla.compile`, started once per offloaded region): importing
the whole compiler, its frontends and targets on every such start cost 0.3 s each.
"""
from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

_API = {"Graph": "ir", "Node": "ir", "TensorType": "ir", "Value": "ir",
        "RetargetError": "errors", "InputError": "errors",
        "load": "api", "from_torch": "api", "run": "api", "compile": "api", "quantize": "api"}


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'retarget' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value          # resolved once; later lookups never come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})


__all__ = ["Graph", "Node", "TensorType", "Value", "RetargetError", "load", "from_torch", "run",
           "compile", "quantize"]
