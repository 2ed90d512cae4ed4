"""The dnnvm target against the DNNVM paper's measurements (../shared/specs/dnnvm.md §7).

For VGG-16, ResNet-50, ResNet-152 and GoogLeNet at 224x224, batch 1, on zu2 and zu9: the
cycle model's baseline (unfused) GOP/s beside the paper's Table III / IV figure, compile time
(calibration excluded), and the behavioural simulator's speed running the whole network.
Then the two worked cases of Sec. VI-B (Fig. 7, Fig. 8) timed layer by layer, and the speed
goals: simulator >= 1 G MAC/s on a ResNet-50 layer, compile ResNet-50 <= 5 s, cycle model
<= 50 ms for a whole ResNet-50.

"GOP/s model" is what compile() produces (eq. 5 tiles unless the cycle model times a larger
tile faster); "eq. 5 only" is the same network with the paper's tiles everywhere.
GOP/s counts 2 ops per useful MAC of the layers on the overlay (FC layers run on the CPU, as in
the paper) over their modelled time. zu9's figure is per chip: its three engines each run a
frame (batch-1 latency is one engine's; the table prints both).

    python benchmarks/bench_dnnvm.py [--json FILE] [--nets vgg16,resnet50] [--presets zu2]
    python benchmarks/bench_dnnvm.py --calibrate     # refit ddr_bytes_per_cycle, insn_overhead

--calibrate fits the two free fields on the paper's *baseline* VGG and ResNet-50 at zu2 only
(a grid search minimising the squared log error) and prints the fit; the other nets and zu9
are then predicted without refitting. The fitted values are the config defaults.
"""
from __future__ import annotations

import argparse
import json
import math
import time
import warnings

import numpy as np

from retarget import zoo
from retarget.compiler import prepare
from retarget.frontend.onnx import import_model
from retarget.passes.infer_shapes import infer_shapes
from retarget.passes.partition import partition
from retarget.table import format_table
from retarget.runtime.module import Module
from retarget.targets.accel.layers import Conv2d, Pool2d, Requant, ResidualAdd
from retarget.targets.dnnvm import lower as dnnvm_lower
from retarget.targets.dnnvm.lower import Lowering
from retarget.targets.dnnvm.sim import Simulator
from retarget.targets.dnnvm.timing import simulate_timing
from retarget.targets.registry import get_target

# Table III (ZU2, baseline = no fusion) and Table IV (ZU9), GOP/s; None where not given.
PAPER = {("vgg16", "zu2"): 325.5, ("resnet50", "zu2"): 195.4, ("resnet152", "zu2"): 212.5,
         ("googlenet", "zu2"): 183.1, ("vgg16", "zu9"): 2820.0, ("resnet50", "zu9"): 1380.0,
         ("resnet152", "zu9"): None, ("googlenet", "zu9"): 1410.0}
