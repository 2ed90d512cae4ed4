"""BLAS threads inside the VTA simulator device: one thread (the default) against the process's
default (one per core), on a quiet machine and with another process keeping one core busy.

    python benchmarks/bench_threads.py [--runs 7] [--size 64] [--json FILE]

Workload: the vta regions of a ResNet-18 at --size x --size (one inference through the module,
calibration and compile excluded). Prints min / median / max seconds per inference for each of
the four cases and the slowdown each case suffers under load, side by side.
"""
from __future__ import annotations

import os

# This benchmark's figures (docs/benchmarks.md) are the Python behavioural simulator's; the C
# simulator, which vta devices otherwise pick, is compared with it in bench_vta_sim.py.
os.environ.setdefault("RETARGET_VTA_SIM", "python")

import argparse
import json
import multiprocessing as mp
import statistics
import time

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.runtime.threads import blas_control_available


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def measure(module, x, threads, runs: int) -> list[float]:
    device = module.target.make_device()
    device.configure(blas_threads=threads)
    module.bind(device)
    module.run(x)   # warm the plan caches
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        module.run(x)
        times.append(time.perf_counter() - t0)
    module.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if not blas_control_available():
        raise SystemExit("threadpoolctl is not installed: the device cannot choose BLAS threads")
    g = import_model(zoo.build("resnet18", size=args.size, num_classes=1000, seed=0))
    rng = np.random.default_rng(0)
    x = {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}
    module = retarget.compile(g, "vta", calibration=[x])
    results = {}
    for load in ("quiet", "busy"):
        spinner = None
        if load == "busy":   # bounded: it stops by itself after 10 minutes at most
            spinner = mp.Process(target=_spin, args=(600.0,), daemon=True)
            spinner.start()
        try:
            for label, threads in (("1 thread", 1), ("BLAS default", None)):
                results[(load, label)] = measure(module, x, threads, args.runs)
        finally:
            if spinner is not None:
                spinner.terminate()
                spinner.join()
    print(f"ResNet-18 @{args.size} on vta (pynq), one inference, {args.runs} runs each, seconds")
    print(f"{'case':<28}{'min':>9}{'median':>9}{'max':>9}{'vs quiet':>10}")
    out = {}
    for (load, label), t in results.items():
        quiet = statistics.median(results[("quiet", label)])
        med = statistics.median(t)
        print(f"{label + ', ' + load:<28}{min(t):9.3f}{med:9.3f}{max(t):9.3f}{med / quiet:9.2f}x")
        out[f"{label}/{load}"] = {"min_s": min(t), "median_s": med, "max_s": max(t)}
    busy_ratio = (statistics.median(results[("busy", "BLAS default")])
                  / statistics.median(results[("busy", "1 thread")]))
    print(f"under load, BLAS default / 1 thread = {busy_ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
