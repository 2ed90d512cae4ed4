"""Pre-quantised models: import time, and how exactly each place that runs them reproduces the
runtime that made them.

    python benchmarks/bench_quantised_import.py [--models lenet,mobilenet,...] [--samples 8]
                                                [--sources tflite,qdq]
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
- `c`: the int8-tflite graph compiled for the c target (generated C, OpenMP, the default
  -O3 -march=native build: targets/c/routines_tflite.py) against LiteRT's reference kernels
  on the same inputs; the table adds how many of the graph's nodes run on `c` (the rest would
  be on the CPU reference) and whether the module equals retarget's reference executor ("self");
- each accelerator (`vta`, `nvdla`, `dnnvm`): the model compiled for it (re-quantised in the
  accelerator's own number format, calibrated on `--samples` inputs of seed 0) against LiteRT's
  reference kernels on the seed-1 inputs. Each compiled module is also checked bit for bit
  against retarget's integer reference of its format (the table's "self" column).

The table also prints how far LiteRT's default CPU kernels (`OpResolverType.AUTO`: XNNPACK
and the optimised kernels) are from its reference kernels on the same inputs: they differ.

For every ONNX QDQ test model (`retarget.zoo.ort_quantized.MODELS`, quantised here by
onnxruntime's `quantize_static`: `qdq_<model>_<u8|s8>[_pc]`, u8 or s8 activations, per tensor or
per channel; onnxruntime is the runtime):

- `ops`: nodes in the QDQ file;
- `import_s`: wall time of `load_quantized(model, scales="onnxruntime")` (best of 3);
- `reference`: retarget's reference executor on that graph against onnxruntime's CPU run of the
  file (default session options: graph optimisation on, so its fused integer kernels), on
  `--samples` seeded standard-normal inputs, in output LSBs (the output DequantizeLinear's
  scale). Whether onnxruntime's own integer kernels are exact on this CPU is printed below the
  table (OrtIntegerArithmetic); where they are not, part of the difference is onnxruntime's;
- `c`: the int8-ort graph compiled for the c target (generated C: targets/c/routines_ort.py,
  its u8 values moved to s8 by targets/c/unsigned_shift.py) against onnxruntime on the same
  inputs, in output LSBs; the table adds how many nodes run on `c` and whether the module
  equals the reference executor ("self");
- each accelerator: the file compiled for it (its formats have no zero points, and vta /
  dnnvm only power-of-two scales, so the model is re-quantised from its float form,
  calibrated on `--samples` inputs of seed 0) against onnxruntime on the seed-1 inputs, in
  output LSBs (report.deviation.qdq_deviation), and checked bit for bit against retarget's
  integer reference of its own format ("self").

--json writes exactly {"<model>": {"ops": N, "import_s": S, "<where>": {"exact_vs_runtime":
bool, "max_lsb_diff": int}}} with <where> in reference, c and the accelerators (null where
not available).

Adding other pre-quantised models: give `SOURCES` another entry, name -> (list of model
names, function(name, args) -> the per-model dict above).
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from typing import Callable

import numpy as np

import retarget
from retarget.table import format_table

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
           "reference": _result(_max_diff(ours, runtime, q))}
    notes = {"default_kernels": _max_diff(_litert(buf, xs, reference=False), runtime, q)}
    row["c"], notes["c_self"], notes["c_nodes"] = _on_c(graph, xs, ours, runtime, q)
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


def _on_c(graph, xs, reference, runtime, q) -> tuple[dict, bool, str]:
    """The int8-tflite graph as generated C: its result against the runtime, whether it
    equals the reference executor's outputs `reference`, and "<on c>/<nodes>"."""
    module = retarget.compile(graph, "c")
    try:
        got = [next(iter(module.run({graph.inputs[0].name: x}).values())) for x in xs]
        placed = sum(p.placement == "c" for p in module.report.nodes)
        nodes = f"{placed}/{len(module.report.nodes)}"
    finally:
        module.close()
    exact = all(np.array_equal(a, b) for a, b in zip(got, reference))
    return _result(_max_diff(got, runtime, q)), exact, nodes


# ---- ONNX QDQ models against onnxruntime ------------------------------------------------------
QDQ_VARIANTS = {"u8": ("uint8", False), "u8_pc": ("uint8", True), "s8": ("int8", False),
                "s8_pc": ("int8", True)}


def _qdq_names() -> list[str]:
    from retarget.zoo.ort_quantized import MODELS
    return [f"qdq_{m}_{v}" for m in MODELS for v in QDQ_VARIANTS]


def _qdq_model(name: str):
    from retarget.zoo.ort_quantized import MODELS, ort_quantized
    base, variant = next((m, name[len(f"qdq_{m}_"):]) for m in MODELS
                         if name.startswith(f"qdq_{m}_") and name[len(f"qdq_{m}_"):] in
                         QDQ_VARIANTS)
    activations, per_channel = QDQ_VARIANTS[variant]
    return ort_quantized(base, activations=activations, per_channel=per_channel)


