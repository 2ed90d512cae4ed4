"""`retarget explore MODEL --target T`: hardware design-space exploration (docs/explore.md).

Compiles MODEL for every point of the target's design space (or `--budget` points chosen by
optuna's NSGA-II when the space is larger), times each with the cycle model, appends each
point to a JSONL results file as it finishes (a rerun resumes), prints the Pareto front over
the objectives and plots it; `--spot-check K` runs the front's best K points bit-exact on the
simulator.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError, TargetError
from ..targets.space import PARTS, load_space_file
from ..targets.registry import get_target
from ..explore import Problem, explore, spot_check
from ..explore.plot import write_pareto
from ..explore.runner import parse_objectives
from .compile_options import read_calibration
from ..table import format_table


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "explore", help="sweep a target's hardware design space; print the Pareto front",
        description="Compile MODEL for points of the target's design space, time each with "
                    "the cycle model and report the Pareto front (docs/explore.md).")
    p.add_argument("model", help="ONNX model file, or zoo:NAME[:WIDTH] (a zoo network)")
    p.add_argument("--target", "-t", required=True,
                   help="target (vta, dnnvm) or target:preset: the base config of the space")
    p.add_argument("--space", default=None, metavar="FILE.json",
                   help="change the space: {\"params\": {field: [values]}, \"fixed\": {...}, "
                        "\"only\": bool}")
    p.add_argument("--budget", type=int, default=200, metavar="N",
                   help="points to evaluate: the whole space when it has at most N points, "
                        "else N chosen by NSGA-II (default 200)")
    p.add_argument("--objective", default="latency,dsp,bram",
                   help="comma-separated objectives to minimise: latency, cycles, dsp, bram, "
                        "onchip, frame_time (default latency,dsp,bram)")
    p.add_argument("--results", default=None, metavar="FILE.jsonl",
                   help="append every point here as one JSON line; rerunning resumes "
                        "(default: explore-<model>-<target>.jsonl)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="parallel workers (processes, or Ray CPUs; default 1)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ray", action="store_true", help="run points as Ray tasks (local Ray)")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="run points on the Ray cluster at ADDR")
    p.add_argument("--part", default=None, metavar="PART",
                   help="only points that fit this FPGA part (xc7z020, xczu2eg, xczu9eg)")
    p.add_argument("--plot", default=None, metavar="FILE.svg|.png",
                   help="plot the front over the first two objectives (default: an .svg "
                        "beside the results file; .png needs matplotlib)")
    p.add_argument("--spot-check", type=int, default=0, metavar="K",
                   help="run the front's best K points bit-exact on the simulator")
    p.add_argument("--size", type=int, default=None, metavar="S",
                   help="bind the model's image input to S x S (zoo models: build at S; "
                        "default 224)")
    p.add_argument("--calibration", default=None, metavar="FILE.npz",
                   help="calibration inputs (default: one seeded random batch)")
    p.add_argument("--seed", type=int, default=0, help="sampler and input seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_explore)


def _space(args):
    name, _, preset = args.target.partition(":")
    tgt = get_target(args.target)
    space = type(tgt).design_space(preset or None)
    if space is None:
        raise TargetError(f"target {name!r} declares no design space (vta and dnnvm do)")
    if args.space:
        space = space.restricted(load_space_file(args.space))
    return space


def run_explore(args: argparse.Namespace) -> int:
    objectives = parse_objectives(args.objective)
    if args.plot and Path(args.plot).suffix.lower() not in (".svg", ".png"):
        raise InputError(f"--plot {args.plot}: give a .svg or .png file")
    if args.workers < 1:
        raise InputError(f"--workers {args.workers}: must be at least 1")
    if args.plot and len(objectives) < 2:
        raise InputError("--plot draws two objectives: give at least two to --objective")
    space = _space(args)
    if not args.model.startswith("zoo:") and not Path(args.model).is_file():
        raise InputError(f"{args.model}: no such model file")
    results = args.results or (f"explore-{Path(args.model.replace(':', '_')).stem}-"
                               f"{space.spec.replace(':', '_')}.jsonl")
    print(space.describe())
    problem = Problem.prepare(args.model, args.target, size=args.size,
                              calibration=read_calibration(args.calibration),
                              fixed=space.fixed, seed=args.seed)
    result = explore(problem, space, budget=args.budget, objectives=objectives,
                     results=results, workers=args.workers, use_ray=args.ray,
                     ray_address=args.ray_address, part=args.part, seed=args.seed,
                     progress=not args.no_progress)
    print(summary(result))
    print()
    print(front_table(result))
    print(f"wrote {results}")
    plot = args.plot or (str(Path(results).with_suffix(".svg")) if len(objectives) >= 2
                         else None)
    if plot:
        write_pareto(plot, result.ok, result.front, objectives,
                     title=f"{Path(args.model).name} on {space.spec}: Pareto front")
        print(f"wrote {plot}")
    status = 0
    if args.spot_check:
        checks = spot_check(problem, result.front, args.spot_check, seed=args.seed)
        print()
        print(checks_table(checks))
        status = 0 if all(c["ok"] for c in checks) else 1
    return status


def summary(result) -> str:
    n_ok, n_err, n_inf = len(result.ok), len(result.errors), len(result.infeasible)
    lines = [f"{result.mode}: {result.evaluated} point(s) compiled in this run "
             f"({result.executor}), {result.resumed} found in the results file; "
             f"{n_ok} ok, {n_err} failed to compile, {n_inf} infeasible; "
             f"{result.wall_s:.1f} s"]
    if result.restarts:
        lines.append(f"the process pool was restarted {result.restarts} time(s) after a "
                     f"worker died")
    if result.errors:
        reasons: dict[str, int] = {}
        for r in result.errors:
            reasons[r["error"][:110]] = reasons.get(r["error"][:110], 0) + 1
        for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3]:
            lines.append(f"  {n} x {why}")
    if result.part:
        lines.append(f"front restricted to points that fit {result.part.name} "
                     f"({result.part.dsp} DSP, {result.part.bram18} BRAM18)")
    return "\n".join(lines)


def front_table(result) -> str:
    names = list(result.space.params)
    short = {n: n.replace("log_", "").replace("_buff_size", "").replace("_buf_bytes", "")
             for n in names}
    head = ["#"] + [short[n] for n in names] + ["cycles", "latency ms", "DSP", "BRAM18",
                                                "on-chip KiB", "fits"]
    rows = []
    for i, r in enumerate(result.front, 1):
        res = r["resources"]
        fits = ",".join(p for p in PARTS if r["fits"].get(p)) or "none"
        rows.append([i] + [r["config"][n] for n in names] +
                     [f"{r['cycles']:,}", f"{r['latency_s'] * 1e3:.3f}", res["dsp"],
                      res["bram18"], f"{res['onchip_bytes'] / 1024:.0f}", fits])
    return format_table(head, rows, title=f"Pareto front over {', '.join(result.objectives)}: "
                        f"{len(result.front)} of {len(result.ok)} evaluated points")


def checks_table(checks) -> str:
    return format_table(["point", "simulator", "s"],
                        [[", ".join(f"{k}={v}" for k, v in c["config"].items()), c["verdict"],
                          f"{c['seconds']:.1f}"] for c in checks],
                        title="spot checks: the front's best points run on the simulator")


__all__ = ["register", "run_explore", "summary", "front_table"]
