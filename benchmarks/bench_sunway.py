"""The Sunway target against its two baselines on the SW26010 cost model, as swTVM compares
them (AlexNet and VGG-19 at 224, batch 1), double buffering's gain, and the emulated runs.

    python benchmarks/bench_sunway.py [--nets alexnet,vgg19] [--size 224] [--json FILE]
                                      [--gld 25,50,100,200,400] [--no-sensitivity]

The baselines (docs/sunway.md, "The baselines"):
- openacc, the faithful one: the OpenACC code a careful programmer writes (outer loop over
  the 64 CPEs, each tensor's slice copied into LDM at the outermost loop level where it fits,
  global loads for the rest; no tiling, reordering, DMA hoisting or double buffering). This
  is what swTVM's 6.71x / 2.45x are measured against.
- elementwise: every main-memory element a global load / store (the old baseline).

Per network it prints every conv and fc layer as the paper counts it (swTVM Sec. 6.2: "the
execution time of the convolution and fully connected layer includes the ReLU layer"; our
explicit Pad kernels are left out, see cost.PaperLayer): ours, the openacc baseline, the
speedup, and ours double-buffered with the gain; then the per-layer averages beside the
paper's (swTVM Sec. 6.2 and abstract: AlexNet conv 8.32x, fc 2.87x, conv1 11.8x; VGG-19 conv
6.21x, fc 2.03x, conv4_2-4 10.15x; 6.71x / 2.45x overall); then how the faithful averages
move with each assumption (`--gld` latencies, the openacc copy rules, compute efficiency).

--json writes, per network: the old keys ("layers": [{"name", "kind", "ours_ms",
"baseline_ms" (elementwise), "openacc_ms", "double_buffer_ms"}], "conv_speedup" and
"fc_speedup" over the elementwise baseline, per kernel without the ReLU, "emulated_host_ms"),
and "faithful": {"conv_speedup", "fc_speedup", "max_conv_speedup", "max_conv_layer",
"paper": {...}, "layers": [{"name", "kind", "ours_ms", "openacc_ms", "speedup"}]},
"double_buffer_gain" (the network's predicted time single- over double-buffered),
"double_buffer": {"conv_mean_gain", "fc_mean_gain", "layers": [{"name", "kind", "single_ms",
"double_ms", "gain" (single / double), "overlap_gain" (of the double-buffered schedule:
without the overlap / with it; the rest of "gain" is the re-sized buffers)}],
"emulated_host_ms", "emulated_max_rel_diff"}, and "sensitivity": [{"case",
"conv_speedup", "fc_speedup"}].
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
from retarget.report.table import format_table
from retarget.targets.aot.program import Call
from retarget.targets.sunway.cost import paper_layers, program_costs
from retarget.targets.sunway.openacc import openacc_kernel

# swTVM (Sec. 6.2 for the networks, the abstract for the overall averages)
PAPER = {"alexnet": {"conv": 8.32, "fc": 2.87, "max_conv": 11.8, "max_conv_layer": "conv1"},
         "vgg19": {"conv": 6.21, "fc": 2.03, "max_conv": 10.15,
                   "max_conv_layer": "conv4_2-4"}}
PAPER_OVERALL = {"conv": 6.71, "fc": 2.45}


def speedups(ours, base, kind: str) -> float:
    ratios = [b.seconds / o.seconds for o, b in zip(ours, base) if o.kind == kind]
    return float(np.mean(ratios)) if ratios else float("nan")


def faithful(program, baseline, config, names: list[str] | None = None) -> dict:
    """Per paper layer (conv / fc with its ReLU): ours and the openacc baseline, and the
    per-layer averages and maximum."""
    ours, base = program_costs(program, config), program_costs(baseline, config)
    layers = []
    for i, layer in enumerate(paper_layers(program)):
        o, b = layer.seconds(ours), layer.seconds(base)
        layers.append({"name": names[i] if names else layer.name, "kind": layer.kind,
                       "ours_ms": 1e3 * o, "openacc_ms": 1e3 * b, "speedup": b / o})

    def mean(kind: str) -> float:
        r = [x["speedup"] for x in layers if x["kind"] == kind]
        return float(np.mean(r)) if r else float("nan")

    conv = [x for x in layers if x["kind"] == "conv"]
    top = max(conv, key=lambda x: x["speedup"]) if conv else None
    return {"conv_speedup": mean("conv"), "fc_speedup": mean("fc"),
            "max_conv_speedup": top["speedup"] if top else float("nan"),
            "max_conv_layer": top["name"] if top else "", "layers": layers}


def layer_names(net: str, program) -> list[str]:
    """The paper's layer names (conv1 ..., fc1 ...; VGG's conv1_1 ...) in program order."""
    layers = paper_layers(program)
    convs = sum(1 for l in layers if l.kind == "conv")
    if net == "vgg19" and convs == 16:
        blocks = [2, 2, 4, 4, 4]
        conv = [f"conv{b + 1}_{i + 1}" for b, n in enumerate(blocks) for i in range(n)]
        fc = ["fc6", "fc7", "fc8"]
    else:
        conv = [f"conv{i + 1}" for i in range(convs)]
        fc = [f"fc{i + 1}" for i in range(len(layers) - convs)]
    it_conv, it_fc = iter(conv), iter(fc)
    return [next(it_conv) if l.kind == "conv" else next(it_fc) for l in layers]


def openacc_variant(kernel, config):
    """The openacc baseline re-derived with `config`'s copy rules (from the elementwise
    program: the same lowered nests, outer loop marked)."""
    base = kernel.baselines["elementwise"]
    cfg = replace(config, mode="openacc", double_buffer=False)
    calls = tuple(Call(c.function, c.node, openacc_kernel(c.kernel, cfg), c.args)
                  for c in base.calls)
    return replace(base, mode="openacc", calls=calls)


def sensitivity(kernel, names, gld: list[int]) -> list[dict]:
    """How the faithful averages move with each assumption, one at a time."""
    config = kernel.config
    cases = [("as assumed", config, None)]
    # the programmer's copy choices follow the machine: a new latency re-derives the baseline
    cases += [(f"gld {c} cycles", replace(config, gld_cycles=c), replace(config, gld_cycles=c))
              for c in gld if c != config.gld_cycles]
    cases += [("openacc copies only per CPE-loop iteration", config,
               replace(config, acc_copy_levels="iteration")),
              ("openacc copies whatever fits, worthwhile or not", config,
               replace(config, acc_copy_rule="fits")),
              ("both (the literal reading)", config,
               replace(config, acc_copy_levels="iteration", acc_copy_rule="fits"))]
    cases += [(f"compute efficiency {e}", replace(config, compute_efficiency=e),
               replace(config, compute_efficiency=e))
              for e in (0.25, 1.0) if e != config.compute_efficiency]
    out = []
    for case, cost_config, acc_config in cases:
        base = kernel.baselines["openacc"] if acc_config is None else \
            openacc_variant(kernel, acc_config)
        f = faithful(kernel.program, base, cost_config, names)
        out.append({"case": case, "conv_speedup": f["conv_speedup"],
                    "fc_speedup": f["fc_speedup"], "max_conv_speedup": f["max_conv_speedup"]})
    return out


def run_once(module, x) -> tuple[dict, float]:
    module.run(x)                                   # warm-up: pages, threads
    t0 = time.perf_counter()
    out = module.run(x)
    return out, 1e3 * (time.perf_counter() - t0)


def measure(name: str, size: int, gld: list[int], sens: bool) -> tuple[dict, list, list]:
    graph = import_model(zoo.build(name, size=size))
    t0 = time.perf_counter()
    single = retarget.compile(graph, "sunway")
    double = retarget.compile(graph, "sunway", config={"double_buffer": True})
    compile_s = time.perf_counter() - t0
    (kernel,), (kernel_db,) = single.kernels.values(), double.kernels.values()
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)}
    out, host_ms = run_once(single, x)
    out_db, host_db_ms = run_once(double, x)
    diff = max(float(np.max(np.abs(out_db[k] - out[k])) / (np.max(np.abs(out[k])) or 1.0))
               for k in out)
    single.close()
    double.close()

    ours, elem = kernel.costs(), kernel.costs_of_baseline("elementwise")
    acc, ours_db = kernel.costs_of_baseline("openacc"), kernel_db.costs()
    layers = [{"name": o.name, "kind": o.kind, "ours_ms": 1e3 * o.seconds,
               "baseline_ms": 1e3 * e.seconds, "openacc_ms": 1e3 * a.seconds,
               "double_buffer_ms": 1e3 * d.seconds}
              for o, e, a, d in zip(ours, elem, acc, ours_db)]
    names = layer_names(name, kernel.program)
    fa = faithful(kernel.program, kernel.baselines["openacc"], kernel.config, names)
    fa["paper"] = PAPER.get(name, {})
    db_layers = []
    for n, layer in zip(names, paper_layers(kernel.program)):
        s, d = layer.seconds(ours), layer.seconds(ours_db)
        hidden = sum(ours_db[i].hidden_s for i in layer.calls)
        db_layers.append({"name": n, "kind": layer.kind, "single_ms": 1e3 * s,
                          "double_ms": 1e3 * d, "gain": s / d, "overlap_gain": (d + hidden) / d})
    t_single, t_double = sum(c.seconds for c in ours), sum(c.seconds for c in ours_db)

    def mean_gain(kind: str) -> float:
        return float(np.mean([x["gain"] for x in db_layers if x["kind"] == kind]))

    entry = {"layers": layers, "conv_speedup": speedups(ours, elem, "conv"),
             "fc_speedup": speedups(ours, elem, "fc"), "emulated_host_ms": host_ms,
             "faithful": fa, "double_buffer_gain": t_single / t_double,
             "double_buffer": {"conv_mean_gain": mean_gain("conv"),
                               "fc_mean_gain": mean_gain("fc"), "layers": db_layers,
                               "emulated_host_ms": host_db_ms,
                               "emulated_max_rel_diff": diff}}
    if sens:
        entry["sensitivity"] = sensitivity(kernel, names, gld)
    rows = [[name, f["name"], f["kind"], f"{f['ours_ms']:.3f}", f"{f['openacc_ms']:.3f}",
             f"{f['speedup']:.2f}", f"{d['double_ms']:.3f}", f"{d['gain']:.3f}",
             f"{d['overlap_gain']:.3f}"]
            for f, d in zip(fa["layers"], db_layers)]
    print(f"  {name}: compiled (single and double-buffered) in {compile_s:.1f} s, emulated "
          f"runs {host_ms:.0f} / {host_db_ms:.0f} ms, outputs differ by {diff:.1e} relative",
          flush=True)
    return entry, rows, entry.get("sensitivity", [])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default="alexnet,vgg19")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--gld", default="25,50,100,200,400",
                    help="global-load latencies (cycles) for the sensitivity table")
    ap.add_argument("--no-sensitivity", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    gld = [int(c) for c in args.gld.split(",") if c]
    results, layer_rows, summary, sens = {}, [], [], {}
    for name in args.nets.split(","):
        entry, rows, sens[name] = measure(name, args.size, gld, not args.no_sensitivity)
        results[name] = entry
        layer_rows += rows
        fa, paper = entry["faithful"], PAPER.get(name, {})
        summary.append([name, f"{fa['conv_speedup']:.2f}", f"{paper.get('conv', float('nan')):.2f}",
                        f"{fa['fc_speedup']:.2f}", f"{paper.get('fc', float('nan')):.2f}",
                        f"{fa['max_conv_speedup']:.2f} ({fa['max_conv_layer']})",
                        f"{paper.get('max_conv', float('nan')):.2f} "
                        f"({paper.get('max_conv_layer', '')})",
                        f"{entry['conv_speedup']:.1f} / {entry['fc_speedup']:.1f}",
                        f"{entry['double_buffer_gain']:.3f}"])
    print(format_table(["network", "layer", "kind", "ours ms", "openacc ms", "speedup",
                        "double-buffered ms", "db gain", "of it overlap"], layer_rows))
    print()
    if "alexnet" in results and "vgg19" in results:
        a, v = results["alexnet"]["faithful"], results["vgg19"]["faithful"]
        na = sum(1 for x in a["layers"] if x["kind"] == "conv")
        nv = sum(1 for x in v["layers"] if x["kind"] == "conv")
        conv = (na * a["conv_speedup"] + nv * v["conv_speedup"]) / (na + nv)
        fc = (a["fc_speedup"] + v["fc_speedup"]) / 2
        summary.append(["both (as the abstract)", f"{conv:.2f}", f"{PAPER_OVERALL['conv']:.2f}",
                        f"{fc:.2f}", f"{PAPER_OVERALL['fc']:.2f}", "", "", "", ""])
    print(format_table(["network", "conv x openacc", "paper", "fc x openacc", "paper",
                        "max conv", "paper", "conv / fc x elementwise", "db gain (total)"],
                       summary))
    if any(sens.values()):
        print()
        print("faithful conv / fc / max conv speedup, one assumption changed at a time:")
        cases = [c["case"] for c in next(iter(v for v in sens.values() if v))]
        rows = []
        for i, case in enumerate(cases):
            row = [case]
            for name in sens:
                c = sens[name][i]
                row.append(f"{c['conv_speedup']:.2f} / {c['fc_speedup']:.2f} / "
                           f"{c['max_conv_speedup']:.2f}")
            rows.append(row)
        print(format_table(["case", *sens], rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
