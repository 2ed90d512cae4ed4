"""How good the vta schedule search's analytic estimate is, on every conv/dense layer of zoo
networks at full size (the search ranks without lowering; its choice must be the full
cycle model's best or within 1 % of its cycles).

    python benchmarks/bench_vta_estimate.py [--nets resnet18,resnet50,...] [--size 224]
                                            [--pool 12] [--config pynq]

Per network: each distinct conv/dense geometry the compiler searched, the model cycles of the
search's choice over the least model cycles among the pool (tuning.choice_vs_model: all
candidates when a thread count has few, else the estimate's best `pool` per thread count).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from retarget import compiler, zoo
from retarget.frontend.onnx import import_model
from retarget.targets.vta.lower import Conv2d, Dense, tuning

NETS = "resnet18,resnet50,vgg16,mobilenet_v1,googlenet,squeezenet"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default=NETS)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--pool", type=int, default=12)
    ap.add_argument("--config", default="pynq")
    a = ap.parse_args()
    print(f"{'network':<14} {'layers':>6} {'within 1%':>9} {'worst':>7}  worst layer")
    all_ok = True
    for name in a.nets.split(","):
        t0 = time.perf_counter()
        g = import_model(zoo.build(name, size=a.size))
        rng = np.random.default_rng(0)
        calib = [{v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype)
                  for v in g.inputs}]
        tuning.clear_cache()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiler.compile(g, f"vta:{a.config}", calibration=calib)
        rows = [tuning.choice_vs_model(layer, cfg, a.pool) + (layer,)
                for layer, cfg, v in tuning.searched_layers()
                if v is None and isinstance(layer, (Conv2d, Dense))]
        worst = max(rows, key=lambda r: r[0])
        ok = sum(r[0] <= 1.01 for r in rows)
        all_ok &= ok == len(rows)
        lay = worst[2].as_conv() if isinstance(worst[2], Dense) else worst[2]
        print(f"{name:<14} {len(rows):6d} {ok:5d}/{len(rows):<3d} {worst[0]:7.4f}  "
              f"{worst[2].op} in {list(lay.in_shape)} -> {lay.out_channels} "
              f"k{list(lay.kernel)} s{list(lay.stride)}  ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    print("every choice within 1 %:", "yes" if all_ok else "NO")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
