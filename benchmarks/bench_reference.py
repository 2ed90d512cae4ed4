"""The reference executor (fast paths) against onnxruntime on full-size zoo networks, plus the
time to import (read, check, convert, simplify) the model file.

    python benchmarks/bench_reference.py [--nets resnet18,resnet50] [--size 224] [--runs 10]

Both run the same .onnx file on the same input. onnxruntime gets intra_op_num_threads=2 and
sequential execution; NumPy's BLAS keeps its default thread count (printed), so both sides may
use the machine's cores. Times are the median of --runs runs after --warmup untimed ones;
the two executors alternate run by run so that load from other processes hits both alike.
Goals: reference within 3x of onnxruntime; ResNet-50 import + simplify < 1 s.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import retarget
from retarget import zoo
from retarget.report.table import format_table


def _median_time(fn, runs: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _interleaved_medians(fns, runs: int, warmup: int) -> list[float]:
    """Median time of each function, running them in turn (a, b, a, b, ...) so that load from
    other processes on a shared machine falls on all of them alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, ts in zip(fns, times):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


def _blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info
        return ", ".join(f"{i['internal_api']}:{i['num_threads']}" for i in threadpool_info()
                         if i.get("user_api") == "blas") or "unknown"
    except ImportError:
        return "unknown (threadpoolctl not installed)"


def op_profile(graph, x: np.ndarray, runs: int) -> dict[str, float]:
    """Median seconds per op type over `runs` node-by-node walks (the executor's own loop,
    with a clock around each node)."""
    from retarget.targets.cpu.reference import run_node
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        env = {graph.inputs[0]: x, **{v: v.const for v in graph.constants()}}
        per_op: dict[str, float] = {}
        for node in graph.nodes:
            args = [None if v is None else env[v] for v in node.inputs]
            t = time.perf_counter()
            outs = run_node(node, args)
            per_op[node.op] = per_op.get(node.op, 0.0) + time.perf_counter() - t
            env.update(zip(node.outputs, outs))
        for op, t in per_op.items():
            samples.setdefault(op, []).append(t)
    return {op: statistics.median(ts) for op, ts in samples.items()}


def bench_net(name: str, size: int, runs: int, warmup: int, threads: int, tmp: Path,
              profile_ops: bool = False):
    import onnxruntime as ort
    path = tmp / f"{name}.onnx"
    path.write_bytes(zoo.build_bytes(name, size=size, seed=0))
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"input": x})

    # Import + simplify, timed from the file as a user's `retarget.load` call sees it.
    t_load = _median_time(lambda: retarget.load(path), max(3, runs // 2), 1)
    graph = retarget.load(path)
    t_ours, t_ort = _interleaved_medians([lambda: retarget.run(graph, {"input": x}),
                                          lambda: sess.run(None, {"input": x})], runs, warmup)
    ours = retarget.run(graph, {"input": x})["output"]
    rel_err = float(np.abs(ours - ref).max() / np.abs(ref).max())
    profile = op_profile(graph, x, max(1, runs // 2)) if profile_ops else {}
    return {"net": name, "ours": t_ours, "ort": t_ort, "load": t_load, "rel_err": rel_err,
            "nodes": len(graph.nodes), "mb": path.stat().st_size / 1e6, "profile": profile}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nets", default="resnet18,resnet50")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    p.add_argument("--blas-threads", type=int, default=None,
                   help="limit NumPy's BLAS threads (needs threadpoolctl; default: BLAS's own)")
    p.add_argument("--profile", action="store_true",
                   help="also print where the reference executor's time goes, by op")
    args = p.parse_args(argv)
    if args.blas_threads is not None:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            p.error("--blas-threads needs threadpoolctl; set OPENBLAS_NUM_THREADS instead")
        # Kept for the whole run: threadpool_limits restores the old limit when collected.
        _limit = threadpool_limits(limits=args.blas_threads, user_api="blas")  # noqa: F841

    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"python {platform.python_version()}, numpy {np.__version__} "
          f"(BLAS threads {_blas_threads()}); load average at start "
          f"{os.getloadavg()[0]:.2f} (the machine is shared: a high load inflates both columns)")
    print(f"input 1x3x{args.size}x{args.size}, median of {args.runs} runs after "
          f"{args.warmup} warm-up, onnxruntime intra_op_num_threads={args.threads} sequential\n")
    results = []
    with tempfile.TemporaryDirectory() as d:
        for name in args.nets.split(","):
            r = bench_net(name.strip(), args.size, args.runs, args.warmup, args.threads, Path(d),
                          args.profile)
            results.append(r)
            print(f"  {name}: done", file=sys.stderr)
    print(format_table(
        ["net", "reference ms", "onnxruntime ms", "ratio", "max rel err"],
        [[r["net"], f"{r['ours'] * 1e3:.1f}", f"{r['ort'] * 1e3:.1f}",
          f"{r['ours'] / r['ort']:.2f}x", f"{r['rel_err']:.1e}"] for r in results],
        title="run time (goal: ratio <= 3x)"))
    print()
    print(format_table(
        ["net", "file MB", "nodes", "import+simplify ms"],
        [[r["net"], f"{r['mb']:.1f}", r["nodes"], f"{r['load'] * 1e3:.0f}"] for r in results],
        title="retarget.load of the .onnx file (goal: ResNet-50 < 1000 ms)"))
    for r in results:
        if r["profile"]:
            total = sum(r["profile"].values())
            rows = [[op, f"{t * 1e3:.1f}", f"{100 * t / total:.1f}%"]
                    for op, t in sorted(r["profile"].items(), key=lambda kv: -kv[1])]
            print()
            print(format_table(["op", "ms", "share"], rows,
                               title=f"{r['net']}: reference time by op (node by node)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
