"""How long loading a module artifact takes with and without its integrity check.

    python benchmarks/bench_verify.py [--net resnet50] [--size 224] [--runs 5]

Compiles the zoo network for vta (pynq) once, saves it, then times Module.load with
verification (sizes + SHA-256 of every file) and with --no-verify (sizes and structure only),
min / median / max over --runs loads, side by side with the artifact's size.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.runtime.module import Module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet50")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    g = import_model(zoo.build(args.net, size=args.size, num_classes=1000, seed=0))
    rng = np.random.default_rng(0)
    calib = [{v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}]
    m = retarget.compile(g, "vta", calibration=calib)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "art"
        m.save(out)
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        times = {}
        for verify in (True, False):
            t = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                Module.load(out, verify=verify)
                t.append(time.perf_counter() - t0)
            times[verify] = t
    print(f"{args.net} @{args.size} on vta: artifact {size / 2 ** 20:.1f} MiB, "
          f"{args.runs} loads each, seconds")
    print(f"{'load':<22}{'min':>8}{'median':>8}{'max':>8}")
    for verify, label in ((True, "verified (SHA-256)"), (False, "--no-verify")):
        t = times[verify]
        print(f"{label:<22}{min(t):8.3f}{statistics.median(t):8.3f}{max(t):8.3f}")
    extra = statistics.median(times[True]) - statistics.median(times[False])
    print(f"verification adds {extra:.3f} s ({size / 2 ** 20 / max(extra, 1e-9):.0f} MiB/s)")


if __name__ == "__main__":
    main()
