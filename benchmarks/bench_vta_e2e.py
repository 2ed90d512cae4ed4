"""Issue-5 speed goals for the vta target, with where the time goes.

1. Compile ResNet-50 (1x3x224x224) to a VTA artifact: quantise (calibration timed apart and
   excluded from the goal), partition, lower, save. Goal: <= 5 s without calibration.
2. Simulate ResNet-18 (1x3x224x224) end to end: accelerator regions on the simulator, the
   rest on the CPU reference. Goal: <= 10 s.

    python benchmarks/bench_vta_e2e.py [--config pynq] [--size 224] [--skip-r50] [--skip-r18]
"""
from __future__ import annotations

import os

# This benchmark's figures (docs/benchmarks.md) are the Python behavioural simulator's; the C
# simulator, which vta devices otherwise pick, is compared with it in bench_vta_sim.py.
os.environ.setdefault("RETARGET_VTA_SIM", "python")

import argparse
import tempfile
import time
import warnings

import numpy as np

from retarget import zoo
from retarget.compiler import prepare
from retarget.frontend.onnx import import_model
from retarget.passes.calibrate import calibrate, sample_batches
from retarget.passes.fold_batchnorm import fold_batchnorm
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.partition import partition
from retarget.runtime.module import Module
from retarget.targets.registry import get_target

COMPILE_GOAL_S, SIM_GOAL_S = 5.0, 10.0


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def compile_steps(name: str, spec: str, size: int) -> tuple[Module, dict[str, float]]:
    """compile() step by step, timing each (same steps as retarget.compiler.compile)."""
    t = {}
    graph, t["import"] = timed(lambda: import_model(zoo.build(name, size=size)))
    target = get_target(spec)
    g, t["infer shapes"] = timed(infer_shapes, graph)
    g.toposort()
    rng = np.random.default_rng(0)
    calib = [{v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in g.inputs}]
    # Calibration alone (fold + float runs of the samples), to subtract from the quantiser's time.
    folded = fold_batchnorm(g)
    _, t["calibration"] = timed(calibrate, folded, sample_batches(folded, calib))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q, t_prepare = timed(prepare, g, target, calib)
    t["quantise (excl. calibration)"] = max(t_prepare - t["calibration"], 0.0)
    q.toposort()
    parts, t["partition"] = timed(partition, q, target)
    t0 = time.perf_counter()
    try:
        kernels = {r.name: target.lower(r) for r in parts.offloaded}
    except NotImplementedError as e:
        # Report what could be measured rather than nothing.
        print(f"  (stopped before lowering: {e})")
        for k, v in t.items():
            print(f"  {k:<30} {v:8.3f} s")
        raise SystemExit(1)
    t["lower"] = time.perf_counter() - t0
    module = Module(q, target, parts.regions, kernels, parts.report)
    with tempfile.TemporaryDirectory() as d:
        _, t["save"] = timed(module.save, d)
    return module, t


def bench_compile(spec: str, size: int) -> None:
    module, t = compile_steps("resnet50", spec, size)
    goal = sum(v for k, v in t.items() if k in ("quantise (excl. calibration)", "partition",
                                               "lower", "save"))
    s = module.report.summary
    print(f"\n== compile ResNet-50 1x3x{size}x{size} for {spec} ==")
    for k, v in t.items():
        print(f"  {k:<30} {v:8.3f} s")
    print(f"  {'compile, calibration excluded':<30} {goal:8.3f} s   goal <= {COMPILE_GOAL_S} s: "
          f"{'met' if goal <= COMPILE_GOAL_S else 'MISSED'}")
    print(f"  regions on vta: {s['regions']}, MACs on vta {s['macs_on_target']} / "
          f"{s['macs_on_target'] + s['macs_on_cpu']}")


def bench_simulate(spec: str, size: int) -> None:
    module, _ = compile_steps("resnet18", spec, size)
    x = {v.name: np.random.default_rng(1).standard_normal(v.type.shape).astype(v.type.dtype)
         for v in module.graph.inputs}
    module.run(x)   # first run uploads the kernels; time the second, as a deployed model runs
    _, total = timed(module.run, x)
    sim = sum(p.seconds for p in module.profile if p.target != "cpu")
    cpu = sum(p.seconds for p in module.profile if p.target == "cpu")
    insns = sum(p.counters.get("instructions", 0) for p in module.profile)
    gemm = sum(p.counters.get("gemm_counter", 0) for p in module.profile)
    print(f"\n== simulate ResNet-18 1x3x{size}x{size} on {spec} ==")
    print(f"  {'end to end':<30} {total:8.3f} s   goal <= {SIM_GOAL_S} s: "
          f"{'met' if total <= SIM_GOAL_S else 'MISSED'}")
    print(f"  {'vta regions (simulator)':<30} {sim:8.3f} s   ({insns} instructions, "
          f"{gemm} GEMM uop executions)")
    print(f"  {'cpu regions (reference)':<30} {cpu:8.3f} s")
    slow = sorted(module.profile, key=lambda p: -p.seconds)[:5]
    print("  slowest regions: " + ", ".join(f"{p.region} ({p.target}) {p.seconds:.3f} s"
                                          for p in slow))
    module.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq", help="VTA preset (default pynq)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--skip-r50", action="store_true")
    ap.add_argument("--skip-r18", action="store_true")
    a = ap.parse_args()
    spec = f"vta:{a.config}"
    if not a.skip_r50:
        bench_compile(spec, a.size)
    if not a.skip_r18:
        bench_simulate(spec, a.size)


if __name__ == "__main__":
    main()
