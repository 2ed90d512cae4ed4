"""Design-space exploration at scale: ResNet-18 at 224x224 on vta, `--budget` points (>= 200)
chosen by NSGA-II over latency, DSP slices and 18 Kb block RAMs, each compiled and timed with
the cycle model (retarget/explore, docs/explore.md).

    python benchmarks/bench_dse.py [--json FILE] [--budget 200] [--workers 2]
                                   [--executor auto|ray|pool] [--subset 60]

Measures:
- the sweep: `--budget` points on `--workers` workers, wall seconds (the float model imported
  and quantised once, before the clock starts);
- scaling: the same fixed subset of the sweep's points (the first `--subset` it compiled)
  evaluated again from cold workers with 1 and with 2 workers, wall seconds each (Ray when it
  is installed, else the process pool: `--executor`; the pool's start-up is not timed);
- the Pareto front over (latency, dsp, bram);
- alu_stage_roofline_pct: the mean fraction of the roofline over ResNet-18's C2, C4..C12 (VTA
  Table 1's labels; C1 ran on the CPU, C3 is not in the network) with the ALU stage (the
  computation of bench_vta_table1.py: each layer lowered alone with the cycle model's 2-thread
  schedule, timed with simulate_timing): the better of the space's two ALU
  intervals, II 2 (the published ALU's) and II 1 (an assumption for a stage of its own);
  both are printed, with pynq's for comparison.

--json writes {"points", "wall_s", "workers": {"1", "2"}, "pareto": [{"config", "cycles",
"dsp", "bram18"}], "alu_stage_roofline_pct"}.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # bench_vta_table1 beside this file

from retarget.explore import Problem, explore
from retarget.explore.pools import make_pool
from retarget.report.table import format_table
from retarget.targets.vta.config import PRESETS, VTAConfig
from retarget.targets.vta.target import VTATarget

OBJECTIVES = ("latency", "dsp", "bram")


def roofline_pct(cfg: VTAConfig) -> float:
    """Mean fraction of roofline (percent) over ResNet-18's C2, C4..C12 on `cfg`, 2 threads."""
    from bench_vta_table1 import RESNET18, conv_layer, lower_layer
    from retarget.report.layers import row_from_result
    from retarget.targets.vta.timing import simulate_timing
    fracs = []
    for layer_name in RESNET18:
        seg, _ = lower_layer(conv_layer(layer_name), cfg, 2)
        fracs.append(row_from_result(layer_name, simulate_timing(seg.program)).roof_fraction)
    return 100 * sum(fracs) / len(fracs)


def alu_stage_roofline_pct() -> float:
    """The alu_stage variant's mean fraction of roofline over C2, C4..C12: the best of its two
    ALU intervals in the space (II 2, the published ALU's; II 1, an assumption for a stage
    of its own — both printed)."""
    results = {}
    for ii in (2, 1):
        cfg = PRESETS["pynq_alu"].with_(alu_ii=ii, name=f"pynq_alu_ii{ii}")
        results[ii] = roofline_pct(cfg)
        print(f"alu_stage, alu_ii {ii}: mean fraction of roofline over C2, C4..C12 "
              f"(2 threads) {results[ii]:.1f}%"
              f"{'  (published ALU interval)' if ii == 2 else '  (assumed: ALU stage at II 1)'}")
    print(f"without the ALU stage (pynq): {roofline_pct(PRESETS['pynq']):.1f}%")
    return max(results.values())


def timed_subset(problem, configs, workers: int, executor: str) -> float:
    pool = make_pool(problem, workers, use_ray=executor == "ray")
    try:
        t0 = time.perf_counter()
        for i, c in enumerate(configs):
            pool.submit(str(i), c)
        while len(pool):
            pool.wait()
        return time.perf_counter() - t0
    finally:
        pool.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, metavar="FILE")
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--subset", type=int, default=60)
    ap.add_argument("--executor", choices=("auto", "ray", "pool"), default="auto")
    ap.add_argument("--results", default=None, metavar="FILE.jsonl",
                    help="also keep every point here (a fresh file: the sweep starts empty)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    executor = args.executor
    if executor == "auto":
        try:
            import ray  # noqa: F401
            executor = "ray"
        except ImportError:
            executor = "pool"
    t0 = time.perf_counter()
    problem = Problem.prepare("zoo:resnet18", "vta", size=args.size, seed=args.seed)
    print(f"ResNet-18 at {args.size}: imported and quantised once in "
          f"{time.perf_counter() - t0:.1f} s")
    space = VTATarget.design_space()
    print(space.describe())
    if args.results and Path(args.results).exists():
        Path(args.results).unlink()
    res = explore(problem, space, budget=args.budget, objectives=OBJECTIVES,
                  results=args.results, workers=args.workers, use_ray=executor == "ray",
                  seed=args.seed, progress=True)
    compiled = [r for r in res.records if r["status"] in ("ok", "error")]
    print(f"sweep ({res.mode}, {res.executor}, {args.workers} workers): {len(compiled)} points "
          f"compiled ({len(res.ok)} ok, {len(res.errors)} failed to compile), "
          f"{len(res.infeasible)} rejected by constraints without compiling, "
          f"{res.wall_s:.1f} s wall = {res.wall_s / max(1, len(compiled)):.2f} s per point")
    names = list(space.params)
    print(format_table(
        [n.replace("log_", "").replace("_buff_size", "") for n in names] +
        ["cycles", "ms", "DSP", "BRAM18", "fits"],
        [[r["config"][n] for n in names] +
         [f"{r['cycles']:,}", f"{r['latency_s'] * 1e3:.2f}", r["resources"]["dsp"],
          r["resources"]["bram18"], ",".join(p for p, ok in r["fits"].items() if ok) or "none"]
         for r in res.front],
        title=f"Pareto front over latency, DSP, BRAM18: {len(res.front)} points"))
    subset = [r["config"] for r in compiled[:args.subset]]
    times = {str(w): timed_subset(problem, subset, w, executor) for w in (1, 2)}
    print(f"scaling ({executor}): the same {len(subset)} points from cold workers: "
          f"1 worker {times['1']:.1f} s, 2 workers {times['2']:.1f} s "
          f"({times['1'] / times['2']:.2f}x)")
    pct = alu_stage_roofline_pct()
    out = {"points": len(compiled), "wall_s": round(res.wall_s, 2),
           "workers": {k: round(v, 2) for k, v in times.items()},
           "pareto": [{"config": r["config"], "cycles": int(r["cycles"]),
                       "dsp": int(r["resources"]["dsp"]),
                       "bram18": int(r["resources"]["bram18"])} for r in res.front],
           "alu_stage_roofline_pct": round(pct, 2)}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
