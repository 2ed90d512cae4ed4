"""Check an import against onnxruntime: run the original ONNX model there on the same inputs
and compare each output with what retarget's reference executor computed.

The measure is the largest absolute difference over the largest magnitude onnxruntime gave
for that output (relative to the output's scale, so one near-zero element does not dominate).
onnxruntime is optional; asking for the check without it is a clear error.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import RetargetError

DEFAULT_TOLERANCE = 1e-5


@dataclass(frozen=True, slots=True)
class OutputDiff:
    name: str
    max_abs_error: float
    scale: float            # the largest |value| onnxruntime gave
    tolerance: float

    @property
    def relative_error(self) -> float:
        if self.scale == 0.0:
            return 0.0 if self.max_abs_error == 0.0 else float("inf")
        return self.max_abs_error / self.scale

    @property
    def ok(self) -> bool:
        return self.relative_error <= self.tolerance


def run_onnxruntime(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise RetargetError("the onnxruntime check needs the onnxruntime package "
                            "(pip install onnxruntime)") from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {k: np.asarray(v) for k, v in inputs.items()})))


@dataclass(frozen=True, slots=True)
class OrtIntegerArithmetic:
    """How onnxruntime's CPU provider accumulates u8 x s8 products (QLinearConv, QLinearMatMul,
    MatMulInteger, and the QDQ graphs it fuses into them) on this machine.

    MLAS picks its integer GEMM kernel by CPUID. With VNNI (AVX512-VNNI or AVX-VNNI) or AMX it
    accumulates every product exactly in int32, which is the ONNX specification's arithmetic.
    On AVX2, and on AVX-512 without VNNI, it uses vpmaddubsw, which adds each two neighbouring
    products along the reduction into an int16 with saturation: a pair whose sum leaves
    [-32768, 32767] is clipped, so a conv over large activations and weights of one sign comes
    out smaller than the exact sum. (onnxruntime documents this as the reason for its
    `reduce_range` option: 7-bit weights keep every pair within int16.) `exact` is measured,
    not inferred: `ort_integer_arithmetic` runs one MatMulInteger whose pair overflows."""
    exact: bool
    probe: int          # what onnxruntime computed for 255*127 + 255*127 (exactly 64770)

    def __str__(self) -> str:
        if self.exact:
            return "onnxruntime's u8 x s8 kernels on this CPU accumulate exactly in int32"
        if self.probe == 32767:
            return ("onnxruntime's u8 x s8 kernels on this CPU (AVX2 or AVX-512 without VNNI) "
                    "saturate each pair of products to int16, so its integer results can differ "
                    "from the ONNX specification's exact arithmetic (quantising weights to 7 "
                    "bits, onnxruntime's reduce_range, avoids it)")
        return (f"onnxruntime's u8 x s8 kernels on this CPU compute 255*127 + 255*127 as "
                f"{self.probe}, not 64770: its integer results are not exact here")


    def exact_for(self, model: onnx.ModelProto) -> bool:
        """Whether onnxruntime computes `model`'s integer products exactly here: always with
        exact kernels, and with pair-saturating ones when every int8 initializer (the
        weights) lies in [-64, 64], where a pair is at most 255 * 64 * 2 = 32640 and never
        clips (what onnxruntime's reduce_range quantisation guarantees)."""
        if self.exact:
            return True
        for t in model.graph.initializer:
            if t.data_type == onnx.TensorProto.INT8:
                w = numpy_helper.to_array(t)
                if w.size and int(np.abs(w.astype(np.int16)).max()) > 64:
                    return False
        return True


_PAIR = 64770  # 255*127 + 255*127: above int16's 32767, so a saturating pair clips it


@functools.cache
def ort_integer_arithmetic() -> OrtIntegerArithmetic:
    """Measure (once per process) whether onnxruntime's u8 x s8 integer kernels are exact on
    this CPU; see OrtIntegerArithmetic. Needs onnxruntime."""
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "pair_probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    y = run_onnxruntime(model, {"a": np.full((1, 2), 255, np.uint8),
                                "b": np.full((2, 1), 127, np.int8)})["y"]
    got = int(y.reshape(-1)[0])
    return OrtIntegerArithmetic(got == _PAIR, got)


def matching_output(want: dict, name: str, shape) -> np.ndarray:
    """onnxruntime's output `name` from `want`, which must exist and have `shape` (else an
    error naming it)."""
    if name not in want:
        raise RetargetError(f"output {name!r}: onnxruntime gives no such output "
                            f"(it gives {sorted(want)})")
    ref = np.asarray(want[name])
    if ref.shape != tuple(shape):
        raise RetargetError(f"output {name!r}: shape {list(shape)} here, "
                            f"{list(ref.shape)} from onnxruntime")
    return ref


def compare_with_onnxruntime(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray],
                             outputs: Mapping[str, np.ndarray],
                             tolerance: float = DEFAULT_TOLERANCE) -> list[OutputDiff]:
    """One OutputDiff per output of `outputs` (retarget's), against onnxruntime's run of
    `model` on `inputs`. An output onnxruntime does not give, or gives in another shape, is an
    error naming it."""
    want = run_onnxruntime(model, inputs)
    diffs = []
    for name, got in outputs.items():
        ref = matching_output(want, name, got.shape)
        a, b = got.astype(np.float64), ref.astype(np.float64)
        err = float(np.abs(a - b).max()) if a.size else 0.0
        scale = float(np.abs(b).max()) if b.size else 0.0
        diffs.append(OutputDiff(name, err, scale, tolerance))
    return diffs


def format_diffs(diffs: list[OutputDiff]) -> str:
    lines = ["onnxruntime check:"]
    for d in diffs:
        verdict = "ok" if d.ok else f"FAIL (tolerance {d.tolerance:g})"
        lines.append(f"  {d.name}: max |error| {d.max_abs_error:.3g} over max |value| "
                     f"{d.scale:.3g} = {d.relative_error:.3g} relative  {verdict}")
    return "\n".join(lines)