def measure_qdq(name: str, args) -> dict:
    import tempfile
    from pathlib import Path

    import onnx

    from retarget.frontend.onnx_quantized import float_accumulations, load_quantized, qdq_error
    from retarget.report.deviation import qdq_deviation
    from retarget.zoo.ort_quantized import model_inputs
    m = _qdq_model(name)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        graph = load_quantized(m, scales="onnxruntime")
        times.append(time.perf_counter() - t0)
    xs = model_inputs(m, args.samples, seed=1)
    errs = qdq_error(m, graph, xs)
    lsb = max(e.max_lsb for e in errs.values())
    row = {"ops": len(m.graph.node), "import_s": min(times), "reference": _result(lsb)}
    notes = {"float_groups": len(float_accumulations(graph))}
    module = retarget.compile(graph, "c")
    try:
        row["c"] = _result(max(d.max_lsb for d in qdq_deviation(module, m, xs)))
        notes["c_self"] = _self_exact(module, graph, xs)
        placed = sum(p.placement == "c" for p in module.report.nodes)
        notes["c_nodes"] = f"{placed}/{len(module.report.nodes)}"
    finally:
        module.close()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.onnx"
        onnx.save(m, path)
        calibration = model_inputs(m, args.samples, seed=0)
        for target in args.targets:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # "re-quantising the QDQ model ..."
                module = retarget.compile(str(path), target, calibration=calibration)
            row[target] = _result(max(d.max_lsb for d in qdq_deviation(module, m, xs)))
            notes[f"{target}_self"] = _self_exact(module, module.graph, xs)
    row["_notes"] = notes
    return row


def _self_exact(module, graph, xs) -> bool:
    """Whether `module` equals the reference executor on `graph` on every input."""
    return all(np.array_equal(module.run(x)[k], y) for x in xs
               for k, y in retarget.run(graph, x).items())


# source -> (model names, measure(name, args) -> row)
def _tflite_names() -> list[str]:
    from retarget.zoo.tflite import MODELS
    return list(MODELS)


SOURCES: dict[str, tuple[Callable[[], list[str]], Callable]] = {
    "tflite": (_tflite_names, measure_tflite),
    "qdq": (_qdq_names, measure_qdq),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated (default: all)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--sources", default=",".join(SOURCES),
                    help=f"comma-separated, of {', '.join(SOURCES)} (default: all)")
    ap.add_argument("--targets", default=",".join(ACCELERATORS))
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args()
    args.targets = [t for t in args.targets.split(",") if t]
    wanted = None if args.models is None else set(args.models.split(","))
    results, rows = {}, []
    sources = [s for s in args.sources.split(",") if s]
    unknown = set(sources) - set(SOURCES)
    if unknown:
        ap.error(f"unknown source(s) {', '.join(sorted(unknown))}; known: {', '.join(SOURCES)}")
    for source in sources:
        names, measure = SOURCES[source]
        for name in names():
            if wanted is not None and name not in wanted:
                continue
            r = measure(name, args)
            notes = r.pop("_notes", {})
            results[name] = r

            def cell(where):
                v = r[where]["max_lsb_diff"]
                return "n/a" if v is None else str(v)

            def accel(t):
                return f"{cell(t)} ({'exact' if notes.get(f'{t}_self') else 'DIFFERS'})"

            c = accel("c") if "c_self" in notes else cell("c")
            if "c_nodes" in notes:
                c += f" {notes['c_nodes']} on c"
            other = notes.get("default_kernels", notes.get("float_groups", ""))
            rows.append([name, source, r["ops"], f"{1e3 * r['import_s']:.1f}", cell("reference"),
                         str(other), c] + [accel(t) for t in args.targets])
    print(format_table(["model", "source", "ops", "import ms", "reference",
                        "LiteRT default / float groups", "c (self)"] +
                       [f"{t} (self)" for t in args.targets], rows))
    print("max |diff| in output LSBs against the runtime: LiteRT's reference kernels (tflite), "
          "onnxruntime's CPU run (qdq); 'LiteRT default': its default CPU kernels against its "
          "reference kernels; 'float groups': Conv / Gemm that onnxruntime (and so the import) "
          "runs in float32; (self): the module against retarget's integer reference of its own "
          "format, and for c how many of the graph's nodes run as C; the accelerators "
          "re-quantise both kinds of model in their own formats")
    if any(row[1] == "qdq" for row in rows):
        from retarget.frontend.ort_check import ort_integer_arithmetic
        print(f"onnxruntime on this CPU: {ort_integer_arithmetic()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
