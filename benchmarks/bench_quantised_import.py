"""Pre-quantised models: import time, and how exactly each place that runs them reproduces the
runtime that made them.

    python benchmarks/bench_quantised_import.py [--models lenet,mobilenet,...] [--samples 8]
                                                [--targets vta,nvdla,dnnvm] [--json FILE]

For every TFLite test model (`retarget.zoo.tflite.MODELS`: int8, written and calibrated here
without TensorFlow; LiteRT, `ai-edge-litert`, is the runtime):

- `ops`: operators in the flatbuffer;
- `import_s`: wall time of `load_tflite` (parse, import, transpose cancellation, simplify;
  best of 3);
- `reference`: retarget's reference executor on the int8-tflite graph against LiteRT's
  reference kernels (`OpResolverType.BUILTIN_REF`), output for output, on `--samples` inputs
  (the test models' calibration distribution, quantised, seed 1): `exact_vs_runtime` and
  `max_lsb_diff` (in the model's output steps);
- `c`: the c target has no int8 mode on this branch: both fields are null (not available);
- each accelerator (`vta`, `nvdla`, `dnnvm`): the model compiled for it (re-quantised in the
  accelerator's own number format, calibrated on `--samples` inputs of seed 0) against LiteRT's
  reference kernels on the seed-1 inputs. Each compiled module is also checked bit for bit
  against retarget's integer reference of its format (the table's "self" column).

The table also prints how far LiteRT's default CPU kernels (`OpResolverType.AUTO`: XNNPACK
and the optimised kernels) are from its reference kernels on the same inputs: they differ.

--json writes exactly {"<model>": {"ops": N, "import_s": S, "<where>": {"exact_vs_runtime":
bool, "max_lsb_diff": int}}} with <where> in reference, c and the accelerators.

Adding other pre-quantised models (ONNX QDQ against onnxruntime): give `SOURCES` another entry,
name -> (list of model names, function(name, args) -> the per-model dict above).
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from typing import Callable

import numpy as np

import retarget
from retarget.report.table import format_table

ACCELERATORS = ("vta", "nvdla", "dnnvm")


def _litert(buf: bytes, xs: list[np.ndarray], reference: bool) -> list[np.ndarray]:
    from retarget.frontend.litert_check import run_litert
    return run_litert(buf, xs, reference=reference)


def _max_diff(a: list[np.ndarray], b: list[np.ndarray], q) -> int:
    """Largest difference in the model's output steps (report.deviation.in_output_steps)."""
    from retarget.report.deviation import in_output_steps
    return max(int(np.abs(in_output_steps(x, q) - in_output_steps(y, q)).max())
               for x, y in zip(a, b))


def _result(max_lsb: int | None) -> dict:
    return {"exact_vs_runtime": None if max_lsb is None else max_lsb == 0,
            "max_lsb_diff": max_lsb}


def measure_tflite(name: str, args) -> dict:
    from retarget.frontend.tflite import TFLiteImporter, io_quantization, load_tflite, real_inputs
    from retarget.report.deviation import output_quantization
    from retarget.zoo.tflite import model_inputs, tflite_model
    buf = tflite_model(name)
    ops = TFLiteImporter(buf, "int8", name).sub.OperatorsLength()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        graph = load_tflite(buf)
        times.append(time.perf_counter() - t0)
    xs = model_inputs(buf, args.samples, seed=1)
    quant = io_quantization(buf)
    q = output_quantization(buf, graph).get(graph.outputs[0].name)
    runtime = _litert(buf, xs, reference=True)
    ours = [next(iter(retarget.run(graph, {graph.inputs[0].name: x}).values())) for x in xs]
    row = {"ops": ops, "import_s": min(times),
           "reference": _result(_max_diff(ours, runtime, q)),
           "c": _result(None)}
    notes = {"default_kernels": _max_diff(_litert(buf, xs, reference=False), runtime, q)}
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.tflite"
        path.write_bytes(buf)
        calibration = np.concatenate(model_inputs(buf, args.samples, seed=0))
        for target in args.targets:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = retarget.compile(str(path), target, calibration=calibration)
            got, self_exact = [], True
            for x in xs:
                feed = real_inputs(quant, {graph.inputs[0].name: x})
                y = next(iter(module.run(feed).values()))
                self_exact &= bool(np.array_equal(
                    y, next(iter(retarget.run(module.graph, feed).values()))))
                got.append(y)
            row[target] = _result(_max_diff(got, runtime, q))
            notes[f"{target}_self"] = self_exact
    row["_notes"] = notes
    return row


# source -> (model names, measure(name, args) -> row). Hook: add "qdq" for ONNX QDQ models.
def _tflite_names() -> list[str]:
    from retarget.zoo.tflite import MODELS
    return list(MODELS)


SOURCES: dict[str, tuple[Callable[[], list[str]], Callable]] = {
    "tflite": (_tflite_names, measure_tflite),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated (default: all)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--targets", default=",".join(ACCELERATORS))
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args()
    args.targets = [t for t in args.targets.split(",") if t]
    wanted = None if args.models is None else set(args.models.split(","))
    results, rows = {}, []
    for source, (names, measure) in SOURCES.items():
        for name in names():
            if wanted is not None and name not in wanted:
                continue
            r = measure(name, args)
            notes = r.pop("_notes", {})
            results[name] = r

            def cell(where):
                v = r[where]["max_lsb_diff"]
                return "n/a" if v is None else str(v)
            rows.append([name, source, r["ops"], f"{1e3 * r['import_s']:.1f}", cell("reference"),
                         str(notes.get("default_kernels", "")), cell("c")] +
                        [f"{cell(t)} ({'exact' if notes.get(f'{t}_self') else 'DIFFERS'})"
                         for t in args.targets])
    print(format_table(["model", "source", "ops", "import ms", "reference", "LiteRT default",
                        "c"] + [f"{t} (self)" for t in args.targets], rows))
    print("max |diff| in output LSBs against LiteRT's reference kernels; 'LiteRT default': its "
          "default CPU kernels against its reference kernels; (self): the module against "
          "retarget's integer reference of its own format; c: no int8 mode (n/a)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
