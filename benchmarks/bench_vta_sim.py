"""The VTA simulators' speed: the C simulator against the Python one on whole networks, and the
Python simulator's throughput in simulated MACs per second.

    python benchmarks/bench_vta_sim.py [--json FILE] [--runs 3] [--config pynq] [--networks ...]
    python benchmarks/bench_vta_sim.py --throughput [--configs pynq,1x32,2x16] [--quick]

Networks (the default mode): ResNet-18, ResNet-50 and MobileNet v1 at 224 compiled for vta; for
each simulator (Python: targets/vta/sim; C: targets/vta/csim) a fresh device runs one inference
("first": every stream decoded, checked and planned from scratch, no recorded replay) and then a
second ("replay": the Python simulator replays its recorded steps; the C simulator simply runs
again). Times are the device's time for the vta tasks of one inference (TaskRecord.seconds:
the simulator alone; host packing and CPU regions excluded), median over --runs fresh devices.
The outputs of the two simulators are checked equal. Goals: C first run >= 5x faster than
Python's first run, and not slower than Python's replayed steady state. --json writes, per
network, {"python_first_s", "python_replay_s", "c_first_s", "c_replay_s", "insns"}.

Throughput (--throughput), the Python simulator alone:

Workloads, each built with the instruction-stream builder, run on a fresh simulator (cold plan
cache) and checked bit-exactly against NumPy before its time is reported:

- blocked GEMM: out[M, N] = clip((x[M, K] . w[N, K]^T) >> s, 0, 127) tiled to the SRAMs
  (M x N x K = 256x256x256 with 64-wide tiles, the published "256x256x64" case, and 1024^3);
- the ResNet-18 convolutions C2, C4..C12 (VTA Table 1 labels; 3x3 / 1x1, stride 1 / 2), each as the
  TVM-style schedule: output-row tiles, the input tile loaded once with padding, weights
  resident per output-channel tile, one GEMM instruction per tile whose uops enumerate
  (co, ci, dy, dx) and whose two loops run over output rows and columns, then SHR/MIN/MAX and
  the stores. "ResNet-18 total" weights each layer by how often the network uses it.

MAC/s = gemm_counter x BATCH x BLOCK_IN x BLOCK_OUT / wall time of Simulator.run (stream
decode and planning included; building the stream and the DRAM image excluded), best of 3 runs
each on a fresh simulator. Goal: >= 1 G MAC/s.
"""
from __future__ import annotations

import os

# One BLAS thread: the simulator issues many mid-sized products, and on a shared 2-core machine
# a multi-threaded BLAS stalls at its barriers whenever another process holds a core (measured:
# the same product took 0.8 ms single-threaded and up to 40 ms with 2 threads). Set before numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from retarget.targets.vta.builder import StreamBuilder
from retarget.targets.vta.config import preset
from retarget.targets.vta.isa import AluOp, MemType
from retarget.targets.vta.sim import Simulator

LOAD, COMPUTE, STORE = 1, 2, 3
GOAL = 1e9
REPEATS = 3

# name (the VTA paper's Table 1 labels; C1 and C3 are not run here): (H, W, Cin, Cout,
# kernel, pad, stride), times used in ResNet-18
RESNET18 = {
    "C2": ((56, 56, 64, 64, 3, 1, 1), 4), "C4": ((56, 56, 64, 128, 3, 1, 2), 1),
    "C5": ((56, 56, 64, 128, 1, 0, 2), 1), "C6": ((28, 28, 128, 128, 3, 1, 1), 3),
    "C7": ((28, 28, 128, 256, 3, 1, 2), 1), "C8": ((28, 28, 128, 256, 1, 0, 2), 1),
    "C9": ((14, 14, 256, 256, 3, 1, 1), 3), "C10": ((14, 14, 256, 512, 3, 1, 2), 1),
    "C11": ((14, 14, 256, 512, 1, 0, 2), 1), "C12": ((7, 7, 512, 512, 3, 1, 1), 3),
}


