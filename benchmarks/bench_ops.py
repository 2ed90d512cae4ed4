"""Our fast Conv (im2col + BLAS) vs onnxruntime on every distinct ResNet-50 conv at 224x224,
batch 1. Prints one row per shape with both latencies and the ratio, plus totals weighted by
how often each shape occurs in ResNet-50 (torchvision v1.5 layout: stride on the 3x3).

    python benchmarks/bench_ops.py [--repeat N] [--threads T]

--threads sets onnxruntime's intra-op threads and (through threadpoolctl, when installed) our
BLAS threads, so both sides use the same cores. On a shared 2-core machine a 2-thread OpenBLAS
GEMM can slow down 10-25x whenever another process holds one core (its threads spin-wait for
each other); compare with --threads 1 when the machine is busy.

Our GEMM is NumPy's OpenBLAS. If the environment pins OPENBLAS_CORETYPE=Haswell on an AVX-512
CPU, OpenBLAS uses AVX2 kernels at about half of onnxruntime's (AVX-512) GEMM speed; running
with OPENBLAS_CORETYPE=SkylakeX shows what the same code does with AVX-512 kernels.
"""
from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

from retarget.ops import OPS

# (in_channels, out_channels, kernel, stride, input size, occurrences in ResNet-50)
RESNET50_CONVS = [
    (3, 64, 7, 2, 224, 1),
    (64, 64, 1, 1, 56, 1), (64, 64, 3, 1, 56, 3), (64, 256, 1, 1, 56, 4),
    (256, 64, 1, 1, 56, 2),
    (256, 128, 1, 1, 56, 1), (128, 128, 3, 2, 56, 1), (128, 512, 1, 1, 28, 4),
    (256, 512, 1, 2, 56, 1), (512, 128, 1, 1, 28, 3), (128, 128, 3, 1, 28, 3),
    (512, 256, 1, 1, 28, 1), (256, 256, 3, 2, 28, 1), (256, 1024, 1, 1, 14, 6),
    (512, 1024, 1, 2, 28, 1), (1024, 256, 1, 1, 14, 5), (256, 256, 3, 1, 14, 5),
    (1024, 512, 1, 1, 14, 1), (512, 512, 3, 2, 14, 1), (512, 2048, 1, 1, 7, 3),
    (1024, 2048, 1, 2, 14, 1), (2048, 512, 1, 1, 7, 2), (512, 512, 3, 1, 7, 2),
]


def best_of(fn, repeat: int) -> float:
    fn()  # warm up (allocations, BLAS thread start)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def ort_conv(x, w, b, attrs, threads: int):
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", 1, x.shape)],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    args = ap.parse_args()
    try:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(args.threads, user_api="blas")
    except ImportError:
        print("threadpoolctl not installed: our BLAS uses its default thread count")
        limit = contextlib.nullcontext()
    with limit:
        run(args)


def run(args) -> None:
    conv = OPS["Conv"]
    rng = np.random.default_rng(0)
    print(f"{'conv (cin->cout k s @in)':30s} {'GMAC':>6s} {'ours ms':>9s} {'ort ms':>8s} "
          f"{'ratio':>6s} {'x':>3s}")
    total_ours = total_ort = 0.0
    for cin, cout, k, s, size, count in RESNET50_CONVS:
        x = rng.standard_normal((1, cin, size, size)).astype(np.float32)
        w = (rng.standard_normal((cout, cin, k, k)) * 0.05).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)
        full = dict(conv.attrs, **attrs)
        ours = best_of(lambda: conv.run([x, w, b], full, fast=True), args.repeat)
        run_ort = ort_conv(x, w, b, attrs, args.threads)
        theirs = best_of(run_ort, args.repeat)
        # a benchmark of wrong answers is worthless: check agreement once per shape
        np.testing.assert_allclose(conv.run([x, w, b], full)[0], run_ort()[0],
                                   rtol=1e-3, atol=1e-3)
        out = (size + 2 * (k // 2) - k) // s + 1
        gmac = cout * out * out * cin * k * k / 1e9
        total_ours += ours * count
        total_ort += theirs * count
        label = f"{cin}->{cout} {k}x{k} s{s} @{size}"
        print(f"{label:30s} {gmac:6.3f} {ours * 1e3:9.2f} {theirs * 1e3:8.2f} "
              f"{ours / theirs:6.2f} {count:3d}")
    print(f"{'ResNet-50 convs (weighted)':30s} {'':6s} {total_ours * 1e3:9.1f} "
          f"{total_ort * 1e3:8.1f} {total_ours / total_ort:6.2f}")


if __name__ == "__main__":
    main()
