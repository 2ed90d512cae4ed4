"""The standalone program `retarget deploy` writes: wall time per inference of ResNet-18 (and
any other zoo network given) compiled for vta with a C host, against `retarget run` (the
Python runtime: host regions as the same generated C through ctypes, VTA regions on the C
simulator through the Device API) on the same module.

    python benchmarks/bench_deploy.py [--json FILE] [--networks resnet18] [--size 224]
                                      [--repeat 10] [--config pynq]

Per network: compile (`host="c:serial"`: the c target's -O3 -march=native build, one
thread), write the project, `make` it (its default CFLAGS -O3 -march=native, retarget's C simulator as the VTA
driver), then `model --repeat N` (the program's own clock: N inferences after loading, no
file I/O inside) and N `module.run` calls (median); the outputs of both are checked equal.
Wall and CPU time (the process's: the median run's for module.run, the program's clock()).
Prints a table; --json writes, per network, {"program_ms", "program_cpu_ms",
"retarget_run_ms", "retarget_run_cpu_ms", "build_s", "vta_regions", "host_regions",
"identical"}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import retarget
from retarget import zoo
from retarget.deploy import build_program, deploy, run_program
from retarget.frontend.onnx import import_model


def measure(name: str, size: int, repeat: int, config: str) -> dict:
    g = import_model(zoo.build(name, size=size, seed=0))
    rng = np.random.default_rng(0)
    data = [{v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}
            for _ in range(3)]
    module = retarget.compile(g, f"vta:{config}", calibration=data[:2], host="c:serial")
    x = data[2]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
            t0 = time.perf_counter()
            program = build_program(deploy(module, Path(tmp) / name))
            build_s = time.perf_counter() - t0
            outs, timing = run_program(program, list(x.values()), len(g.outputs),
                                       repeat=max(repeat, 2))
        want = module.run(x)          # first run: kernels uploaded, libraries loaded
        times, cpu = [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            module.run(x)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        identical = all(np.array_equal(o, want[v.name]) for o, v in zip(outs, module.graph.outputs))
        return {"program_ms": timing.wall_ms, "program_cpu_ms": timing.cpu_ms,
                "retarget_run_ms": 1e3 * statistics.median(times),
                "retarget_run_cpu_ms": 1e3 * statistics.median(cpu),
                "build_s": build_s, "vta_regions": len(module.offloaded),
                "host_regions": len(module.host.kernels), "identical": identical}
    finally:
        module.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--networks", default="resnet18")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args(argv)
    results = {}
    print(f"{'network':<16} {'program ms (cpu)':>17} {'retarget run ms (cpu)':>22} "
          f"{'build s':>8} {'vta/host regions':>17}  identical")
    for name in args.networks.split(","):
        r = results[f"{name}@{args.size}"] = measure(name, args.size, args.repeat, args.config)
        prog = f"{r['program_ms']:.1f} ({r['program_cpu_ms']:.1f})"
        run = f"{r['retarget_run_ms']:.1f} ({r['retarget_run_cpu_ms']:.1f})"
        print(f"{name + '@' + str(args.size):<16} {prog:>17} {run:>22} {r['build_s']:>8.1f} "
              f"{str(r['vta_regions']) + '/' + str(r['host_regions']):>17}  {r['identical']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["identical"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
