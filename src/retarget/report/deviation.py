"""How far a compiled module's integer outputs are from the arithmetic of the runtime that
made the model, for a pre-quantised model compiled for an accelerator that re-quantises it in
its own number format (vta: power-of-two shifts; nvdla: 16-bit multipliers), per output, in
steps (LSBs) of the model's own output quantisation:

- a TFLite int8 model: against retarget's int8-tflite reference (bit-exact with LiteRT's
  reference kernels), `tflite_deviation`;
- an ONNX QDQ model (onnxruntime's quantize_static): against onnxruntime's run of the file,
  `qdq_deviation`.

The module itself stays bit-exact with retarget's integer reference of *its* format (`retarget
run --check`); this report is the other question: how much the change of number format moves
the result away from what the model was validated on.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..ir.graph import Graph
from ..ops.quantized_tflite import quantize_affine
from ..frontend.onnx import read_onnx
from ..frontend.onnx_quantized import output_grid
from ..frontend.ort_check import matching_output, run_onnxruntime
from ..frontend.tflite import dequantized_outputs, io_quantization, load_tflite, real_inputs
from ..ops.quantized import quantize_linear
from ..ops.reference import run_graph


@dataclass(frozen=True, slots=True)
class OutputDeviation:
    output: str
    max_lsb: int            # largest |module - runtime| over all samples, in output steps
    mean_lsb: float
    differ: float           # fraction of output values that differ
    values: int             # output values compared
    samples: int

    @property
    def exact(self) -> bool:
        return self.max_lsb == 0


def in_output_steps(y: np.ndarray, q) -> np.ndarray:
    """An output as integers in the model's output steps: an int8 output as it is; a float
    one (a float result for an int8 output, or an output the model dequantises) quantised
    with the model's scale and zero point for it, `q` (TFLite's rounding, int8 range)."""
    if np.dtype(y.dtype).kind != "f":
        return y.astype(np.int64)
    if q is None:
        raise ValueError("a float output the model does not quantise has no LSB to measure in")
    return quantize_affine(y, scale=q.s, zero_point=q.z, dtype="int8").astype(np.int64)


def output_quantization(model, reference: Graph) -> dict:
    """Per output of the model, the quantisation its LSBs are counted in."""
    return io_quantization(model) | dequantized_outputs(reference)


def tflite_deviation(module, model, inputs: list[dict[str, np.ndarray]],
                     reference: Graph | None = None) -> list[OutputDeviation]:
    """`module` (compiled from the .tflite `model`, in either form) against the model's own
    int8 arithmetic on `inputs` (the model's inputs: int8 for an int8 model), per output in
    the model's output steps (`in_output_steps`)."""
    ref = reference if reference is not None else load_tflite(model)
    quant, out_quant = io_quantization(model), output_quantization(model, ref)
    floats = any(v.type is not None and v.type.dtype == "float32" and v.name in quant
                 for v in module.graph.inputs)
    diffs: dict[str, list[np.ndarray]] = {v.name: [] for v in ref.outputs}
    for x in inputs:
        want = run_graph(ref, x)
        got = module.run(real_inputs(quant, x) if floats else x)
        for name, w in want.items():
            d = in_output_steps(got[name], out_quant.get(name)) - \
                in_output_steps(w, out_quant.get(name))
            diffs[name].append(np.abs(d).ravel())
    return _summarised(diffs, len(inputs))


def on_qdq_grid(y: np.ndarray, grid: tuple[np.ndarray, np.ndarray] | None, name: str
                ) -> np.ndarray:
    """A float output of a QDQ model in its output steps: quantised with the scale and zero
    point of the DequantizeLinear that produces it (ONNX's QuantizeLinear: half to even,
    saturated to its u8 / s8 range), so onnxruntime's own output comes back to its integers
    exactly and another result lands on the grid the model can express."""
    if grid is None:
        raise ValueError(f"output {name!r} is not dequantised by the model: it has no LSB to "
                         f"measure in")
    s, z = grid
    return quantize_linear(np.asarray(y, np.float32), s, z, axis=1, saturate=1, block_size=0,
                           output_dtype=0, precision=0).astype(np.int64)


def qdq_deviation(module, model, inputs: list[dict[str, np.ndarray]]) -> list[OutputDeviation]:
    """`module` (compiled from the QDQ file `model`, path or ModelProto, re-quantised) against
    onnxruntime's run of the file on `inputs` (the file's float inputs), per output in the
    model's output steps (`on_qdq_grid`)."""
    proto = model if isinstance(model, onnx.ModelProto) else read_onnx(model)
    names = [o.name for o in proto.graph.output]
    diffs: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for x in inputs:
        want, got = run_onnxruntime(proto, x), module.run(x)
        for name in names:
            g = np.asarray(got[name])
            w = matching_output(want, name, g.shape)
            grid = output_grid(proto, name)
            diffs[name].append(np.abs(on_qdq_grid(g, grid, name) -
                                      on_qdq_grid(w, grid, name)).ravel())
    return _summarised(diffs, len(inputs))


def _summarised(diffs: dict[str, list[np.ndarray]], samples: int) -> list[OutputDeviation]:
    out = []
    for name, ds in diffs.items():
        d = np.concatenate(ds) if ds else np.zeros(0, np.int64)
        out.append(OutputDeviation(name, int(d.max()) if d.size else 0,
                                   float(d.mean()) if d.size else 0.0,
                                   float((d != 0).mean()) if d.size else 0.0, int(d.size),
                                   samples))
    return out


RUNTIMES = {"tflite": "int8-tflite reference = LiteRT's reference kernels",
            "qdq": "onnxruntime's CPU run of the QDQ file"}


def format_deviation(devs: list[OutputDeviation], target: str, where: str,
                     runtime: str = "tflite") -> str:
    lines = [f"deviation of {target}'s integer result from the model's own runtime "
             f"({RUNTIMES[runtime]}), on {where}:"]
    for d in devs:
        lines.append(f"  {d.output}: max |diff| {d.max_lsb} LSB, mean {d.mean_lsb:.2f}, "
                     f"{100 * d.differ:.1f} % of {d.values} values differ")
    return "\n".join(lines)


__all__ = ["OutputDeviation", "format_deviation", "in_output_steps", "on_qdq_grid",
           "output_quantization", "qdq_deviation", "tflite_deviation"]
