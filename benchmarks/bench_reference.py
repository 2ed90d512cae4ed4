"""The reference executor (fast paths) against onnxruntime on full-size zoo networks, plus the
time to import (read, check, convert, simplify) the model file.

    python benchmarks/bench_reference.py [--nets resnet18,resnet50] [--size 224] [--runs 10]
                                         [--threads 1,2] [--profile]

Both run the same .onnx file on the same input. For each thread count in --threads, the two
sides get the same number of threads: onnxruntime's intra_op_num_threads (sequential
execution) and NumPy's BLAS, limited with threadpoolctl (--blas-threads overrides the BLAS
side; 0 leaves BLAS at its own default). Times are the median of --runs runs after --warmup
untimed ones; the two executors alternate in blocks of --block runs so that load from other
processes hits both alike (see _interleaved_medians for why not run by run). Goals: reference within 3x of onnxruntime; ResNet-50 import + simplify < 1 s.
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
from retarget.table import format_table


def _median_time(fn, runs: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _interleaved_medians(fns, runs: int, warmup: int, block: int = 5) -> list[float]:
    """Median time of each function over `runs` runs, taken in alternating blocks (a x block,
    b x block, a x block, ...) so that load from other processes on a shared machine falls
    on all of them alike. Each block starts with one untimed run: the thread pools of both
    sides busy-wait for a while after their work (onnxruntime's spinning workers, OpenBLAS's
    threads), and that run absorbs the other side's spinning instead of a timed one."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    while len(times[0]) < runs:
        n = min(block, runs - len(times[0]))
        for fn, ts in zip(fns, times):
            fn()
            for _ in range(n):
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
    from retarget.ops.reference import run_node
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


def _blas_limit(threads: int | None):
    """A context that limits NumPy's BLAS to `threads` (None or 0: leave it alone)."""
    import contextlib
    if not threads:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=threads, user_api="blas")


def bench_net(name: str, size: int, runs: int, warmup: int, block: int,
              settings: list[tuple[int, int]], tmp: Path, profile_ops: bool = False) -> list[dict]:
    """One row per (onnxruntime threads, BLAS threads) setting; the profile (if asked) is
    taken under the first setting."""
    import onnxruntime as ort
    path = tmp / f"{name}.onnx"
    path.write_bytes(zoo.build_bytes(name, size=size, seed=0))
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)

    # Import + simplify, timed from the file as a user's `retarget.load` call sees it.
    t_load = _median_time(lambda: retarget.load(path), max(3, runs // 2), 1)
    graph = retarget.load(path)
    rows = []
    for i, (threads, blas) in enumerate(settings):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        (ref,) = sess.run(None, {"input": x})
        with _blas_limit(blas):
            t_ours, t_ort = _interleaved_medians([lambda: retarget.run(graph, {"input": x}),
                                                  lambda: sess.run(None, {"input": x})],
                                                 runs, warmup, block)
            ours = retarget.run(graph, {"input": x})["output"]
            blas_desc = _blas_threads()
            profile = op_profile(graph, x, max(1, runs // 2)) if profile_ops and i == 0 else {}
        rel_err = float(np.abs(ours - ref).max() / np.abs(ref).max())
        rows.append({"net": name, "ort_threads": threads, "blas": blas_desc, "ours": t_ours,
                     "ort": t_ort, "load": t_load, "rel_err": rel_err,
                     "nodes": len(graph.nodes), "mb": path.stat().st_size / 1e6,
                     "profile": profile})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nets", default="resnet18,resnet50")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--block", type=int, default=5,
                   help="timed runs per executor before switching to the other")
    p.add_argument("--threads", default="1,2",
                   help="comma-separated thread counts, one table row each (default 1,2)")
    p.add_argument("--blas-threads", type=int, default=None,
                   help="BLAS threads for every row (default: the row's thread count; "
                        "0: BLAS's own default)")
    p.add_argument("--profile", action="store_true",
                   help="also print where the reference executor's time goes, by op "
                        "(under the first thread setting)")
    args = p.parse_args(argv)
    thread_counts = [int(t) for t in args.threads.split(",")]
    settings = [(t, t if args.blas_threads is None else args.blas_threads)
                for t in thread_counts]
    if any(blas for _, blas in settings):
        try:
            import threadpoolctl  # noqa: F401
        except ImportError:
            p.error("limiting BLAS threads needs threadpoolctl; pass --blas-threads 0 and set "
                    "OPENBLAS_NUM_THREADS instead")

    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"python {platform.python_version()}, numpy {np.__version__} "
          f"(BLAS default threads {_blas_threads()}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}); "
          f"load average at start {os.getloadavg()[0]:.2f} "
          f"(the machine is shared: a high load inflates both columns)")
    print(f"input 1x3x{args.size}x{args.size}, median of {args.runs} runs after "
          f"{args.warmup} warm-up, alternating in blocks of {args.block}, onnxruntime "
          f"sequential\n")
    results = []
    with tempfile.TemporaryDirectory() as d:
        for name in args.nets.split(","):
            rows = bench_net(name.strip(), args.size, args.runs, args.warmup, args.block,
                             settings, Path(d), args.profile)
            results.extend(rows)
            print(f"  {name}: done", file=sys.stderr)
    print(format_table(
        ["net", "ort threads", "BLAS threads", "reference ms", "onnxruntime ms", "ratio",
         "max rel err"],
        [[r["net"], r["ort_threads"], r["blas"], f"{r['ours'] * 1e3:.1f}",
          f"{r['ort'] * 1e3:.1f}", f"{r['ours'] / r['ort']:.2f}x", f"{r['rel_err']:.1e}"]
         for r in results],
        title="run time (goal: ratio <= 3x)"))
    print()
    results_by_net = {r["net"]: r for r in results}.values()
    print(format_table(
        ["net", "file MB", "nodes", "import+simplify ms"],
        [[r["net"], f"{r['mb']:.1f}", r["nodes"], f"{r['load'] * 1e3:.0f}"]
         for r in results_by_net],
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
