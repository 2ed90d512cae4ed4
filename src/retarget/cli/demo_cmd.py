"""`retarget demo [--config PRESET] [--batch N]`: the main job, end to end, on shipped data.

The shipped digits CNN (src/retarget/data, trained by scripts/train_digits.py on scikit-learn's
8x8 digits) is quantised to int8 on its calibration split, compiled for the simulated VTA
(or `--target dnnvm`: the DNNVM-style FPGA overlay; `--target nvdla`: the NVDLA-style engine,
its regions built by the outside compiler process, multiplier + shift int8),
and run on the held-out digits it never saw. Printed: float top-1 vs int8-on-simulator top-1
(the check: within ACCURACY_TOLERANCE points), whether every simulated output equals the
integer reference bit for bit, the placement report, the simulator's counters and the cycle
model's per-layer summary (--csv/--json/--roofline/--trace write the full report).
The float targets (`--target c`: generated C on the host; `--target sunway`: the SW26010 code
under athread emulation, with its cost model's per-layer table) run the float model and are
checked against the reference within their tolerance instead of bit for bit.
Exit status 1 when either check fails.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ..errors import InputError

ACCURACY_TOLERANCE = 1.0   # percentage points int8 may lose against float


DEFAULT_PRESET = {"vta": "pynq", "dnnvm": "zu2", "nvdla": "nv_small", "c": None,
                  "sunway": "sw26010"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="digits CNN: quantise, compile for a simulated accelerator, report accuracy",
        description="Compile the shipped digits CNN for a simulated accelerator (vta by "
                    "default, or dnnvm), run its held-out set on the simulator and compare "
                    "int8 with float accuracy.")
    p.add_argument("--target", default="vta", metavar="|".join(DEFAULT_PRESET),
                   help="the target (default: vta); or several comma-separated, e.g. "
                        "vta,dnnvm: each node on the first that accepts it, the cpu last "
                        "(docs/partitioning.md)")
    p.add_argument("--pin", action="append", default=[], metavar="PATTERN=DEVICE",
                   help="with several targets: run the nodes PATTERN matches on DEVICE")
    p.add_argument("--placement", default="first", choices=("first", "cheapest"),
                   help="with several targets: the first that accepts a node, or the cheapest "
                        "by the cycle models")
    p.add_argument("--config", default=None, metavar="PRESET",
                   help="the target's preset (vta: pynq, ultra96, 1x32, 1x64, 2x16; dnnvm: "
                        "zu2, zu9, test) or a .json/.toml target config file (default: pynq / "
                        "zu2)")
    p.add_argument("--batch", type=int, default=40, metavar="N",
                   help="images per simulator run (default 40)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="use only the first N held-out images")
    from .report_cmd import add_report_options
    add_report_options(p, flag=False)
    p.set_defaults(func=run_demo)


def _target_spec(target: str, config: str | None) -> str:
    """The compile's target spec: `target` at `config` (or its default preset); several
    comma-separated targets each at their default preset."""
    names = [t.strip() for t in target.split(",")]
    unknown = [t for t in names if t not in DEFAULT_PRESET]
    if unknown:
        raise InputError(f"--target {target!r}: {', '.join(unknown)} is not one of "
                         f"{', '.join(DEFAULT_PRESET)}")
    if len(names) > 1:
        if config:
            raise InputError(f"--config {config!r} with several targets: the demo runs each "
                             f"at its default preset")
        return ",".join(_target_spec(t, None) for t in names)
    config = config or DEFAULT_PRESET[target]
    if config is None:
        return target
    return config if config.endswith((".json", ".toml")) else f"{target}:{config}"


def _same(out: np.ndarray, ref: np.ndarray, target) -> bool:  # a Target or a Module
    """Bit for bit on an integer target; within its check_rtol on a float one."""
    if target.bit_exact:
        return np.array_equal(out, ref)
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    return np.allclose(out, ref, rtol=target.check_rtol, atol=target.check_rtol * scale)


def run_demo(args: argparse.Namespace) -> int:
    from ..compiler import compile
    from ..data import DIGITS_INPUT, DIGITS_OUTPUT, digits_calibration, digits_test, load_digits_model
    from ..targets.cpu.reference import run_graph

    from .report_cmd import check_report_paths, emit_report
    if args.batch < 1:
        raise InputError(f"--batch must be >= 1, got {args.batch}")
    check_report_paths(args)
    x, y = digits_test()
    if args.limit is not None:
        if args.limit < 1:
            raise InputError(f"--limit must be >= 1, got {args.limit}")
        x, y = x[:args.limit], y[:args.limit]
    batch = min(args.batch, len(x))
    graph = load_digits_model(batch)

    t0 = time.perf_counter()
    from .compile_cmd import parse_pins
    module = compile(graph, _target_spec(args.target, args.config),
                     calibration=digits_calibration(), pins=parse_pins(args.pin),
                     placement=args.placement)
    several = len(module.targets) > 1
    t_compile = time.perf_counter() - t0
    target = module.target
    kind = getattr(target.config, "target_name", target.description)
    on = module.report.target if several else f"{target.spec} ({kind})"
    print(f"digits CNN ({len(x)} held-out 8x8 images) on {on}, compiled in "
          f"{t_compile:.2f} s")
    print()
    print(module.report.table())
    print()

    float_pred, int8_pred = [], []
    exact = 0
    counters: dict[str, int] = {}
    t_sim = 0.0
    for start in range(0, len(x), batch):
        chunk = x[start:start + batch]
        n = len(chunk)
        if n < batch:   # the compiled shapes are fixed: pad the last batch, drop its extras
            chunk = np.concatenate([chunk, np.zeros((batch - n,) + chunk.shape[1:], chunk.dtype)])
        feed = {DIGITS_INPUT: chunk}
        float_pred.append(np.argmax(run_graph(graph, feed)[DIGITS_OUTPUT][:n], axis=1))
        t0 = time.perf_counter()
        sim = module.run(feed)[DIGITS_OUTPUT]
        t_sim += time.perf_counter() - t0
        for prof in module.profile:
            for k, v in prof.counters.items():
                k = f"{prof.target}.{k}" if several else k   # each device its own counters
                counters[k] = counters.get(k, 0) + v
            if several:
                k = "bytes between devices"
                counters[k] = counters.get(k, 0) + prof.bytes_between
        ref = run_graph(module.graph, feed)[DIGITS_OUTPUT]
        exact += n if _same(sim, ref, module) else 0
        int8_pred.append(np.argmax(sim[:n], axis=1))
    # Where the time goes, per layer, by the cycle model (no data needed); the file options
    # (--csv/--json/--roofline/--trace) write the full report.
    if any(k.report_table() for k in module.kernels.values()):
        emit_report(module, args)              # a target that reports itself (sunway)
    elif module.bit_exact and not several:   # one clock: the cycle model's summary
        print(emit_report(module, args, print_table=False).short_summary())
    module.close()
    print()

    acc_float = 100.0 * float(np.mean(np.concatenate(float_pred) == y))
    acc_int8 = 100.0 * float(np.mean(np.concatenate(int8_pred) == y))
    print("device counters (all runs):")
    for k in sorted(counters):
        print(f"  {k:<22} {counters[k]}")
    print(f"  {'host seconds':<22} {t_sim:.2f}")
    print()
    print(f"top-1 float (reference)      {acc_float:6.2f} %")
    number = "int8" if target.number_format is not None else "float"
    device = " simulator" if module.bit_exact else ""     # the float targets run natively
    label = f"top-1 {number} ({'VTA' if args.target == 'vta' else args.target}{device})"
    print(f"{label:<28} {acc_int8:6.2f} %   (difference "
          f"{acc_float - acc_int8:+.2f} points, tolerance {ACCURACY_TOLERANCE})")
    print(f"bit-exact vs the integer reference: {exact}/{len(x)} images" if module.bit_exact
          else f"within rtol {module.check_rtol:g} of the reference: {exact}/{len(x)} images")
    ok_acc = acc_float - acc_int8 <= ACCURACY_TOLERANCE
    ok_exact = exact == len(x)
    print("demo: OK" if ok_acc and ok_exact else
          "demo: FAILED (" + ", ".join(w for w, bad in (("accuracy", not ok_acc),
                                                        ("bit-exactness", not ok_exact)) if bad) + ")")
    return 0 if ok_acc and ok_exact else 1