FIT_ON = ("vgg16", "resnet50")
COMPILE_GOAL_S, MODEL_GOAL_MS, SIM_GOAL_GMACS = 5.0, 50.0, 1.0


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def quantised(name: str, size: int):
    """The network quantised for dnnvm (the number format is the same for every preset)."""
    g = infer_shapes(import_model(zoo.build(name, size=size, num_classes=1000, seed=0)))
    g.toposort()
    rng = np.random.default_rng(0)
    calib = [{v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return g, prepare(g, get_target("dnnvm"), calib), calib[0]


def compile_for(q, spec: str, overrides=None):
    """(target, regions, kernels, seconds) of partition + lower (calibration excluded)."""
    target = get_target(spec, overrides)
    t0 = time.perf_counter()
    parts = partition(q, target)
    kernels = {r.name: target.lower(r) for r in parts.offloaded}
    return target, parts, kernels, time.perf_counter() - t0


def modelled_gops(kernels, cfg, repeats: int = 1) -> tuple[float, int, float]:
    """(single-engine GOP/s, modelled cycles, seconds the cycle model took: the best of
    `repeats` runs, as the model is deterministic and this machine is shared)."""
    model_s = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        results = [simulate_timing(k.program) for k in kernels.values()]
        model_s = min(model_s, time.perf_counter() - t0)
    cycles = sum(r.total_cycles for r in results)
    macs = sum(info.macs for k in kernels.values() for info in k.layers)
    return 2 * macs / (cycles / (cfg.clock_mhz * 1e6)) / 1e9, cycles, model_s


def run_network(name, spec, args, cache) -> dict:
    if name not in cache:
        cache[name] = quantised(name, args.size)
    g, q, x = cache[name]
    dnnvm_lower._CHOICES.clear()
    target, parts, kernels, compile_s = compile_for(q, spec)
    cfg = target.config
    gops1, cycles, model_s = modelled_gops(kernels, cfg, repeats=3)
    # the same network with the paper's eq. 5 tiles everywhere (no cycle-model tile search)
    dnnvm_lower._CHOICES.clear()
    _, _, eq5_kernels, _ = compile_for(q, spec, {"tile_search": False})
    gops_eq5 = modelled_gops(eq5_kernels, cfg)[0] * cfg.engines
    row = {"preset": cfg.name, "gops_model": gops1 * cfg.engines,
           "gops_paper": PAPER.get((name, cfg.name)), "compile_s": compile_s,
           "sim_gmacs": None, "latency_ms": cycles / (cfg.clock_mhz * 1e3),
           "engines": cfg.engines, "instructions": sum(len(k.program.insns)
                                                       for k in kernels.values()),
           "model_ms": model_s * 1e3, "gops_eq5": gops_eq5}
    if not args.no_sim:
        m = Module(q, target, parts.regions, kernels, parts.report)
        m.run(x)
        prof = [p for p in m.profile if p.target == "dnnvm"]
        secs = sum(p.seconds for p in prof)
        row["sim_gmacs"] = sum(p.counters.get("macs", 0) for p in prof) / secs / 1e9
        m.close()
    return row


def fig_cases(spec: str) -> list[list]:
    """Sec. VI-B, unfused, layer by layer: (case, ours ms, paper ms)."""
    cfg = get_target(spec).config

    def ms(build, *shapes) -> float:
        ctx = Lowering(cfg)
        ins = [ctx.input(f"x{i}", s) for i, s in enumerate(shapes[:-1])]
        build(ctx, ins, [ctx.feature_map("y", shapes[-1])])
        return simulate_timing(ctx.finish()).total_cycles / (cfg.clock_mhz * 1e3)

    conv7 = Conv2d("fig7.conv", (1, 32, 28, 28), 256, (5, 5), (1, 1), (2, 2, 2, 2),
                   requant=Requant(8))
    pool7 = Pool2d("fig7.pool", "max", (1, 256, 28, 28), (3, 3), (1, 1), (1, 1, 1, 1))
    conv8 = Conv2d("fig8.conv", (1, 64, 56, 56), 256, (1, 1), requant=Requant(8))
    add8 = ResidualAdd("fig8.add", (1, 256, 56, 56), 0, 0, 1)
    return [
        ["Fig. 7 conv 28x28x32, 5x5 -> 256",
         ms(lambda c, i, o: c.conv(conv7, i[0], o, None, None), conv7.in_shape, conv7.out_shape),
         0.375],
        ["Fig. 7 pool 3x3 s1 on 28x28x256",
         ms(lambda c, i, o: c.pool(pool7, i[0], o), pool7.in_shape, pool7.out_shape), 0.242],
        ["Fig. 8 conv 56x56x64, 1x1 -> 256 (x2)",
         ms(lambda c, i, o: c.conv(conv8, i[0], o, None, None), conv8.in_shape,
            conv8.out_shape), 0.467],
        ["Fig. 8 eltwise add 56x56x256",
         ms(lambda c, i, o: c.add(add8, i[0], i[1], o), add8.shape, add8.shape, add8.shape),
         0.833],
    ]


def sim_layer_gmacs() -> tuple[str, float]:
    """The simulator on one ResNet-50 layer (stage 3's 3x3 conv at 224), weights random."""
    cfg = get_target("dnnvm:zu2").config
    layer = Conv2d("layer3.1.conv2", (1, 256, 14, 14), 256, (3, 3), (1, 1), (1, 1, 1, 1),
                   requant=Requant(10))
    rng = np.random.default_rng(0)
    ctx = Lowering(cfg)
    x, y = ctx.input("x", layer.in_shape), ctx.feature_map("y", layer.out_shape)
    ctx.conv(layer, x, [y], rng.integers(-128, 128, (256, 256, 3, 3)).astype(np.int8), None)
    p = ctx.finish()
    img = p.dram_image({**ctx.constants, "x": rng.integers(-128, 128, (1, 14, 14, 256))
                        .astype(np.int8)})
    sim = Simulator(cfg, img)
    _, s = timed(sim.run, p.insns)
    return layer.name, layer.macs / s / 1e9


def calibrate(args) -> None:
    """Grid-fit ddr_bytes_per_cycle and insn_overhead on the FIT_ON nets at zu2."""
    cache = {n: quantised(n, args.size) for n in FIT_ON}
    parts = {n: partition(cache[n][1], get_target("dnnvm:zu2")) for n in FIT_ON}
    best = None
    for bpc in (4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 16.0):
        for ovh in (0, 10, 20, 40, 80, 160):
            target = get_target("dnnvm:zu2", {"ddr_bytes_per_cycle": bpc, "insn_overhead": ovh})
            err, got = 0.0, {}
            for n in FIT_ON:
                dnnvm_lower._CHOICES.clear()
                kernels = {r.name: target.lower(r) for r in parts[n].offloaded}
                got[n], _, _ = modelled_gops(kernels, target.config)
                err += math.log(got[n] / PAPER[(n, "zu2")]) ** 2
            print(f"  ddr_bytes_per_cycle {bpc:5.1f}  insn_overhead {ovh:4d}  " +
                  "  ".join(f"{n} {got[n]:6.1f}" for n in FIT_ON) + f"  sq.log.err {err:.5f}")
            if best is None or err < best[0]:
                best = (err, bpc, ovh)
    print(f"fit: ddr_bytes_per_cycle = {best[1]}, insn_overhead = {best[2]} "
          f"(squared log error {best[0]:.5f}); set them as DNNVMConfig defaults")


def write_json(path: str, results) -> None:
    """The --json file of this benchmark (and of bench_fusion.py)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="write the per-network figures here")
    ap.add_argument("--nets", default="vgg16,resnet50,resnet152,googlenet")
    ap.add_argument("--presets", default="zu2,zu9")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--no-sim", action="store_true", help="skip running the simulator")
    ap.add_argument("--calibrate", action="store_true")
    args = ap.parse_args()
    if args.calibrate:
        calibrate(args)
        return
    cache: dict = {}
    results, rows = {}, []
    for preset in args.presets.split(","):
        for name in args.nets.split(","):
            r = run_network(name, f"dnnvm:{preset}", args, cache)
            results[f"{name}@{preset}"] = {k: r[k] for k in ("preset", "gops_model",
                                                            "gops_paper", "compile_s",
                                                            "sim_gmacs")}
            paper = r["gops_paper"]
            err = "-" if paper is None else f"{100 * (r['gops_model'] / paper - 1):+.1f}%"
            fitted = "fitted" if preset == "zu2" and name in FIT_ON else "predicted"
            rows.append([f"{name}@{preset}", f"{r['gops_model']:.1f}", f"{r['gops_eq5']:.1f}",
                         "-" if paper is None else f"{paper:.1f}", err, fitted,
                         f"{r['latency_ms']:.2f}", r["instructions"], f"{r['model_ms']:.1f}",
                         f"{r['compile_s']:.2f}",
                         "-" if r["sim_gmacs"] is None else f"{r['sim_gmacs']:.2f}"])
            print(f"  {name}@{preset}: {r['gops_model']:.1f} GOP/s", flush=True)
    print(format_table(["network", "GOP/s model", "eq. 5 only", "GOP/s paper", "rel. err", "",
                        "latency ms", "insns", "model ms", "compile s", "sim GMAC/s"], rows,
                       align="<>>>>>>>>>>",
                       title="baseline (no fusion), batch 1, 224x224; zu9 GOP/s = 3 engines x "
                             "one engine's (latency is one engine's)"))
    print()
    for spec in ("dnnvm:zu2", "dnnvm:zu9"):
        print(format_table(["case (unfused)", "ours ms", "paper ms", "ratio"],
                           [[c, f"{a:.3f}", f"{b:.3f}", f"{a / b:.2f}"]
                            for c, a, b in fig_cases(spec)], align="<>>>",
                           title=f"Sec. VI-B worked cases on {spec} (paper: ZU2)"))
        print()
    layer, gm = sim_layer_gmacs()
    r50 = [r for k, r in results.items() if k.startswith("resnet50@zu2")]
    print("goals:")
    print(f"  simulator on ResNet-50 {layer}: {gm:.2f} G MAC/s (goal >= {SIM_GOAL_GMACS})")
    if r50:
        print(f"  compile ResNet-50 (zu2, calibration excluded): {r50[0]['compile_s']:.2f} s "
              f"(goal <= {COMPILE_GOAL_S})")
    mt = [row for row in rows if row[0] == "resnet50@zu2"]
    if mt:
        print(f"  cycle model, whole ResNet-50 (zu2): {mt[0][8]} ms (goal <= {MODEL_GOAL_MS})")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
