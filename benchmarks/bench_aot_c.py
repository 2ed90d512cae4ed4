"""Ahead-of-time C: the `c` target's generated library against its naive mode,
onnxruntime and retarget's NumPy reference, in float and in int8, single-threaded and on all
cores.

    python benchmarks/bench_aot_c.py [--nets resnet18,resnet50,vgg16,mobilenet_v1] [--size 224]
                                     [--runs 3] [--json FILE]

Per network (batch 1): compile + build seconds of the optimised library, its arena bytes
against the sum of all its tensors, and per thread count (1, and all cores) the best of
`--runs` timed runs after one warm-up of: the generated C (`c_ms`), the naive mode of the same
generator (`naive_ms`: parallel outer loop, no buffering or reordering), onnxruntime
(`ort_ms`), the reference executor (`ref_ms`, NumPy), the int8 network (retarget.quantize,
per-channel power-of-two scales, calibrated on the benchmark input) as generated C
(`int8_ms`), and onnxruntime on the same network quantised by
onnxruntime.quantization.quantize_static (QDQ format, per-channel weights, u8 activations, the
same calibration input) (`ort_int8_ms`); `tvm_ms` where apache-tvm is installed (untuned,
llvm -mcpu=native). The table also shows the buffered mode (swTVM's buffering, loop order and
copies in 32 KB of local memory), not in the JSON, and the ratios: c / ort, c / reference,
float c / int8 c, int8 c / ort int8 and the parallel speedup of c and int8 c. Threads:
OpenMP's omp_set_num_threads (libgomp is shared by every library in the process),
onnxruntime's intra_op_num_threads (its threads stop spinning at the end of each run, so that
they leave the cores to the next measurement: ort_session), and the BLAS thread count for the
reference.

--interleaved ROUNDS [--threads 1,2]: the four runs at each thread count interleaved in each
round, each keeping its best round: what a machine shared with other work can still compare
fairly (the parallel speedups of c and onnxruntime from the same rounds).

--json writes {"<net>": {"threads": {"1": {"c_ms", "naive_ms", "ort_ms", "ref_ms", "int8_ms",
"ort_int8_ms"[, "tvm_ms"]}, "all": {...}}, "build_s", "arena_bytes"}}.
Goals: float c <= 1.0x onnxruntime on one thread (bar 1.2x), <= 1.2x on all cores (bar 1.5x),
never slower than the NumPy reference; int8 >= 1.5x faster than float c on ResNet-18/50 and
within 1.5x of onnxruntime int8; ResNet-50 built in <= 30 s.
Where the time goes inside the generated C, call by call: benchmarks/profile_aot_c.py.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import tempfile
import time
import warnings

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.table import format_table
from retarget.device.threads import blas_threads

NETS = "resnet18,resnet50,vgg16,mobilenet_v1"


def _omp():
    name = ctypes.util.find_library("gomp")
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL) if name else None


# onnxruntime's intra-op threads keep spinning after a run ends, for longer than 0.1 s here,
# taking a core from whatever runs next in the process: ResNet-18's c on two threads right
# after an onnxruntime run took 18 ms against 9 alone. Its sessions stop them at the end of
# each run instead (ort_session). libgomp's idle threads spin for a few milliseconds, which
# best_ms's warm-up call absorbs.


def ort_session(model: bytes, threads: int):
    """An onnxruntime CPU session on `threads` intra-op threads whose threads stop spinning
    when a run ends (session.force_spinning_stop; spinning within a run is unchanged)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def best_ms(fn, runs: int) -> float:
    """The best of `runs` timed calls after one warm-up (runs = 0: the warm-up itself, timed)."""
    t0 = time.perf_counter()
    fn()                                     # warm-up: first-touch of the arena, caches
    if not runs:
        return 1e3 * (time.perf_counter() - t0)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * min(ts)


