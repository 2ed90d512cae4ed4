"""Run a .tflite model on LiteRT (`ai-edge-litert`, TFLite's runtime), the way the tests and
the benchmark compare retarget with it (the counterpart of ort_check.py for onnxruntime).

LiteRT's default CPU kernels (XNNPACK and the optimised kernels) do not compute the same
integers as its reference kernels; retarget's int8-tflite format equals the reference ones, so
`reference=True` (the default) selects them (docs/quantization.md).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError


def _interpreter(model: bytes, reference: bool):
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise InputError("comparing with LiteRT needs `pip install ai-edge-litert`") from None
    kind = OpResolverType.BUILTIN_REF if reference else OpResolverType.AUTO
    it = Interpreter(model_content=model, experimental_op_resolver_type=kind)
    it.allocate_tensors()
    return it


def litert_outputs(model: bytes, feeds: dict[str, np.ndarray], reference: bool = True
                   ) -> dict[str, np.ndarray]:
    """Every output of `model` (flatbuffer bytes) by tensor name, for inputs by tensor name."""
    it = _interpreter(model, reference)
    for d in it.get_input_details():
        if d["name"] not in feeds:
            raise InputError(f"LiteRT: no value for input {d['name']!r}")
        it.set_tensor(d["index"], np.asarray(feeds[d["name"]], d["dtype"]))
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}


def run_litert(model: bytes, inputs: list[np.ndarray], reference: bool = True
               ) -> list[np.ndarray]:
    """The first output of a single-input `model` for each input."""
    it = _interpreter(model, reference)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    ys = []
    for x in inputs:
        it.set_tensor(inp["index"], x)
        it.invoke()
        ys.append(it.get_tensor(out["index"]).copy())
    return ys


__all__ = ["litert_outputs", "run_litert"]
