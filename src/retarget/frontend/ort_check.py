"""Check an import against onnxruntime: run the original ONNX model there on the same inputs
and compare each output with what retarget's reference executor computed.

The measure is the largest absolute difference over the largest magnitude onnxruntime gave
for that output (relative to the output's scale, so one near-zero element does not dominate).
onnxruntime is optional; asking for the check without it is a clear error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import onnx

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
    try:   # optional heavy dependency (the test extra): imported only when used
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
