"""The nvdla target's compile time, simulator speed and modelled frame rate (ResNet-18,
ResNet-50, GoogLeNet at 224, batch 1, on nv_small and nv_full).

    python benchmarks/bench_nvdla.py [--nets resnet18,resnet50,googlenet] [--size 224]
                                     [--configs nv_small,nv_full] [--runs 3] [--json FILE]

Per network and config:

- `compile_s`: wall time of `retarget.compile(prepared, "nvdla:<config>")`, where `prepared`
  is the network already quantised for nvdla (`retarget.compiler.prepare`, calibrated on one
  random input; done once per network, outside the timing: both configs share the number
  format). So it includes partitioning, writing each region's export document (JSON + .npz),
  the separate compiler process per region and loading its loadable, and excludes
  calibration / quantisation. Note: the quantised graph keeps QuantizeLinear /
  DequantizeLinear at its float edges, so `prepare` inside that compile takes its QDQ branch
  (`convert_quantized`, which rewrites nothing here but copies and re-types the graph); that
  is in `compile_s`, and the table prints it apart ("prep s"). "compiler s" is the sum of the
  kernels' `compiler_run.seconds` (the processes, start-up included).
- `sim_gmacs`: MACs the nvdla device executed (its `macs` counter) / the wall seconds of the
  nvdla regions of one `module.run` (the sum of `module.profile`'s nvdla RegionProfile
  seconds: simulation plus packing and host <-> device copies; the CPU regions are left out),
  the best of `--runs` runs after one warm-up. The whole run's wall time is printed too.
- `fps_model`: 1 / the sum of the nvdla kernels' throughput-model `timing().seconds`: the
  modelled time of the hardware layers only. The CPU regions (input quantise, global average
  pooling, output dequantise, ...) are not modelled, so this is an upper bound on the frame
  rate of the whole network on an NVDLA system.

--json writes exactly {"<net>@<config>": {"compile_s", "sim_gmacs", "fps_model"}}.
Goals (the nvdla issue): ResNet-50 compile <= 5 s including the process hop; simulator
>= 1 G MAC/s. The table prints both as ratios for every row (compile: goal / measured, sim:
measured / goal; >= 1 meets the goal).
"""
from __future__ import annotations

import argparse
import json
import math
import time
import warnings

import numpy as np

import retarget
from retarget import zoo
from retarget.compiler import prepare
from retarget.frontend.onnx import import_model
from retarget.passes.infer_shapes import infer_shapes
from retarget.table import format_table
from retarget.targets.registry import get_target

COMPILE_GOAL_S, SIM_GOAL_GMACS = 5.0, 1.0


def quantised(name: str, size: int):
    """(prepared graph, one input) for `name`: quantised for nvdla on one random input."""
    g = infer_shapes(import_model(zoo.build(name, size=size)))
    g.toposort()
    rng = np.random.default_rng(0)
    x = {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = prepare(g, get_target("nvdla:nv_full"), [x])
    return q, x


def measure(q, x, spec: str, runs: int) -> dict:
    target = get_target(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        prepare(q, target)                      # what compile() redoes on the prepared graph
        prep_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        module = retarget.compile(q, spec)
        compile_s = time.perf_counter() - t0
    kernels = list(module.kernels.values())
    compiler_s = sum(k.compiler_run.seconds for k in kernels)
    layers = sum(len(k.program.loadable.layers) for k in kernels)
    model_s = sum(k.timing().seconds for k in kernels)
    model_macs = sum(info.macs for k in kernels for info in k.layers)
    module.run(x)                               # warm-up: device, uploads, pages
    best_nv, best_run, macs = math.inf, math.inf, 0
    for _ in range(runs):
        t0 = time.perf_counter()
        module.run(x)
        run_s = time.perf_counter() - t0
        prof = [p for p in module.profile if p.target == "nvdla"]
        nv_s = sum(p.seconds for p in prof)
        macs = sum(p.counters.get("macs", 0) for p in prof)
        best_nv, best_run = min(best_nv, nv_s), min(best_run, run_s)
    module.close()
    return {"compile_s": compile_s, "sim_gmacs": macs / best_nv / 1e9,
            "fps_model": 1.0 / model_s, "prep_s": prep_s, "compiler_s": compiler_s,
            "processes": len(kernels), "layers": layers, "model_ms": 1e3 * model_s,
            "macs": macs, "model_macs": model_macs, "nvdla_ms": 1e3 * best_nv,
            "run_ms": 1e3 * best_run}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default="resnet18,resnet50,googlenet")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--configs", default="nv_small,nv_full")
    ap.add_argument("--runs", type=int, default=3, help="timed runs (best taken) after a warm-up")
    ap.add_argument("--json", default=None, help="write the per-network figures here")
    args = ap.parse_args()
    results, rows = {}, []
    for name in args.nets.split(","):
        t0 = time.perf_counter()
        q, x = quantised(name, args.size)
        print(f"  {name}: quantised in {time.perf_counter() - t0:.1f} s", flush=True)
        for cfg in args.configs.split(","):
            r = measure(q, x, f"nvdla:{cfg}", args.runs)
            key = f"{name}@{cfg}"
            results[key] = {k: float(r[k]) for k in ("compile_s", "sim_gmacs", "fps_model")}
            if r["macs"] != r["model_macs"]:
                print(f"  {key}: device counted {r['macs']:,} MACs, the kernels' layers "
                      f"{r['model_macs']:,}")
            print(f"  {key}: compile {r['compile_s']:.2f} s (compiler {r['compiler_s']:.2f} s), "
                  f"sim {r['sim_gmacs']:.3f} G MAC/s, model {r['fps_model']:.1f} fps",
                  flush=True)
            rows.append([key, f"{r['compile_s']:.2f}", f"{r['compiler_s']:.2f}", r["processes"],
                         f"{r['prep_s']:.2f}", r["layers"], f"{r['macs'] / 1e9:.2f}",
                         f"{r['nvdla_ms']:.0f}", f"{r['run_ms']:.0f}", f"{r['sim_gmacs']:.3f}",
                         f"{r['model_ms']:.3f}", f"{r['fps_model']:.1f}",
                         f"{COMPILE_GOAL_S / r['compile_s']:.2f}",
                         f"{r['sim_gmacs'] / SIM_GOAL_GMACS:.2f}"])
    print(format_table(["network@config", "compile s", "compiler s", "procs", "prep s",
                        "hw layers", "G MACs", "nvdla ms", "run ms", "sim GMAC/s",
                        "model ms", "fps model", "compile goal", "sim goal"], rows,
                       align="<" + ">" * 13,
                       title=f"batch 1, {args.size}x{args.size}; compile s excludes "
                             f"quantisation; sim: best of {args.runs} after a warm-up; "
                             f"goal ratios >= 1 meet (compile <= {COMPILE_GOAL_S:g} s for "
                             f"ResNet-50, sim >= {SIM_GOAL_GMACS:g} G MAC/s)"))
    r50 = [k for k in results if k.startswith("resnet50@")]
    if r50:
        print("goals:")
        for k in r50:
            print(f"  compile {k} (calibration excluded, process included): "
                  f"{results[k]['compile_s']:.2f} s (goal <= {COMPILE_GOAL_S:g})")
    for k, v in results.items():
        if k.startswith("resnet50@"):
            print(f"  simulator {k}: {v['sim_gmacs']:.3f} G MAC/s (goal >= {SIM_GOAL_GMACS:g})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
