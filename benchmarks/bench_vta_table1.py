"""VTA paper, Table 1 / Figure 15 on the cycle model, with the REAL lowering: ResNet-18
convolutions C1..C12 (the paper's labels and shapes) on the pynq config with one and with two
virtual threads, side by side, then whole-network ResNet-18 cycles and frames per second, and
Figure 16: ResNet-18 end to end on the Pynq's Cortex-A9 alone and with the convolutions
offloaded to VTA (the host side from a simple CPU model, targets/cpu/host_model.py).

    python benchmarks/bench_vta_table1.py [--config pynq] [--check C12] [--no-network]
                                          [--trace out.json] [--svg roofline.svg] [--csv t.csv]

Per layer: `lower_conv2d` (targets/vta/lower/) with Requantize(shift 8, ReLU clip [0, 127]) and
an int32 bias, tiles chosen by the cycle model (choose_schedule(layer, cfg, vthreads) with
its default cost: tuning.model_schedule), timed with timing.simulate_timing. The requantisation
is the lowering's real one: bias + rounding ADD, SHR, MIN, MAX on the ALU (4 passes at II 2 per
output vector, plus the accumulator reset).

Check: the `--check` layer's 2-thread stream (and its 1-thread one) run on the behavioural
simulator with random data and must equal the integer reference bit for bit; the run's wall
time is set against the model's.

Whole network: retarget.compile(zoo resnet18 at 224, "vta:<config>") and every VTA kernel's
Program timed with simulate_timing, kernel after kernel (the host's layers are not counted).
C1 (3 input channels) is offloaded too, its kernel window packed into channels on the host
when the cycle model says it pays (targets/vta/window_packing.py).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # the simulator's products; shared cores

import argparse
import time
import warnings
from dataclasses import replace

import numpy as np

from retarget.report.layers import format_layers, row_from_result, write_csv
from retarget.report.roofline import write_roofline
from retarget.report.table import format_table
from retarget.report.trace import write_trace
from retarget.targets.vta.config import load_config
from retarget.targets.vta.hazards import check_hazards
from retarget.targets.vta.lower import (Conv2d, LoweringContext, Requant, choose_schedule,
                                        lower_conv2d, reference, run_segment)
from retarget.targets.cpu.host_model import PYNQ_A9, node_work
from retarget.targets.vta.timing import simulate_timing

# The VTA paper's Table 1, row for row: name: ((H=W, Cin, Cout, kernel, pad, stride), times
# the layer is used in ResNet-18). "All ops use SAME padding": pad = kernel // 2. C1 ran on the
# CPU in the paper (3 input channels); C3 (1x1, 64 -> 64, stride 1) is in the paper's table but
# not in ResNet-18 itself (no 1x1 conv keeps 64 channels), so it is used 0 times.
TABLE1 = {
    "C1": ((224, 3, 64, 7, 3, 2), 1),
    "C2": ((56, 64, 64, 3, 1, 1), 4), "C3": ((56, 64, 64, 1, 0, 1), 0),
    "C4": ((56, 64, 128, 3, 1, 2), 1), "C5": ((56, 64, 128, 1, 0, 2), 1),
    "C6": ((28, 128, 128, 3, 1, 1), 3), "C7": ((28, 128, 256, 3, 1, 2), 1),
    "C8": ((28, 128, 256, 1, 0, 2), 1), "C9": ((14, 256, 256, 3, 1, 1), 3),
    "C10": ((14, 256, 512, 3, 1, 2), 1), "C11": ((14, 256, 512, 1, 0, 2), 1),
    "C12": ((7, 512, 512, 3, 1, 1), 3),
}
# The paper's offloaded single-kernel layers (C2..C12; C1 stayed on the CPU).
OFFLOADED = tuple(n for n in TABLE1 if n != "C1")
# The ten offloaded layers ResNet-18 actually uses (C2, C4..C12): the set earlier rounds
# measured (bench_dse.py's roofline figure is over these).
RESNET18 = {n: TABLE1[n] for n in OFFLOADED if TABLE1[n][1] > 0}
REQUANT = Requant(8, 0, 127)


def conv_layer(name: str) -> Conv2d:
    (hw, ci, co, k, p, s), _ = TABLE1[name]
    return Conv2d(name, (1, ci, hw, hw), co, (k, k), (s, s), (p,) * 4, 1, REQUANT)


def operands(layer: Conv2d, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, layer.in_shape).astype(np.int8)
    w = rng.integers(-128, 128, (layer.out_channels, layer.in_shape[1]) + layer.kernel)
    b = rng.integers(-2 ** 14, 2 ** 14, layer.out_channels).astype(np.int32)
    return x, w.astype(np.int8), b


def lower_layer(layer: Conv2d, cfg, vthreads: int):
    """(segment, seconds spent choosing + lowering) for `layer` alone with the model's tiles."""
    _, w, b = operands(layer)
    t0 = time.perf_counter()
    ctx = LoweringContext(cfg)
    x = ctx.input("x", layer.in_shape)
    y = lower_conv2d(ctx, layer, x, w, b, schedule=choose_schedule(layer, cfg, vthreads))
    seg = ctx.finish([y])
    return seg, time.perf_counter() - t0