def ort_int8_model(model, x: dict, directory: str) -> bytes:
    """`model` quantised by onnxruntime's quantize_static (QDQ, per-channel weights),
    calibrated on `x`."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([x])

        def get_next(self):
            return next(self.items, None)

    src, dst = os.path.join(directory, "float.onnx"), os.path.join(directory, "qdq.onnx")
    onnx.save(model, src)
    quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True)
    with open(dst, "rb") as fh:
        return fh.read()


def tvm_runner(model, x: dict):
    """An untuned Apache TVM build of `model` (llvm -mcpu=native), or None without tvm."""
    try:
        import tvm
        from tvm import relay
        from tvm.contrib import graph_executor
    except ImportError:
        return None
    mod, params = relay.frontend.from_onnx(model, {k: v.shape for k, v in x.items()})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm -mcpu=native", params=params)
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for k, v in x.items():
        gm.set_input(k, v)
    return gm.run


def measure(name: str, size: int, runs: int, omp) -> tuple[dict, dict]:
    """The network's JSON entry, and what only the table shows: the sum of all its tensors'
    bytes and the buffered mode's ms per thread count."""
    model = zoo.build(name, size=size)
    graph = import_model(model)
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}
    t0 = time.perf_counter()
    fast = retarget.compile(graph, "c")
    build_s = time.perf_counter() - t0
    naive = retarget.compile(graph, "c", config={"mode": "naive"})
    buffered = retarget.compile(graph, "c", config={"mode": "buffered"})
    int8 = retarget.compile(retarget.quantize(graph, [x], per_channel=True), "c")
    with tempfile.TemporaryDirectory() as d:
        qdq = ort_int8_model(model, x, d)
    tvm_run = tvm_runner(model, x)
    cores = os.cpu_count() or 1
    out = {"threads": {}, "build_s": build_s, "arena_bytes": fast_arena(fast)}
    extra = {"tensor_bytes": sum(k.sum_of_tensor_bytes for k in fast.kernels.values()
                                 if hasattr(k, "sum_of_tensor_bytes")), "buffered_ms": {}}
    for label, n in (("1", 1), ("all", cores)):
        if omp is not None:
            omp.omp_set_num_threads(n)
        sess, qsess = ort_session(model.SerializeToString(), n), ort_session(qdq, n)
        out["threads"][label] = {
            "c_ms": best_ms(lambda: fast.run(x), runs),
            "naive_ms": best_ms(lambda: naive.run(x), max(1, runs // 3)),
            "ort_ms": best_ms(lambda: sess.run(None, x), runs),
            "int8_ms": best_ms(lambda: int8.run(x), runs),
            "ort_int8_ms": best_ms(lambda: qsess.run(None, x), runs),
        }
        if tvm_run is not None:
            out["threads"][label]["tvm_ms"] = best_ms(tvm_run, runs)
        extra["buffered_ms"][label] = best_ms(lambda: buffered.run(x), max(1, runs // 3))
        # The reference last: OpenBLAS's idle workers keep spinning for a while after its
        # last product (about 0.1 s), taking a core from whatever runs next in the process;
        # measured first, it made the two-thread c runs after it 1.5x slower.
        with blas_threads(n):
            out["threads"][label]["ref_ms"] = best_ms(lambda: retarget.run(graph, x), runs)
    for m in (fast, naive, buffered, int8):
        m.close()
    return out, extra


def interleaved(name: str, size: int, rounds: int, omp, threads: tuple[int, ...] = (1,)) -> dict:
    """For a machine shared with other work: the float and int8 C and onnxruntime float and
    int8, at each thread count of `threads`, run one after another in each of `rounds` rounds,
    and each keeps its best round, so all of them see the same background load.
    {threads: {c_ms, ort_ms, int8_ms, ort_int8_ms}}."""
    model = zoo.build(name, size=size)
    graph = import_model(model)
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}
    fast = retarget.compile(graph, "c")
    int8 = retarget.compile(retarget.quantize(graph, [x], per_channel=True), "c")
    with tempfile.TemporaryDirectory() as d:
        qdq = ort_int8_model(model, x, d)
    runners = {}
    for n in threads:
        sess, qsess = ort_session(model.SerializeToString(), n), ort_session(qdq, n)
        runners[n] = {"c_ms": lambda: fast.run(x), "ort_ms": lambda s=sess: s.run(None, x),
                      "int8_ms": lambda: int8.run(x), "ort_int8_ms": lambda s=qsess: s.run(None, x)}

    def timed(n: int, f, runs: int) -> float:
        if omp is not None:
            omp.omp_set_num_threads(n)      # libgomp's team size for the c libraries
        return best_ms(f, runs)

    best = {n: {k: timed(n, f, 0) for k, f in rs.items()}      # warm-up and first round
            for n, rs in runners.items()}
    for _ in range(rounds - 1):
        for n, rs in runners.items():
            for k, f in rs.items():
                best[n][k] = min(best[n][k], timed(n, f, 1))
    fast.close()
    int8.close()
    return best


def fast_arena(module) -> int:
    """The arena bytes of the module's (single) c kernel."""
    sizes = [k.arena_bytes for k in module.kernels.values() if hasattr(k, "arena_bytes")]
    return int(sum(sizes))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default=NETS)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--interleaved", type=int, default=0, metavar="ROUNDS",
                    help="instead: c / ort / int8 / ort int8 at each of --threads in "
                         "interleaved rounds (for a shared machine); --json then writes "
                         "{net: {threads: {c_ms, ...}}}")
    ap.add_argument("--threads", default="1",
                    help="with --interleaved: thread counts, comma-separated (e.g. 1,2)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    omp = _omp()
    if args.interleaved:
        threads = tuple(int(t) for t in args.threads.split(","))
        results = {name: interleaved(name, args.size, args.interleaved, omp, threads)
                   for name in args.nets.split(",")}
        print(format_table(["network", "threads", "c ms", "ort ms", "int8 ms", "ort int8 ms",
                            "c / ort", "float / int8", "int8 / ort int8", "c speedup",
                            "ort speedup"],
                           [[name, n, f"{r['c_ms']:.1f}", f"{r['ort_ms']:.1f}",
                             f"{r['int8_ms']:.1f}", f"{r['ort_int8_ms']:.1f}",
                             f"{r['c_ms'] / r['ort_ms']:.2f}", f"{r['c_ms'] / r['int8_ms']:.2f}",
                             f"{r['int8_ms'] / r['ort_int8_ms']:.2f}",
                             f"{rs[1]['c_ms'] / r['c_ms']:.2f}" if 1 in rs else "-",
                             f"{rs[1]['ort_ms'] / r['ort_ms']:.2f}" if 1 in rs else "-"]
                            for name, rs in results.items() for n, r in rs.items()]))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(results, fh, indent=1)
        return 0
    results, rows = {}, []
    for name in args.nets.split(","):
        r, extra = measure(name, args.size, args.runs, omp)
        results[name] = r
        one = r["threads"]["1"]
        for label, t in r["threads"].items():
            rows.append([name, label, f"{t['c_ms']:.1f}", f"{t['naive_ms']:.1f}",
                         f"{extra['buffered_ms'][label]:.1f}",
                         f"{t['ort_ms']:.1f}", f"{t['ref_ms']:.1f}",
                         f"{t['int8_ms']:.1f}", f"{t['ort_int8_ms']:.1f}",
                         f"{t['tvm_ms']:.1f}" if "tvm_ms" in t else "-",
                         f"{t['c_ms'] / t['ort_ms']:.2f}", f"{t['c_ms'] / t['ref_ms']:.2f}",
                         f"{t['c_ms'] / t['int8_ms']:.2f}",
                         f"{t['int8_ms'] / t['ort_int8_ms']:.2f}",
                         f"{one['c_ms'] / t['c_ms']:.2f}", f"{one['int8_ms'] / t['int8_ms']:.2f}",
                         f"{t['naive_ms'] / t['c_ms']:.1f}",
                         f"{r['build_s']:.1f}", f"{r['arena_bytes'] / 2**20:.1f}",
                         f"{extra['tensor_bytes'] / 2**20:.1f}"])
        print(f"  {name}: done", flush=True)
    print(format_table(["network", "threads", "c ms", "naive ms", "buffered ms", "ort ms",
                        "ref ms", "int8 ms", "ort int8 ms", "tvm ms",
                        "c / ort", "c / ref", "float / int8", "int8 / ort int8",
                        "c speedup", "int8 speedup", "naive / c", "build s", "arena MiB",
                        "all tensors MiB"],
                       rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
