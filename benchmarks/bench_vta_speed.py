"""VTA compile and simulation speed (issue 17), min / median / max over several runs.

    python benchmarks/bench_vta_speed.py [--json FILE] [--runs 5] [--config pynq]

compile: ResNet-18 and ResNet-50 at 224 to a vta artifact (quantise, partition, lower, save),
calibration excluded (timed apart and subtracted, as in bench_vta_e2e.py); the schedule cache
is cleared before each run, so every run searches as a fresh process would.

sim: the vta tasks of one inference (the device's time per task, TaskRecord.seconds: the
simulator, as upstream's C++ simulator is timed; the "region" column adds the host's packing of
inputs and outputs; CPU regions excluded), after a first run that uploads the kernels and
records each stream's steps (sim/replay.py), as a deployed model runs. Networks: ResNet-18, ResNet-50, MobileNet v1 and
SqueezeNet 1.1 at 224, and ResNet-18 at 64x64. gmacs counts the GEMM core's MACs (GEMM micro-op
executions x BATCH x BLOCK_IN x BLOCK_OUT), padding included, as the C++ simulator would.

Goals (issue 17): ResNet-50 compile <= 1 s; simulation of ResNet-18 @224 <= 0.4 s and ResNet-50
@224 <= 0.55 s (upstream's C++ simulator: 0.45 / 0.61 s); <= 10 us per instruction on small
tasks (measured on a stream of one-block instructions, where arithmetic is negligible; printed,
not in the JSON). --json writes the medians:
{"compile_s": {"resnet18@224": s, "resnet50@224": s},
 "sim": {"<net>@<size>": {"s": s, "insns": n, "us_per_insn": us, "gmacs": G}}}
"""
from __future__ import annotations

import os

# One BLAS thread, as in bench_vta_sim.py: many mid-sized products on a shared 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# This benchmark's figures (docs/benchmarks.md) are the Python behavioural simulator's; the C
# simulator, which vta devices otherwise pick, is compared with it in bench_vta_sim.py.
os.environ.setdefault("RETARGET_VTA_SIM", "python")

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vta_e2e import compile_steps  # noqa: E402
from bench_vta_sim import gemm_reference, gemm_stream  # noqa: E402

from retarget.targets.vta.sim import Simulator  # noqa: E402

from retarget.targets.vta.lower import tuning  # noqa: E402

COMPILE_NETS = (("resnet18", 224), ("resnet50", 224))
SIM_NETS = (("resnet18", 224), ("resnet50", 224), ("mobilenet_v1", 224), ("squeezenet", 224),
            ("resnet18", 64))
GOALS = {"compile resnet50@224": 1.0, "sim resnet18@224": 0.4, "sim resnet50@224": 0.55}
COMPILE_STEPS = ("quantise (excl. calibration)", "partition", "lower", "save")


def spread(xs: list[float]) -> tuple[float, float, float]:
    return min(xs), statistics.median(xs), max(xs)