def check_bit_exact(layer: Conv2d, seg) -> float:
    """Run `seg` on the behavioural simulator; raise unless it equals the reference. Returns
    the simulator's wall time."""
    x, w, b = operands(layer)
    check_hazards(seg.program)
    t0 = time.perf_counter()
    run = run_segment(seg, {"x": x})
    dt = time.perf_counter() - t0
    (got,) = run.outputs.values()
    want = reference(layer, x, w, b)
    if not np.array_equal(got, want):
        bad = int(np.count_nonzero(got != want))
        raise SystemExit(f"{layer.name}: simulator output differs from the reference in {bad} "
                         "values: the timed stream is wrong")
    return dt


def network(cfg_name: str, size: int = 224):
    """Cycles of every VTA kernel of a compiled zoo ResNet-18: [(region, cycles, gemm, macs)]."""
    import retarget
    from retarget import zoo
    from retarget.frontend.onnx import import_model
    graph = import_model(zoo.build("resnet18", size=size))
    rng = np.random.default_rng(0)
    calib = [{v.name: rng.standard_normal(v.type.shape).astype(np.float32)
              for v in graph.inputs}]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = retarget.compile(graph, f"vta:{cfg_name}", calibration=calib)
    compile_s = time.perf_counter() - t0
    out = []
    for name, kernel in module.kernels.items():
        prog = getattr(kernel, "program", None)
        if prog is None:
            continue
        r = simulate_timing(prog)
        out.append((name, r, len(prog.layers)))
    return out, compile_s, module

# Figure 16 (VTA paper, Sec. 5 "End-to-end ResNet Evaluation"): over 3 s on the Cortex-A9
# alone, under 0.5 s with the convolutions offloaded, and 40x on the offloaded convolutions.
PAPER_FIG16 = {"cpu_s": "> 3", "cpu_vta_s": "< 0.5", "conv_speedup": 40.0}
FIG16_GROUPS = ("C1 conv (CPU in both)", "conv C2..C12 (offloaded)", "residual add",
                "max pool", "avg pool + fc")


def table1_label(node) -> str | None:
    """The Table 1 row whose shape a ResNet-18 Conv node has, or None."""
    x, w = node.inputs[0].type.shape, node.inputs[1].type.shape
    k, s = w[2], node.attrs.get("strides", [1, 1])[0]
    for name, ((hw, ci, co, kk, _, ss), _) in TABLE1.items():
        if (x[2], x[1], w[0], k, s) == (hw, ci, co, kk, ss):
            return name
    return None


def fig16_group(node) -> str | None:
    if node.op == "Conv":
        return FIG16_GROUPS[0] if table1_label(node) == "C1" else FIG16_GROUPS[1]
    return {"Add": FIG16_GROUPS[2], "MaxPool": FIG16_GROUPS[3],
            "GlobalAveragePool": FIG16_GROUPS[4], "Gemm": FIG16_GROUPS[4]}.get(node.op)


