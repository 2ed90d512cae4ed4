"""Transformer-era networks on vta: the shipped timm exports at 224 x 224.

    python benchmarks/bench_transformers.py [--nets vit_tiny_patch16_224,...] [--json FILE]

Per network: the reference's error against onnxruntime (largest |error| over largest |value|),
MACs, the share of MACs on vta, whether vta's run is bit-exact with the integer reference, and
the compile and run times (one calibration input, seeded random data; one run each).

--json writes {"networks": [{"name", "macs", "macs_on_vta", "vta_share", "ort_rel_error",
"bit_exact", "compile_s", "run_s"}, ...]}.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.frontend.ort_check import compare_with_onnxruntime
from retarget.table import format_table
from retarget.ops.reference import run_graph


def measure(name: str) -> dict:
    model = zoo.exported(name)
    rng = np.random.default_rng(0)
    x = {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    graph = import_model(model)
    (diff,) = compare_with_onnxruntime(model, x, retarget.run(graph, x))
    calib = [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}]
    t0 = time.perf_counter()
    m = retarget.compile(graph, "vta", calibration=calib)
    t1 = time.perf_counter()
    got = m.run(x)
    t2 = time.perf_counter()
    exact = bool(np.array_equal(got["output"], run_graph(m.graph, x)["output"]))
    s = m.report.summary
    macs = s["macs_on_target"] + s["macs_on_cpu"]
    m.close()
    return {"name": name, "macs": int(macs), "macs_on_vta": int(s["macs_on_target"]),
            "vta_share": s["macs_on_target"] / macs, "ort_rel_error": diff.relative_error,
            "bit_exact": exact, "compile_s": t1 - t0, "run_s": t2 - t1}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default=",".join(zoo.EXPORTS))
    ap.add_argument("--json", default=None, help="write the per-network figures here")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rows, results = [], []
    for name in args.nets.split(","):
        r = measure(name)
        results.append(r)
        rows.append([name, f"{r['macs'] / 1e6:,.0f}", f"{100 * r['vta_share']:.2f} %",
                     f"{r['ort_rel_error']:.2e}", "yes" if r["bit_exact"] else "NO",
                     f"{r['compile_s']:.1f}", f"{r['run_s']:.1f}"])
        print(f"  {name}: done", flush=True)
    print(format_table(["network", "M MACs", "on vta", "vs onnxruntime", "bit-exact",
                        "compile s", "run s"], rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"networks": results}, fh, indent=1)
        print(f"wrote {args.json}")
    return 0 if all(r["bit_exact"] and r["ort_rel_error"] <= 1e-5 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