def bench_compile(name: str, size: int, spec: str, runs: int):
    times, steps = [], []
    for _ in range(runs):
        tuning.clear_cache()
        module, t = compile_steps(name, spec, size)
        times.append(sum(t[k] for k in COMPILE_STEPS))
        steps.append(t)
        module.close()
    med = sorted(range(runs), key=lambda i: times[i])[runs // 2]
    return spread(times), steps[med]


def bench_sim(name: str, size: int, spec: str, runs: int):
    module, _ = compile_steps(name, spec, size)
    cfg = module.target.config
    x = {v.name: np.random.default_rng(1).standard_normal(v.type.shape).astype(v.type.dtype)
         for v in module.graph.inputs}
    module.run(x)   # uploads the kernels, builds the execution plans
    secs, region_secs, insns, gemm = [], [], 0, 0
    for _ in range(runs):
        module.run(x)
        prof = [p for p in module.profile if p.target != "cpu"]
        secs.append(sum(p.task_seconds for p in prof))
        region_secs.append(sum(p.seconds for p in prof))
        insns = sum(p.counters.get("instructions", 0) for p in prof)
        gemm = sum(p.counters.get("gemm_counter", 0) for p in prof)
    module.close()
    macs = gemm * cfg.batch * cfg.block_in * cfg.block_out
    return spread(secs), statistics.median(region_secs), insns, macs


def bench_overhead(spec: str, runs: int):
    """Per-instruction cost of a stream of one-block instructions (a 128^3 GEMM tiled 16^3:
    every LOAD moves one 16x16 block, every GEMM is one micro-op), where arithmetic is
    negligible: (cold us/insn on a fresh simulator, warm min/median/max, instructions)."""
    from retarget.targets.registry import get_target
    cfg = get_target(spec).config
    size = 8 * cfg.block_in
    prog = gemm_stream(cfg, size, size, size, cfg.block_in, shift=8)
    rng = np.random.default_rng(0)
    data = {k: rng.integers(-128, 128, prog.buffers[k].shape).astype(np.int8) for k in "xw"}
    image, stream = prog.dram_image(data), prog.stream()
    sim = Simulator(cfg, dram=image.copy())
    t0 = time.perf_counter()
    sim.run(stream)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sim.run(stream)
        warm.append(time.perf_counter() - t0)
    if not np.array_equal(prog.read(sim.dram, "y"), gemm_reference(data["x"], data["w"], 8)):
        raise SystemExit("overhead stream: result differs from NumPy")
    n = len(prog.insns)
    return cold / n * 1e6, [t / n * 1e6 for t in spread(warm)], n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", metavar="FILE", help="write the medians as JSON")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--skip-sim", action="store_true")
    a = ap.parse_args()
    spec = f"vta:{a.config}"
    out: dict = {"compile_s": {}, "sim": {}}
    if not a.skip_compile:
        print(f"compile for {spec}, calibration excluded, {a.runs} runs (s)")
        print(f"  {'network':<16} {'min':>7} {'median':>7} {'max':>7}   "
              "median run: quantise / partition / lower / save")
        for name, size in COMPILE_NETS:
            (lo, med, hi), t = bench_compile(name, size, spec, a.runs)
            key = f"{name}@{size}"
            out["compile_s"][key] = med
            parts = " / ".join(f"{t[k]:.3f}" for k in COMPILE_STEPS)
            goal = GOALS.get(f"compile {key}")
            mark = "" if goal is None else f"  goal <= {goal}: {'met' if med <= goal else 'MISSED'}"
            print(f"  {key:<16} {lo:7.3f} {med:7.3f} {hi:7.3f}   {parts}{mark}", flush=True)
    if not a.skip_sim:
        print(f"\nsimulate the vta tasks of one inference on {spec}, {a.runs} runs after a warm-up")
        print(f"  {'network':<16} {'min s':>7} {'median':>7} {'max s':>7} {'region':>7} "
              f"{'insns':>7} {'us/insn':>8} {'GMAC/s':>7}")
        for name, size in SIM_NETS:
            (lo, med, hi), region, insns, macs = bench_sim(name, size, spec, a.runs)
            key = f"{name}@{size}"
            out["sim"][key] = {"s": med, "insns": insns, "us_per_insn": med / insns * 1e6,
                               "gmacs": macs / med / 1e9}
            goal = GOALS.get(f"sim {key}")
            mark = "" if goal is None else f"  goal <= {goal}: {'met' if med <= goal else 'MISSED'}"
            print(f"  {key:<16} {lo:7.3f} {med:7.3f} {hi:7.3f} {region:7.3f} {insns:7d} "
                  f"{med / insns * 1e6:8.1f} {macs / med / 1e9:7.2f}{mark}", flush=True)
        cold, (lo, med, hi), n = bench_overhead(spec, a.runs)
        print(f"\nper-instruction cost, {n} one-block instructions (GEMM 128^3 tiled 16^3): "
              f"first run {cold:.1f} us, later runs {lo:.1f} / {med:.1f} / {hi:.1f} us "
              f"(min / median / max)  goal <= 10: {'met' if med <= 10 else 'MISSED'}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