def fig16(vta_cycles: dict[str, int], cfg, cpu=PYNQ_A9, size: int = 224):
    """Seconds per Figure 16 group of ResNet-18: (rows [group, CPU only, CPU + VTA], CPU-only
    conv seconds of C2..C12, their VTA seconds). `vta_cycles` is each Table 1 layer's cycle
    count alone on VTA; the host's nodes are costed by the CPU model, as are all nodes in the
    CPU-only bar. Not modelled: moving tensors between host and VTA, (de)quantisation."""
    from retarget import zoo
    from retarget.frontend.onnx import import_model
    from retarget.passes.infer_shapes import infer_shapes
    graph = infer_shapes(import_model(zoo.build("resnet18", size=size)))
    cpu_only = dict.fromkeys(FIG16_GROUPS, 0.0)
    offload = dict.fromkeys(FIG16_GROUPS, 0.0)
    for node in graph.nodes:
        group = fig16_group(node)
        work = node_work(node, cpu.element_bytes)
        t = cpu.seconds(work.flops, work.nbytes)
        if group is None:
            if t:
                raise SystemExit(f"Figure 16: node {node.name} ({node.op}) has no group")
            continue
        cpu_only[group] += t
        offload[group] += (vta_cycles[table1_label(node)] / (cfg.clock_mhz * 1e6)
                           if group == FIG16_GROUPS[1] else t)
    rows = [[g, cpu_only[g], offload[g]] for g in FIG16_GROUPS]
    return rows, cpu_only[FIG16_GROUPS[1]], offload[FIG16_GROUPS[1]]