def requant(b, n_entries, shift):
    """acc[0:n] = clip(acc >> shift, 0, 127) as three ALU instructions over one uop."""
    k = b.uop_kernel([(0, 0)], [(n_entries, 1, 1)], name=f"requant{n_entries}")
    b.alu(k, AluOp.SHR, shift)
    b.alu(k, AluOp.MIN, 127)
    b.alu(k, AluOp.MAX, 0)


# ---- blocked GEMM --------------------------------------------------------------------------------

def gemm_stream(cfg, m, n, k, tile, shift):
    """x: (M/B, K/BI, B, BI), w: (N/BO, K/BI, BO, BI), y: (M/B, N/BO, B, BO)."""
    mb, nb, kb = m // cfg.batch, n // cfg.block_out, k // cfg.block_in
    tm, tn, tk = tile // cfg.batch, tile // cfg.block_out, tile // cfg.block_in
    b = StreamBuilder(cfg)
    b.alloc("x", (mb, kb, cfg.batch, cfg.block_in))
    b.alloc("w", (nb, kb, cfg.block_out, cfg.block_in))
    b.alloc("y", (mb, nb, cfg.batch, cfg.block_out))
    reset = b.uop_kernel([(j, 0, 0) for j in range(tn)], [(tm, tn, 0)], name="reset")
    mac = b.uop_kernel([(j, kk, j * tk + kk) for j in range(tn) for kk in range(tk)],
                       [(tm, tn, tk)], name="mac")
    first = True
    for i0 in range(0, mb, tm):
        for j0 in range(0, nb, tn):
            for k0 in range(0, kb, tk):
                if not first:
                    b.dep_pop(COMPUTE, LOAD)          # the previous tile's inputs are consumed
                b.load_2d(MemType.INP, 0, "x", i0 * kb + k0, tk, tm, kb)
                b.load_2d(MemType.WGT, 0, "w", j0 * kb + k0, tk, tn, kb)
                b.dep_push(LOAD, COMPUTE)
                b.dep_pop(LOAD, COMPUTE)
                if k0 == 0:
                    if not first:
                        b.dep_pop(STORE, COMPUTE)     # the previous outputs are stored
                    b.gemm(reset, reset=True)
                b.gemm(mac)
                b.dep_push(COMPUTE, LOAD)
                first = False
            requant(b, tm * tn, shift)
            b.dep_push(COMPUTE, STORE)
            b.dep_pop(COMPUTE, STORE)
            b.store_2d(0, "y", i0 * nb + j0, tn, tm, nb)
            b.dep_push(STORE, COMPUTE)
    return b.finish()


def gemm_reference(x, w, shift):
    acc = np.einsum("ikbc,jkoc->ijbo", x.astype(np.float64), w.astype(np.float64))
    return np.clip(acc.astype(np.int64) >> shift, 0, 127).astype(np.int8)


# ---- convolution ---------------------------------------------------------------------------------

