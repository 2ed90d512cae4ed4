"""The host regions of a vta module on the NumPy reference against `--host c:serial` (the
generated C of the c target's int8 mode, run in-process through ctypes).

    python benchmarks/bench_host_c.py [--nets resnet18] [--size 224] [--runs 15] [--json FILE]

Per network (batch 1, ResNet-18 @224 by default): the best of `--runs` runs of the summed
wall time of the cpu regions (RegionProfile.seconds: copies into and out of each C region's
device included) with each host, and how many cpu regions each host leaves.
--json writes {"<net>": {"reference_ms", "c_ms", "reference_regions", "c_regions"}}.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.table import format_table


def host_time(name: str, size: int, runs: int) -> dict:
    g = import_model(zoo.build(name, seed=0, size=size))
    v = g.inputs[0]
    data = [{v.name: np.random.default_rng(i).standard_normal(v.type.shape).astype(np.float32)}
            for i in range(3)]
    row = {}
    for key, host in (("reference", None), ("c", "c:serial")):
        m = retarget.compile(g, "vta", calibration=data[:2], host=host)
        try:
            best = float("inf")
            for _ in range(runs):
                m.run(data[2])
                best = min(best, sum(p.seconds for p in m.profile if p.target == "cpu"))
            row[f"{key}_ms"] = round(best * 1e3, 3)
            row[f"{key}_regions"] = sum(1 for r in m.regions if r.target == "cpu")
        finally:
            m.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default="resnet18")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = {n: host_time(n, args.size, args.runs) for n in args.nets.split(",")}
    print(format_table(["network", "reference ms", "c ms", "cpu regions ref / c"],
                       [[n, f"{r['reference_ms']:.3f}", f"{r['c_ms']:.3f}",
                         f"{r['reference_regions']} / {r['c_regions']}"]
                        for n, r in results.items()]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
