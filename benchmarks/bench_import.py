"""Import speed: ONNX file -> simplified Graph for full-size zoo models (target: ResNet-50 < 1 s).

Prints, per model, the time of each step of load_onnx and the cost of Graph.copy next to the
generic copy.deepcopy it replaced. Run: python benchmarks/bench_import.py [model ...]
"""
from __future__ import annotations

import copy
import sys
import tempfile
import time
from pathlib import Path

import onnx

from retarget import zoo
from retarget.frontend.onnx import from_onnx_model, read_onnx
from retarget.passes.verify import verify
from retarget.passes.simplify import simplify


def _best(fn, repeat=3):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def bench(name: str, tmp: Path) -> None:
    path = tmp / f"{name}.onnx"
    onnx.save(zoo.build(name), path)
    t_read, model = _best(lambda: read_onnx(path))
    t_conv, g = _best(lambda: from_onnx_model(model))
    g.toposort()
    t_verify, _ = _best(lambda: verify(g))
    t_simp, s = _best(lambda: simplify(g))
    t_copy, _ = _best(lambda: s.copy())
    memo = {id(v.const): v.const for v in s.constants()}
    t_deep, _ = _best(lambda: copy.deepcopy(s, dict(memo)))
    total = t_read + t_conv + t_verify + t_simp
    print(f"{name:14s} {path.stat().st_size / 1e6:7.1f} MB {len(s.nodes):5d} nodes | read+check "
          f"{t_read:6.3f}s  convert {t_conv:6.3f}s  verify {t_verify:6.3f}s  simplify {t_simp:6.3f}s"
          f"  total {total:6.3f}s | copy {t_copy * 1e3:6.2f} ms vs deepcopy {t_deep * 1e3:6.2f} ms "
          f"({t_deep / t_copy:4.1f}x)")


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        for name in names or ["resnet50", "resnet18", "mobilenet_v2", "vgg16"]:
            bench(name, Path(d))


if __name__ == "__main__":
    main(sys.argv[1:])