def conv_plan(cfg, h, w, cin, cout, k, pad, stride):
    """Tile sizes that fit the SRAMs: output rows per tile and output-channel blocks per pass."""
    cib, cob = cin // cfg.block_in, cout // cfg.block_out
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    wp = w + 2 * pad
    co_t = max(1, min(cob, cfg.wgt_depth // (cib * k * k), cfg.uop_depth // (cib * k * k)))
    while cob % co_t:
        co_t -= 1
    th = ho
    while th > 1 and (cib * ((th - 1) * stride + k) * wp > cfg.inp_depth
                      or co_t * th * wo > cfg.acc_depth):
        th -= 1
    return cib, cob, ho, wo, wp, co_t, th


def conv_stream(cfg, layer, shift):
    h, w, cin, cout, k, pad, stride = layer
    cib, cob, ho, wo, wp, co_t, th = conv_plan(cfg, h, w, cin, cout, k, pad, stride)
    b = StreamBuilder(cfg)
    b.alloc("x", (cib, h, w, cfg.batch, cfg.block_in))
    b.alloc("w", (cob, cib, k, k, cfg.block_out, cfg.block_in))
    b.alloc("y", (cob, ho, wo, cfg.batch, cfg.block_out))
    kernels = {}

    def kernel(rows):
        # uops over (co, ci, dy, dx); loop 1 over output rows, loop 2 over output columns.
        if rows not in kernels:
            rows_in = (rows - 1) * stride + k
            uops = [(co * th * wo, ci * rows_in * wp + dy * wp + dx, ((co * cib + ci) * k + dy) * k + dx)
                    for co in range(co_t) for ci in range(cib) for dy in range(k) for dx in range(k)]
            kernels[rows] = (b.uop_kernel(uops, [(rows, wo, stride * wp), (wo, 1, stride)]),
                             b.uop_kernel([(co * th * wo, 0, 0) for co in range(co_t)],
                                          [(rows, wo, 0), (wo, 1, 0)]))
        return kernels[rows]

    first = True
    for r0 in range(0, ho, th):
        rows = min(th, ho - r0)
        rows_in = (rows - 1) * stride + k
        top = r0 * stride - pad
        pad_top, pad_bot = max(0, -top), max(0, top + rows_in - h)
        for c0 in range(0, cob, co_t):
            if not first:
                b.dep_pop(COMPUTE, LOAD)
            if c0 == 0:
                for ci in range(cib):
                    b.load_2d(MemType.INP, ci * rows_in * wp, "x", (ci * h + top + pad_top) * w,
                              w, rows_in - pad_top - pad_bot, w, pad, pad_top, pad, pad_bot)
            if first or cob > co_t:
                n_w = co_t * cib * k * k
                b.load_2d(MemType.WGT, 0, "w", c0 * cib * k * k, n_w, 1, n_w)
            b.dep_push(LOAD, COMPUTE)
            b.dep_pop(LOAD, COMPUTE)
            if not first:
                b.dep_pop(STORE, COMPUTE)
            mac, reset = kernel(rows)
            b.gemm(reset, reset=True)
            b.gemm(mac)
            b.dep_push(COMPUTE, LOAD)
            requant(b, co_t * th * wo, shift)
            b.dep_push(COMPUTE, STORE)
            b.dep_pop(COMPUTE, STORE)
            for co in range(co_t):
                b.store_2d(co * th * wo, "y", ((c0 + co) * ho + r0) * wo, wo, rows, wo)
            b.dep_push(STORE, COMPUTE)
            first = False
    return b.finish()


def conv_reference(cfg, x, wt, layer, shift):
    """Plain NumPy conv (im2col in float64, exact) on the packed tensors."""
    h, w, cin, cout, k, pad, stride = layer
    xs = x.transpose(3, 0, 4, 1, 2).reshape(cfg.batch, cin, h, w).astype(np.float64)
    ws = wt.transpose(0, 4, 1, 5, 2, 3).reshape(cout, cin, k, k).astype(np.float64)
    xp = np.pad(xs, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = np.stack([xp[:, :, dy:dy + stride * ho:stride, dx:dx + stride * wo:stride]
                     for dy in range(k) for dx in range(k)], axis=2)   # [B, Cin, k*k, Ho, Wo]
    acc = np.einsum("bcpyx,ocp->boyx", cols, ws.reshape(cout, cin, k * k)).astype(np.int64)
    y = np.clip(acc >> shift, 0, 127).astype(np.int8)                  # [B, Cout, Ho, Wo]
    return y.reshape(cfg.batch, cout // cfg.block_out, cfg.block_out, ho, wo).transpose(1, 3, 4, 0, 2)


# ---- driver --------------------------------------------------------------------------------------

def timed_run(cfg, prog, data, repeats=REPEATS):
    """Best wall time of `repeats` runs, each on a fresh simulator (empty plan and decode
    caches), so every run pays for decoding and planning; the machine is shared and noisy."""
    image = prog.dram_image(data)
    stream = prog.stream()
    best = math.inf
    for _ in range(repeats):
        dram = image.copy()
        sim = Simulator(cfg, dram=dram)
        t0 = time.perf_counter()
        res = sim.run(stream)
        best = min(best, time.perf_counter() - t0)
    return best, res, prog.read(dram, "y")


def bench_gemm(cfg, size, tile, rng):
    prog = gemm_stream(cfg, size, size, size, tile, shift=10)
    x = rng.integers(-128, 128, prog.buffers["x"].shape).astype(np.int8)
    w = rng.integers(-128, 128, prog.buffers["w"].shape).astype(np.int8)
    secs, res, y = timed_run(cfg, prog, {"x": x, "w": w})
    ok = np.array_equal(y, gemm_reference(x, w, 10))
    return secs, res, ok, len(prog.insns)


def bench_conv(cfg, layer, rng):
    h, w, cin, cout, k, pad, stride = layer
    shift = round(math.log2(math.sqrt(cin * k * k) * 74 * 74 / 64))
    prog = conv_stream(cfg, layer, shift)
    x = rng.integers(-128, 128, prog.buffers["x"].shape).astype(np.int8)
    wt = rng.integers(-128, 128, prog.buffers["w"].shape).astype(np.int8)
    secs, res, y = timed_run(cfg, prog, {"x": x, "w": wt})
    ok = np.array_equal(y, conv_reference(cfg, x, wt, layer, shift))
    return secs, res, ok, len(prog.insns)


# ---- networks: C simulator against Python ---------------------------------------------------------

NETWORKS = ("resnet18@224", "resnet50@224", "mobilenet_v1@224")
SIMULATORS = ("python", "c")


def one_inference(module, x, kind: str) -> tuple[list[float], list[float], int, dict]:
    """([first, second] run seconds, the same in CPU seconds of the simulator's run calls,
    instructions, outputs) on a fresh device."""
    from retarget.targets.vta.device import VTADevice
    from retarget.targets.vta.target import DEVICE_MEMORY
    cfg = module.target.config
    device = VTADevice(cfg, memory_bytes=min(DEVICE_MEMORY, cfg.dram_bytes), simulator=kind)
    module.bind(device)
    cpu = [0.0]
    run = device.sim.run

    def cpu_timed(stream):
        t0 = time.process_time()
        try:
            return run(stream)
        finally:
            cpu[0] += time.process_time() - t0

    device.sim.run = cpu_timed      # CPU time: what the simulator costs when cores are shared
    times, cpus = [], []
    for _ in range(2):
        cpu[0] = 0.0
        out = module.run(x)
        prof = [p for p in module.profile if p.target != "cpu"]
        times.append(sum(p.task_seconds for p in prof))
        cpus.append(cpu[0])
    insns = sum(p.counters.get("instructions", 0) for p in prof)
    return times, cpus, insns, out


def bench_network(name: str, size: int, spec: str, runs: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_vta_e2e import compile_steps
    module, _ = compile_steps(name, spec, size)
    x = {v.name: np.random.default_rng(1).standard_normal(v.type.shape).astype(v.type.dtype)
         for v in module.graph.inputs}
    row, cpu, outputs = {}, {}, {}
    for kind in SIMULATORS:
        walls, cpus = [], []
        for _ in range(runs):
            wall, cpu_s, insns, outputs[kind] = one_inference(module, x, kind)
            walls.append(wall)
            cpus.append(cpu_s)
        for k, phase in enumerate(("first", "replay")):
            row[f"{kind}_{phase}_s"] = statistics.median(w[k] for w in walls)
            cpu[f"{kind}_{phase}_s"] = statistics.median(c[k] for c in cpus)
        row["insns"] = insns
    module.close()
    if any(not np.array_equal(outputs["python"][k], outputs["c"][k]) for k in outputs["python"]):
        raise SystemExit(f"{name}@{size}: the C and Python simulators' outputs differ")
    return row, cpu


def networks_main(args) -> int:
    from retarget.targets.vta.csim import available
    if not available():
        raise SystemExit("the C simulator cannot be built here (no C compiler)")
    spec = f"vta:{args.config}"
    print(f"{spec}: the vta tasks of one inference, median of {args.runs} fresh devices (s); "
          f"wall = the device's task time (JSON), cpu = CPU time of the simulator's run calls")
    print(f"{'network':18} {'':4} {'insns':>7} {'py first':>9} {'py replay':>9} {'C first':>8} "
          f"{'C replay':>8} {'first x':>8} {'C/py replay':>11}")
    result, ok = {}, {"wall": True, "cpu": True}
    for item in args.networks.split(","):
        name, size = item.split("@")
        wall, cpu = bench_network(name, int(size), spec, args.runs)
        result[item] = wall
        for label, r in (("wall", wall), ("cpu", cpu)):
            speedup = r["python_first_s"] / r["c_first_s"]
            ratio = r["c_first_s"] / r["python_replay_s"]
            ok[label] &= speedup >= 5 and ratio <= 1
            print(f"{item if label == 'wall' else '':18} {label:4} {wall['insns']:7d} "
                  f"{r['python_first_s']:9.3f} {r['python_replay_s']:9.3f} {r['c_first_s']:8.3f} "
                  f"{r['c_replay_s']:8.3f} {speedup:7.1f}x {ratio:11.2f}")
    for label, met in ok.items():
        print(f"goals ({label}: C first >= 5x Python first, C first <= Python replay): "
              + ("met" if met else "NOT met"))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", metavar="FILE", help="networks: write the per-network times")
    ap.add_argument("--runs", type=int, default=3, help="networks: fresh devices per simulator")
    ap.add_argument("--config", default="pynq", help="networks: the VTA preset")
    ap.add_argument("--networks", default=",".join(NETWORKS), help="networks: name@size,...")
    ap.add_argument("--throughput", action="store_true",
                    help="the Python simulator's MAC/s on GEMM and conv streams instead")
    ap.add_argument("--configs", default="pynq", help="throughput: comma-separated VTA presets")
    ap.add_argument("--quick", action="store_true", help="throughput: GEMM 256 and conv C2 only")
    args = ap.parse_args(argv)
    if not args.throughput:
        return networks_main(args)
    rng = np.random.default_rng(0)
    all_ok = True
    print(f"{'config':7} {'workload':30} {'insns':>7} {'MACs':>12} {'sim s':>8} "
          f"{'GMAC/s':>7} {'x goal':>6}  exact")
    for name in args.configs.split(","):
        cfg = preset(name)
        macs_per = cfg.batch * cfg.block_in * cfg.block_out
        rows = []
        gemms = [(256, 64)] if args.quick else [(256, 64), (1024, 128)]
        for size, tile in gemms:
            secs, res, ok, n = bench_gemm(cfg, size, tile, rng)
            rows.append((f"gemm {size}^3 tile {tile}", n, res.counters.gemm_counter * macs_per,
                         secs, ok, 1))
        layers = ["C2"] if args.quick else list(RESNET18)
        for lname in layers:
            layer, times = RESNET18[lname]
            secs, res, ok, n = bench_conv(cfg, layer, rng)
            h, w, cin, cout, k, pad, stride = layer
            rows.append((f"conv {lname} {h}x{w} {cin}->{cout} k{k}s{stride}", n,
                         res.counters.gemm_counter * macs_per, secs, ok, times))
        for label, n, macs, secs, ok, _ in rows:
            all_ok &= ok
            print(f"{name:7} {label:30} {n:7d} {macs:12,d} {secs:8.3f} {macs / secs / 1e9:7.2f} "
                  f"{macs / secs / GOAL:6.1f}  {'yes' if ok else 'NO'}")
        if not args.quick:
            conv_rows = rows[len(gemms):]
            macs = sum(r[2] * r[5] for r in conv_rows)
            secs = sum(r[3] * r[5] for r in conv_rows)
            print(f"{name:7} {'ResNet-18 C2,C4-C12 total':30} {'':7} {macs:12,d} {secs:8.3f} "
                  f"{macs / secs / 1e9:7.2f} {macs / secs / GOAL:6.1f}  (layers x uses)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
