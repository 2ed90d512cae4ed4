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
`--deploy` (vta) compiles with a C host instead, writes and builds the standalone program
(`retarget deploy`, `make`; docs/deploy.md), runs the held-out set through the binary and
prints its accuracy and whether its outputs equal `retarget run`'s.
Exit status 1 when any check fails.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from ..compiler import compile
from ..deploy import DEPLOYED_TARGETS, build_program, deploy, deployable, run_program
from ..data import DIGITS_INPUT, DIGITS_OUTPUT, digits_calibration, digits_test, load_digits_model
from ..errors import InputError
from ..ops.reference import run_graph
from ..runtime.check import outputs_match
from ..targets.base import Target
from ..targets.registry import target_class, target_names
from .compile_options import parse_pins
from .report_options import add_report_options, check_report_paths, emit_report


ACCURACY_TOLERANCE = 1.0   # percentage points int8 may lose against float


DEFAULT_TARGET = "vta"


def _demo_targets() -> dict[str, type[Target]]:
    """The registered targets the demo offers (Target.in_demo), the default first. Asked when
    the demo runs, not when the parser is built: the registry loads every backend."""
    found = {n: c for n in target_names() if (c := target_class(n)).in_demo}
    return dict(sorted(found.items(), key=lambda item: item[0] != DEFAULT_TARGET))


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="digits CNN: quantise, compile for a simulated accelerator, report accuracy",
        description="Compile the shipped digits CNN for a simulated accelerator (vta by "
                    "default, or dnnvm), run its held-out set on the simulator and compare "
                    "int8 with float accuracy.")
    p.add_argument("--target", default=DEFAULT_TARGET, metavar="TARGET",
                   help=f"the target (default: {DEFAULT_TARGET}; a name the demo does not "
                        "offer gets the list of those it does); or several comma-separated, e.g. "
                        "vta,dnnvm: each node on the first that accepts it, the cpu last "
                        "(docs/partitioning.md)")
    p.add_argument("--pin", action="append", default=[], metavar="PATTERN=DEVICE",
                   help="with several targets: run the nodes PATTERN matches on DEVICE")
    p.add_argument("--placement", default="first", choices=("first", "cheapest"),
                   help="with several targets: the first that accepts a node, or the cheapest "
                        "by the cycle models")
    p.add_argument("--config", default=None, metavar="PRESET",
                   help="the target's preset (`retarget targets` lists them) or a "
                        ".json/.toml target config file (default: the preset the target names "
                        "for the demo, e.g. vta's pynq)")
    p.add_argument("--batch", type=int, default=40, metavar="N",
                   help="images per simulator run (default 40)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="use only the first N held-out images")
    p.add_argument("--deploy", action="store_true",
                   help=f"{', '.join(DEPLOYED_TARGETS)}: compile with a C host, build the standalone program (retarget "
                        "deploy, make), run the held-out set through it and check its outputs "
                        "equal retarget run's")
    add_report_options(p, flag=False)
    p.set_defaults(func=run_demo)


def _target_spec(target: str, config: str | None) -> str:
    """The compile's target spec: `target` at `config` (or its default preset); several
    comma-separated targets each at their default preset."""
    names = [t.strip() for t in target.split(",")]
    offered = _demo_targets()
    unknown = [t for t in names if t not in offered]
    if unknown:
        raise InputError(f"--target {target!r}: {', '.join(unknown)} is not one of "
                         f"{', '.join(offered)}")
    if len(names) > 1:
        if config:
            raise InputError(f"--config {config!r} with several targets: the demo runs each "
                             f"at its default preset")
        return ",".join(_target_spec(t, None) for t in names)
    config = config or offered[target].demo_preset
    if config is None:
        return target
    return config if config.endswith((".json", ".toml")) else f"{target}:{config}"


def run_demo(args: argparse.Namespace) -> int:

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
    if args.deploy and not deployable(args.target):
        raise InputError(f"--deploy builds a program for {', '.join(DEPLOYED_TARGETS)}; "
                         f"target {args.target!r} is not deployed yet")

    t0 = time.perf_counter()
    module = compile(graph, _target_spec(args.target, args.config),
                     calibration=digits_calibration(), pins=parse_pins(args.pin),
                     placement=args.placement, host="c:serial" if args.deploy else None)
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

    float_pred, int8_pred, outputs = [], [], []
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
        exact += n if outputs_match(module, sim, ref) else 0
        int8_pred.append(np.argmax(sim[:n], axis=1))
        outputs.append((chunk, n, sim))
    # Where the time goes, per layer, by the cycle model (no data needed); the file options
    # (--csv/--json/--roofline/--trace) write the full report.
    if any(k.report_table() for k in module.kernels.values()):
        emit_report(module, args)              # a target that reports itself (sunway)
    elif module.bit_exact and not several:   # one clock: the cycle model's summary
        print(emit_report(module, args, print_table=False).short_summary())
    deployed_ok = _run_deployed(module, outputs, y) if args.deploy else True
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
    label = f"top-1 {number} ({args.target}{device})"
    print(f"{label:<28} {acc_int8:6.2f} %   (difference "
          f"{acc_float - acc_int8:+.2f} points, tolerance {ACCURACY_TOLERANCE})")
    print(f"bit-exact vs the integer reference: {exact}/{len(x)} images" if module.bit_exact
          else f"within rtol {module.check_rtol:g} of the reference: {exact}/{len(x)} images")
    ok_acc = acc_float - acc_int8 <= ACCURACY_TOLERANCE
    ok_exact = exact == len(x)
    failed = [w for w, bad in (("accuracy", not ok_acc), ("bit-exactness", not ok_exact),
                               ("the deployed program", not deployed_ok)) if bad]
    print("demo: OK" if not failed else f"demo: FAILED ({', '.join(failed)})")
    return 0 if not failed else 1


def _run_deployed(module, runs: list, labels: np.ndarray) -> bool:
    """`retarget deploy` of the module into a temporary directory, `make`, then every batch
    of `runs` ((input, images used, retarget run's output)) through the program; prints its
    accuracy and whether its outputs equal retarget run's."""
    with tempfile.TemporaryDirectory(prefix="retarget-demo-deploy-") as tmp:
        t0 = time.perf_counter()
        program = build_program(deploy(module, Path(tmp) / "digits"))
        t_build = time.perf_counter() - t0
        same, preds, t_run = 0, [], 0.0
        for chunk, n, want in runs:
            t0 = time.perf_counter()
            (got,), _ = run_program(program, [chunk], 1)
            t_run += time.perf_counter() - t0
            same += n if got.dtype == want.dtype and np.array_equal(got, want) else 0
            preds.append(np.argmax(got[:n], axis=1))
    acc = 100.0 * float(np.mean(np.concatenate(preds) == labels))
    print()
    print(f"standalone program (retarget deploy + make, built in {t_build:.1f} s; "
          f"{len(runs)} runs of the binary in {t_run:.2f} s, no Python inside):")
    print(f"  top-1 int8 (deployed program)  {acc:6.2f} %")
    print(f"  outputs equal retarget run's: {same}/{len(labels)} images")
    return same == len(labels)