def print_fig16(vta_cycles: dict[str, int], cfg) -> None:
    rows, conv_cpu, conv_vta = fig16(vta_cycles, cfg)
    total_cpu, total_vta = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(format_table(["layer group", "CPU only s", "CPU + VTA s"],
                       [[g, f"{a:.3f}", f"{b:.3f}"] for g, a, b in rows],
                       footer=[["total (ours)", f"{total_cpu:.2f}", f"{total_vta:.3f}"],
                               ["total (paper)", PAPER_FIG16["cpu_s"],
                                PAPER_FIG16["cpu_vta_s"]]],
                       align="<>>",
                       title=f"Figure 16: ResNet-18 on the Pynq, host = {PYNQ_A9.name} model "
                             f"({PYNQ_A9.peak_gflops:.2f} GFLOP/s peak x {PYNQ_A9.efficiency} "
                             f"= {PYNQ_A9.sustained_gflops:.2f} sustained, "
                             f"{PYNQ_A9.dram_gbs} GB/s), VTA = cycle model ({cfg.name}, "
                             "2 threads)"))
    print(f"offloaded convolutions: {conv_cpu:.2f} s on the CPU model -> {conv_vta:.3f} s on "
          f"VTA = {conv_cpu / conv_vta:.1f}x (paper: {PAPER_FIG16['conv_speedup']:.0f}x)")
    # The CPU model's conv time is compute-bound, so it scales as 1 / efficiency.
    eff40 = PYNQ_A9.efficiency * conv_cpu / conv_vta / PAPER_FIG16["conv_speedup"]
    print(f"the paper's 40x, with our VTA times, implies a CPU at {eff40:.2f} of NEON peak "
          f"({PYNQ_A9.peak_gflops * eff40:.2f} GFLOP/s)")
    sens = []
    for eff in (0.1, 0.25, 0.5, 1.0):
        r, c, v = fig16(vta_cycles, cfg, replace(PYNQ_A9, efficiency=eff))
        sens.append([f"{eff:g}", f"{PYNQ_A9.peak_gflops * eff:.2f}",
                     f"{sum(x[1] for x in r):.2f}", f"{sum(x[2] for x in r):.3f}",
                     f"{c / v:.1f}x"])
    print(format_table(["CPU efficiency", "GFLOP/s", "CPU only s", "CPU + VTA s",
                        "conv speedup"], sens, align=">>>>>",
                       title="sensitivity to the assumed CPU efficiency (paper: > 3 s, < 0.5 s, "
                             "40x)"))
    print()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--layers", default=",".join(TABLE1))
    ap.add_argument("--check", default="C12", help="layer run bit-exact on the simulator")
    ap.add_argument("--no-network", action="store_true", help="skip whole-network ResNet-18")
    ap.add_argument("--trace", help="Perfetto trace of the network's VTA kernels")
    ap.add_argument("--svg", help="roofline plot (.svg, or .png with matplotlib)")
    ap.add_argument("--csv", help="per-layer table of both thread counts")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    names = args.layers.split(",")
    rows = {1: [], 2: []}
    chosen, checks = [], []
    for name in names:
        layer = conv_layer(name)
        for vt in (1, 2):
            seg, lower_s = lower_layer(layer, cfg, vt)
            r = simulate_timing(seg.program)
            rows[vt].append(row_from_result(name, r))
            chosen.append((name, vt, seg.reports[0].schedule, len(seg.program.insns), lower_s))
            if name == args.check:
                t0 = time.perf_counter()
                simulate_timing(seg.program)
                model_s = time.perf_counter() - t0
                checks.append((name, vt, len(seg.program.insns), model_s,
                               check_bit_exact(layer, seg)))

    head = ["layer", "cyc 1vt", "cyc 2vt", "GOPS 1vt", "GOPS 2vt", "util 1vt", "util 2vt",
            "ceil", "roof 1vt", "roof 2vt", "bound", "2vt gain"]
    body = [[r1.name, f"{r1.cycles:,}", f"{r2.cycles:,}", f"{r1.gops:.1f}", f"{r2.gops:.1f}",
             f"{100 * r1.utilisation:.1f}%", f"{100 * r2.utilisation:.1f}%",
             f"{100 * r2.compute_ceiling:.1f}%",
             f"{100 * r1.roof_fraction:.1f}%", f"{100 * r2.roof_fraction:.1f}%", r2.bound,
             f"{r1.cycles / r2.cycles:.2f}x"] for r1, r2 in zip(rows[1], rows[2])]
    print(format_table(head, body, title=f"VTA paper Table 1 (C1..C12) on {cfg.name} (peak "
                       f"{cfg.peak_gops:.1f} GOPS, {cfg.bus_bytes * cfg.clock_mhz / 1e3:.2f} GB/s)"
                       ": real lowering, model-chosen tiles, cycle model"))
    print()
    for vt in (1, 2):
        print(format_layers(rows[vt], title=f"{vt} virtual thread(s): per-layer detail"))
        print()
    print(format_table(["layer", "vt", "tile h,w,co,ci", "insns", "choose+lower s"],
                       [[n, vt, f"{s.tile_h},{s.tile_w},{s.tile_co},{s.tile_ci}", ni,
                         f"{t:.2f}"] for n, vt, s, ni, t in chosen],
                       title="schedules chosen by the cycle model"))
    print()

    def mean(xs):
        return sum(xs) / len(xs) if xs else float("nan")
    # The goals below are over the offloaded layers ResNet-18 uses (C2, C4..C12), as measured
    # in earlier rounds: C1 ran on the CPU in the paper and C3 is not in the network.
    table = rows
    rows = {vt: [r for r in table[vt] if r.name in RESNET18] or table[vt] for vt in (1, 2)}
    cb = [i for i, r in enumerate(rows[2]) if r.bound == "compute"]
    u1, u2 = (mean([rows[v][i].utilisation for i in cb]) for v in (1, 2))
    f1, f2 = (mean([r.roof_fraction for r in rows[v]]) for v in (1, 2))
    print(f"compute-bound layers ({', '.join(rows[2][i].name for i in cb)}): mean utilisation "
          f"{100 * u1:.2f}% (1 thread) -> {100 * u2:.2f}% (2 threads), gain "
          f"{u2 / u1:.2f}x; goal >= 88% with 2 threads: {'MET' if u2 >= 0.88 else 'MISSED'}")
    print(f"all layers: mean fraction of roofline {100 * f1:.1f}% (1 thread) -> "
          f"{100 * f2:.1f}% (2 threads); goal >= 90%: {'MET' if f2 >= 0.90 else 'MISSED'}")
    # Why the roofline goal is out of reach: the GEMM core and the tensor ALU share the compute
    # module, so each layer's resets and requantisation passes cap its GEMM utilisation at its
    # compute ceiling whatever the schedule (a conv's ceiling depends on its shape only).
    best = mean([min(1.0, r.ceiling_gops / r.roof_gops) for r in rows[2]])
    ceiled = mean([r.gops / min(r.ceiling_gops, r.roof_gops) for r in rows[2]])
    print(f"  the compute ceilings (GEMM / (GEMM + resets + ALU); with an ALU stage "
          f"GEMM / max(GEMM + resets, ALU)) allow at most "
          f"{100 * best:.1f}% of the roofline on average with these schedules' DRAM traffic; "
          f"the 2-thread schedules reach "
          f"{100 * ceiled:.1f}% of the roofline lowered to each layer's ceiling")
    print(f"peak utilisation over layers: {100 * max(r.utilisation for r in rows[1]):.1f}% "
          f"(1 thread) -> {100 * max(r.utilisation for r in rows[2]):.1f}% (2 threads); "
          "paper: 70% -> 88%")
    if set(RESNET18) <= set(names):
        for vt in (1, 2):
            cyc = sum(r.cycles * RESNET18[r.name][1] for r in rows[vt] if r.name in RESNET18)
            print(f"C2, C4..C12 weighted by use in ResNet-18, {vt} thread(s): {cyc:,} cycles = "
                  f"{cyc / cfg.clock_mhz / 1e3:.1f} ms")
    print()
    if checks:
        print(format_table(["layer", "vt", "insns", "model ms", "simulator ms", "sim / model",
                            "bit-exact"],
                           [[n, vt, ni, f"{m * 1e3:.2f}", f"{s * 1e3:.0f}", f"{s / m:.0f}x",
                             "yes"] for n, vt, ni, m, s in checks],
                           title="timed streams run on the behavioural simulator"))
        print()
    if set(RESNET18) <= set(names):
        print_fig16({r.name: r.cycles for r in table[2]}, cfg)
    if not args.no_network:
        kernels, compile_s, module = network(cfg.name)
        total = sum(r.total_cycles for _, r, _ in kernels)
        gemm = sum(r.gemm_cycles for _, r, _ in kernels)
        nlayers = sum(n for _, _, n in kernels)
        print(f"whole ResNet-18 (1x3x224x224) compiled for vta:{cfg.name} in {compile_s:.1f} s: "
              f"{len(kernels)} VTA kernel(s), {nlayers} layers on VTA (C1 included); host layers "
              f"not counted")
        for d in module.target.packings:
            print(f"  {d.conv}: {d.summary}")
        print(f"  VTA cycles {total:,} = {total / cfg.clock_mhz / 1e3:.1f} ms -> "
              f"{cfg.clock_mhz * 1e6 / total:.1f} frames/s; GEMM utilisation "
              f"{100 * gemm / total:.1f}%")
        per_layer = sorted((lt for _, r, _ in kernels for lt in r.layers),
                           key=lambda lt: -lt.cycles)[:5]
        print("  longest layers: " + ", ".join(f"{lt.name} {lt.cycles:,}" for lt in per_layer))
        if args.trace:
            name, r, _ = max(kernels, key=lambda k: k[1].total_cycles)
            write_trace(args.trace, r, module.kernels[name].program.insns)
            print(f"wrote {args.trace}: kernel {name}, {r.total_cycles:,} cycles")
    if args.csv:
        write_csv(args.csv, [_renamed(r, f"{r.name}/{vt}vt") for vt in (1, 2) for r in table[vt]])
    if args.svg:
        write_roofline(args.svg, {"1 thread": table[1], "2 threads": table[2]},
                       title=f"VTA Table 1 layers on {cfg.name} (cycle model, real lowering)")


def _renamed(row, name):
    return replace(row, name=name)


if __name__ == "__main__":
    main()
