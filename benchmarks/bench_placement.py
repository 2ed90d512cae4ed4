"""Placement across devices: one network compiled for vta, dnnvm or both, how it is split and
what the split costs.

For each placement of a zoo network (default ResNet-18 at 64x64, width 0.5): the nodes and
MACs per device, offloaded regions, bytes copied between host and devices per inference and
the part of them that moves between two devices, and the modelled device time: every
offloaded region's stream timed by its device's cycle model at that device's clock, summed
(regions run one after another). "their copies us" prices the bytes moved between devices
as `placement="cheapest"` does (two memcpys through the host's DRAM at the Pynq's 2.1 GB/s,
compiler.COPY_SECONDS_PER_BYTE); the other host copies and the CPU regions are in neither. Each placement is also run once and checked bit for bit against the integer
reference.

    python benchmarks/bench_placement.py [--net resnet18] [--size 64] [--width 0.5] [--json F]
"""
from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

import retarget
from retarget import zoo
from retarget.compiler import COPY_SECONDS_PER_BYTE
from retarget.frontend.onnx import import_model
from retarget.report.table import format_table
from retarget.targets.cpu.reference import run_graph

PLACEMENTS = [   # label -> (devices, compile options)
    ("vta only", "vta", {}),
    ("dnnvm only", "dnnvm", {}),
    ("vta,dnnvm first-fit", "vta,dnnvm", {}),
    ("dnnvm,vta first-fit", "dnnvm,vta", {}),
    ("vta,dnnvm layer3-4 pinned to dnnvm", "vta,dnnvm",
     {"pins": {"/layer[34].*/Conv*": "dnnvm", "/layer[34].*add/*": "dnnvm"}}),
    ("vta,dnnvm cheapest", "vta,dnnvm", {"placement": "cheapest"}),
    # dnnvm's small `test` preset is closer to the pynq VTA: the prices split the network
    ("dnnvm:test only", "dnnvm:test", {}),
    ("vta,dnnvm:test cheapest", "vta,dnnvm:test", {"placement": "cheapest"}),
]


def modelled_seconds(module) -> float:
    """Sum over offloaded regions of the stream's cycles at its own device's clock."""
    total = 0.0
    for r in module.offloaded:
        t = module.kernels[r.name].timing()
        total += t.total_cycles / (t.config.clock_mhz * 1e6)
    return total


def measure(graph, calibration, x, devices: str, options: dict) -> dict:
    t0 = time.perf_counter()
    m = retarget.compile(graph, devices, calibration=calibration, **options)
    compile_s = time.perf_counter() - t0
    got, want = m.run(x), run_graph(m.graph, x)
    exact = all(np.array_equal(got[k], want[k]) for k in want)
    rep = m.report
    per_device = {d: {"nodes": len(rep.on(d)), "macs": sum(n.macs for n in rep.on(d))}
                  for d in ("vta", "dnnvm")}
    moved = sum(p.bytes_between for p in m.profile)
    assert moved == rep.bytes_between_devices, (moved, rep.bytes_between_devices)
    out = {"devices": devices, "regions": rep.num_regions, "per_device": per_device,
           "bytes_crossing": rep.bytes_crossing, "bytes_between_devices": moved,
           "modelled_us": modelled_seconds(m) * 1e6,
           "between_copy_us": moved * COPY_SECONDS_PER_BYTE * 1e6, "compile_s": compile_s,
           "bit_exact": exact}
    m.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", default="resnet18")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--width", type=float, default=0.5)
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args()
    graph = import_model(zoo.build(args.net, size=args.size, width=args.width, num_classes=10,
                                   seed=0))
    rng = np.random.default_rng(0)
    cal = [{v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}
           for _ in range(4)]
    x = {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}
    results = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, devices, options in PLACEMENTS:
            results[label] = measure(graph, cal, x, devices, options)
    rows = [[label, r["regions"], f"{r['per_device']['vta']['macs'] / 1e6:.1f}",
             f"{r['per_device']['dnnvm']['macs'] / 1e6:.1f}", r["bytes_crossing"],
             r["bytes_between_devices"], f"{r['modelled_us']:.0f}",
             f"{r['between_copy_us']:.0f}", f"{r['compile_s']:.1f}",
             "yes" if r["bit_exact"] else "NO"] for label, r in results.items()]
    print(f"{args.net} {args.size}x{args.size} width {args.width} (vta: pynq 1x16 @100 MHz; "
          f"dnnvm: zu2 @330 MHz unless :test)")
    print(format_table(["placement", "regions", "vta MMACs", "dnnvm MMACs", "host<->dev B",
                        "between devices B", "modelled device us", "their copies us",
                        "compile s", "bit-exact"],
                       rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"net": args.net, "size": args.size, "width": args.width,
                       "placements": results}, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
