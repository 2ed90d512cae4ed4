"""The Sunway target against the OpenACC-style baseline on the SW26010 cost model, as swTVM
compares them (AlexNet and VGG-19 at 224, batch 1), plus the emulated run on this host.

    python benchmarks/bench_sunway.py [--nets alexnet,vgg19] [--size 224] [--json FILE]
                                      [--gld 50,100,200,400]

Per network: every layer's predicted time for our code (`ours_ms`: LDM buffers, loop order
and DMA from swTVM's algorithms) and for the baseline (`baseline_ms`: the lowered nests, outer
loop over the 64 CPEs, element-wise global loads / stores), its kind (conv, fc, pool, ...);
the average per-layer speedup over the convolution layers and over the fully connected ones
(the paper averages per layer: 6.71x = (5 x 8.32 + 16 x 6.21) / 21); and the host wall time of
one emulated run (`emulated_host_ms`, 64 pthreads on this machine). The baseline's time is
mostly global-load latency, which no public figure we trust fixes: `--gld` prints how both
averages move with it (the JSON uses the config's default).

--json writes {"<net>": {"layers": [{"name", "kind", "ours_ms", "baseline_ms"}],
"conv_speedup", "fc_speedup", "emulated_host_ms"}}.
Paper (swTVM Sec. 6.2 and abstract): AlexNet conv 8.32x, fc 2.87x, conv1 11.8x; VGG-19 conv
6.21x, fc 2.03x; on average 6.71x / 2.45x.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from dataclasses import replace

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.table import format_table
from retarget.targets.sunway.cost import program_costs

PAPER = {"alexnet": (8.32, 2.87), "vgg19": (6.21, 2.03)}


def speedups(ours, base, kind: str) -> float:
    ratios = [b.seconds / o.seconds for o, b in zip(ours, base) if o.kind == kind]
    return float(np.mean(ratios)) if ratios else float("nan")


def measure(name: str, size: int, gld: list[int]) -> tuple[dict, list[list[str]], list[str]]:
    graph = import_model(zoo.build(name, size=size))
    t0 = time.perf_counter()
    module = retarget.compile(graph, "sunway")
    compile_s = time.perf_counter() - t0
    (kernel,) = module.kernels.values()
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}
    module.run(x)                                   # warm-up: pages, threads
    t0 = time.perf_counter()
    module.run(x)
    host_ms = 1e3 * (time.perf_counter() - t0)
    ours, base = kernel.costs(), kernel.costs_of_baseline()
    module.close()
    layers = [{"name": o.name, "kind": o.kind, "ours_ms": 1e3 * o.seconds,
               "baseline_ms": 1e3 * b.seconds} for o, b in zip(ours, base)]
    entry = {"layers": layers, "conv_speedup": speedups(ours, base, "conv"),
             "fc_speedup": speedups(ours, base, "fc"), "emulated_host_ms": host_ms}
    rows = [[name, o.name[:34], o.kind, o.where, f"{1e3 * o.seconds:.3f}",
             f"{1e3 * b.seconds:.3f}", f"{b.seconds / o.seconds:.1f}"]
            for o, b in zip(ours, base) if o.kind in ("conv", "fc")]
    sens = []
    for cycles in gld:
        cfg = replace(kernel.config, gld_cycles=cycles)
        o2, b2 = program_costs(kernel.program, cfg), program_costs(kernel.baseline, cfg)
        sens.append(f"{speedups(o2, b2, 'conv'):.2f} / {speedups(o2, b2, 'fc'):.2f}")
    print(f"  {name}: compiled in {compile_s:.1f} s, emulated run {host_ms:.0f} ms", flush=True)
    return entry, rows, sens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default="alexnet,vgg19")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--gld", default="50,100,200,400",
                    help="global-load latencies (cycles) for the sensitivity table")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    gld = [int(c) for c in args.gld.split(",") if c]
    results, layer_rows, summary, sens_rows = {}, [], [], []
    for name in args.nets.split(","):
        entry, rows, sens = measure(name, args.size, gld)
        results[name] = entry
        layer_rows += rows
        paper = PAPER.get(name, (float("nan"), float("nan")))
        ours_total = sum(l["ours_ms"] for l in entry["layers"])
        base_total = sum(l["baseline_ms"] for l in entry["layers"])
        summary.append([name, f"{entry['conv_speedup']:.2f}", f"{paper[0]:.2f}",
                        f"{entry['fc_speedup']:.2f}", f"{paper[1]:.2f}", f"{ours_total:.1f}",
                        f"{base_total:.1f}", f"{entry['emulated_host_ms']:.0f}"])
        sens_rows.append([name, *sens])
    print(format_table(["network", "layer", "kind", "on", "ours ms", "baseline ms", "speedup"],
                       layer_rows))
    print()
    print(format_table(["network", "conv speedup", "paper", "fc speedup", "paper",
                        "ours ms", "baseline ms", "emulated host ms"], summary))
    print()
    print("conv / fc speedup by the assumed global-load latency (cycles):")
    print(format_table(["network", *(f"gld {c}" for c in gld)], sens_rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
