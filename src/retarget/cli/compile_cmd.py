"""`retarget compile MODEL --target T [-o DIR]`: partition and lower a model, print where every
node runs, and write the Module artifact.

Also home of `run_compiled(args)`, the compiled-run path behind
`retarget run DIR|MODEL --target T [--check] [--report ...]` (wired into run_cmd.py), and of the shared
`--plugin` option that loads a target defined outside retarget (a Python file the user names,
e.g. examples/toy_accelerator.py; artifacts themselves never contain code).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import InputError, TargetError
from ..targets.registry import load_plugin
from .arrays import load_array_file


def add_target_options(p: argparse.ArgumentParser, *, target_required: bool) -> None:
    """--target, --config KEY=VALUE, --plugin FILE: shared by compile and the compiled run."""
    p.add_argument("--target", "-t", required=target_required, default=None,
                   help="target name, name:preset, or a .toml/.json config file "
                        "(see `retarget targets`); several devices comma-separated, "
                        "e.g. vta,dnnvm (each node on the first that accepts it, cpu last)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="override a target config field (repeatable)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                   help="Python file defining and registering a target (repeatable)")


def add_verify_option(p: argparse.ArgumentParser) -> None:
    """--no-verify: load a module artifact without comparing its files' SHA-256 sums."""
    p.add_argument("--no-verify", action="store_true",
                   help="load a compiled module without checking its files' SHA-256 sums "
                        "(sizes, file kinds and structure are still checked)")


def add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cpu-node", action="append", default=[], metavar="NAME",
                   help="force node(s) onto the CPU; glob patterns allowed (repeatable)")
    p.add_argument("--pin", action="append", default=[], metavar="PATTERN=DEVICE",
                   help="run the nodes PATTERN (a name or glob) matches on DEVICE (cpu or one "
                        "of the --target devices), as tf.device does; refused with the reason "
                        "if DEVICE cannot run one of them (repeatable)")
    p.add_argument("--placement", default="first", choices=("first", "cheapest"),
                   help="with several devices: the first that accepts a node (default), or "
                        "the one whose cost model prices it lowest")
    p.add_argument("--min-region-macs", type=int, default=None, metavar="N",
                   help="offload only regions of at least N MACs (default: the target's rule)")
    p.add_argument("--calibration", default=None, metavar="FILE.npz",
                   help="calibration inputs for targets that quantise (vta, dnnvm): arrays by input "
                        "name, batches along axis 0 (default: random data, with a warning)")
    p.add_argument("--host", default=None, metavar="reference|c[:PRESET]",
                   help="what runs the CPU regions: the NumPy reference (default) or generated "
                        "C (c, c:portable, ...; docs/deploy.md)")
    p.add_argument("--fusion", default=None, choices=("none", "greedy", "optimized"),
                   help="group layers into units lowered as one (docs/fusion.md); default: "
                        "optimized for targets that declare fusion templates (dnnvm), else none")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compile", help="partition and compile a model for a target",
        description="Partition MODEL between the target and the CPU, lower the offloaded "
                    "regions, print the placement report and write the module artifact.")
    p.add_argument("model", help="ONNX or TFLite (.tflite) model file")
    add_target_options(p, target_required=True)
    add_compile_options(p)
    p.add_argument("-o", "--output", default=None, metavar="DIR",
                   help="write the compiled module to DIR (a directory of JSON + .npz)")
    p.add_argument("--export-regions", default=None, metavar="FILE.json",
                   help="also export the offloaded regions as JSON for an outside compiler")
    from .report_cmd import add_report_options
    add_report_options(p, flag=True)
    p.set_defaults(func=run_compile)


def load_plugins(paths: list[str]) -> None:
    for path in paths:
        load_plugin(path)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TargetError(f"--config {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def compile_from_args(args: argparse.Namespace):
    from ..compiler import compile
    load_plugins(args.plugin)
    model = args.model
    if getattr(args, "input_shape", None):   # bind shapes before compiling, as `run` does
        from .inspect_cmd import load_model
        model = load_model(args.model, args.input_shape)
    return compile(model, args.target or "cpu", cpu_nodes=args.cpu_node,
                   min_region_macs=args.min_region_macs, config=parse_overrides(args.config),
                   calibration=read_calibration(getattr(args, "calibration", None)),
                   fusion=getattr(args, "fusion", None), pins=parse_pins(getattr(args, "pin", [])),
                   placement=getattr(args, "placement", "first"), host=getattr(args, "host", None))


def parse_pins(items: list[str]) -> dict[str, str]:
    """--pin PATTERN=DEVICE items as compile()'s pins (the last '=' splits, so a pattern may
    hold one)."""
    out = {}
    for item in items:
        pattern, sep, device = item.rpartition("=")
        if not sep or not pattern or not device.strip():
            raise TargetError(f"--pin {item!r}: expected PATTERN=DEVICE, e.g. '/layer1*=dnnvm'")
        out[pattern.strip()] = device.strip()
    return out


def read_calibration(path: str | None):
    """--calibration FILE.npz -> a dict input name -> array (split into batches by the
    quantiser), or None. A single unnamed array (.npy) is passed as it is."""
    if path is None:
        return None
    data = load_array_file(path, f"--calibration {path}")
    if isinstance(data, np.ndarray):
        return data
    arrays = data
    if not arrays:
        raise InputError(f"--calibration {path}: holds no arrays")
    return _split_batches(arrays)


def _split_batches(arrays: dict):
    # One array per input, each a stack of samples: the quantiser takes a bare array for a
    # single-input graph; for several inputs, keep the dict (one batch).
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    return arrays


def run_compile(args: argparse.Namespace) -> int:
    from .report_cmd import check_report_paths
    check_report_paths(args)
    module = compile_from_args(args)
    print(module.report.table())
    for name, kernel in module.kernels.items():
        line = nonfatal(args, f"the summary of region {name}", kernel.summary)
        if line:
            print(line)
    nonfatal(args, "the comparison with the quantised model",
             lambda: _print_prequantized_error(args.model, module))
    nonfatal(args, "the comparison with the TFLite interpreter",
             lambda: _print_tflite_deviation(args, module))
    if args.output:
        module.save(args.output)
        print(f"wrote {args.output}")
    if args.export_regions:
        module.export_regions(args.export_regions)
        print(f"wrote {args.export_regions}")
    return report_after(module, args)


def report_after(module, args: argparse.Namespace) -> int:
    """The report options' output for a module compiled (or run) here: 0, or 1 when a report
    that was asked for failed (its one-line warning printed; the module is unaffected)."""
    from .report_cmd import emit_report, wants_report
    if not wants_report(args):
        return 0
    print()
    done = nonfatal(args, "the report", lambda: emit_report(
        module, args, print_table=bool(getattr(args, "report", False))) or True)
    return 0 if done else 1


def nonfatal(args: argparse.Namespace, what: str, report: Callable[[], Any]) -> Any:
    """Run `report`, which describes a module that is already compiled (a summary line, a
    cycle-model report): whatever goes wrong in it is a one-line warning, never the end of a
    compile whose artifact is fine. Returns its result, or None when it failed (--debug:
    the traceback instead)."""
    try:
        return report()
    except Exception as e:   # noqa: BLE001 -- a report's bug must not lose the artifact
        if getattr(args, "debug", False):
            raise
        first = (str(e).splitlines() or [""])[0]
        print(f"warning: {what} failed ({type(e).__name__}: {first}); the compiled module "
              f"is unaffected", file=sys.stderr)
        return None


def _print_prequantized_error(model_path: str, module) -> None:
    """For an already-quantised (QDQ) ONNX file compiled into a multiplier + shift target,
    how far the integer graph (which the target reproduces exactly) is from onnxruntime's run
    of the same file, on seeded random inputs: the conversion is not exact (docs/quantization.md)."""
    fmt = module.target.number_format
    if fmt is None or fmt.scales != "multiplier" or not str(model_path).endswith(".onnx"):
        return
    from ..frontend.onnx import read_onnx
    from ..frontend.onnx_quantized import QDQ_OPS, format_qdq_error, qdq_error
    from .run_cmd import complete_inputs
    model = read_onnx(model_path)
    if not any(n.op_type in QDQ_OPS for n in model.graph.node):
        return
    inputs = [complete_inputs(module.graph, {}, random=True, seed=s) for s in range(4)]
    print(format_qdq_error(qdq_error(model, module.graph, inputs)) +
          "\n  (4 seeded random inputs; the compiled module equals the integer graph exactly)")


def _print_tflite_deviation(args: argparse.Namespace, module) -> None:
    """For a TFLite int8 model compiled into another number format: per output, how far the
    module's integer result is from the model's own arithmetic (report/deviation.py), on the
    calibration inputs or, without them, 8 seeded inputs uniform over the int8 range."""
    from ..frontend.tflite import io_quantization, is_tflite_path, load_tflite, model_samples
    fmt = module.target.number_format
    if not is_tflite_path(args.model) or fmt is None or fmt.name == "int8-tflite":
        return
    from ..report.deviation import format_deviation, tflite_deviation
    calibration = read_calibration(getattr(args, "calibration", None))
    ref = load_tflite(args.model)
    inputs = model_samples(ref, calibration, io_quantization(args.model))
    where = (f"{len(inputs)} calibration inputs" if calibration is not None
             else f"{len(inputs)} seeded inputs uniform over the int8 range")
    print(format_deviation(tflite_deviation(module, args.model, inputs, ref),
                           module.target.name, where) +
          "\n  (the compiled module itself equals retarget's integer reference of "
          f"{fmt.name} exactly: `retarget run DIR --check`)")


# ---- the compiled run --------------------------------------------------------------------------
def _check_per_layer(module, inputs, dump: str | None) -> int:
    """`--per-layer`: every hardware layer against the integer reference (1: one differs)."""
    from ..runtime.per_layer import check_layers, format_checks, save_checks
    if not module.bit_exact:
        raise InputError(f"--per-layer compares layers bit for bit; target "
                         f"{module.target.name!r} is not bit-exact")
    try:
        checks = check_layers(module, inputs)
    except NotImplementedError as e:
        raise TargetError(f"--per-layer: {e}") from None
    print(format_checks(checks))
    if dump:
        save_checks(checks, dump)
        print(f"wrote {dump}")
    return 0 if all(c.ok for c in checks) else 1


def load_artifact(path: Path, args: argparse.Namespace):
    """The module artifact at `path`: `--config` sets the target's host fields (compiler,
    flags, build directory, device memory), which an artifact never does; what loading
    ignored from the artifact is printed as notes on stderr."""
    import sys

    from ..runtime.module import Module
    module = Module.load(path, verify=not getattr(args, "no_verify", False),
                         config=parse_overrides(getattr(args, "config", None) or []))
    for note in module.notes:
        print(f"retarget: note: {note}", file=sys.stderr)
    return module


def run_compiled(args: argparse.Namespace) -> int:
    """Run a module artifact directory (args.model is a DIR) or compile MODEL for args.target
    and run it. Prints the outputs' summary (and the profile); with args.check, compares with
    the CPU reference and returns 1 when they differ."""
    from ..runtime.executor import format_profile
    from ..runtime.module import Module
    from ..targets.cpu.reference import run_graph
    from .report_cmd import check_report_paths
    from .run_cmd import complete_inputs, read_input_files

    check_report_paths(args)
    if getattr(args, "per_layer", False) and not args.check:
        raise InputError("--per-layer is part of --check: give both")
    if getattr(args, "dump_layers", None) and not getattr(args, "per_layer", False):
        raise InputError("--dump-layers saves what --per-layer computes: give --check "
                         "--per-layer too")
    path = Path(args.model)
    if path.is_dir():
        load_plugins(getattr(args, "plugin", []))
        if args.target:
            raise TargetError(f"{path} is a compiled module (for its own target); "
                              f"--target applies to model files only")
        if getattr(args, "input_shape", None):
            raise InputError(f"--input-shape: {path} is a compiled module, whose input shapes "
                             f"were fixed when it was compiled; recompile the model to change them")
        if getattr(args, "host", None):
            raise InputError(f"--host: {path} is a compiled module, whose CPU regions were "
                             f"placed when it was compiled; recompile the model to change that")
        if getattr(args, "pin", None) or getattr(args, "placement", "first") != "first":
            raise InputError(f"--pin/--placement: {path} is a compiled module, whose nodes were "
                             f"placed when it was compiled; recompile the model to change that")
        if getattr(args, "fusion", None):
            raise InputError(f"--fusion: {path} is a compiled module, whose layers were grouped "
                             f"when it was compiled; recompile the model to change that")
        module = load_artifact(path, args)
    else:
        module = compile_from_args(args)
    # Inputs as `run MODEL` reads them; those not given are seeded random data (a compiled
    # module is usually run to check it, for which any input will do).
    given = read_input_files(args.input, [v.name for v in module.graph.inputs])
    inputs = complete_inputs(module.graph, given, random=True, seed=args.seed)
    outputs = module.run(inputs)
    for name, a in outputs.items():
        print(f"{name}: {a.dtype}{list(a.shape)} mean={float(np.mean(a)):.6g} "
              f"min={float(np.min(a)) if a.size else 0:.6g} max={float(np.max(a)) if a.size else 0:.6g}")
    if getattr(args, "output", None):
        from .run_cmd import save_outputs
        save_outputs(outputs, args.output)
        print(f"wrote {args.output}")
    if getattr(args, "profile", False):
        print(format_profile(module.profile))
    # the cycle model's figures, beside this run's measured host times
    status = report_after(module, args)
    if args.check:
        # The reference runs the module's own graph: for a quantising target (vta) that is the
        # integer graph, which the accelerator must reproduce bit for bit.
        exact, rtol = module.bit_exact, module.check_rtol
        ref = run_graph(module.graph, inputs)
        for name, a in outputs.items():
            r = ref[name]
            if exact:
                same = a.shape == r.shape and a.dtype == r.dtype and np.array_equal(a, r)
            else:
                scale = max(1.0, float(np.max(np.abs(r)))) if r.size else 1.0
                same = a.shape == r.shape and np.allclose(a, r, rtol=rtol, atol=rtol * scale)
            diff = float(np.max(np.abs(a.astype(np.float64) - r))) if a.shape == r.shape and a.size else 0.0
            verdict = ("bit-exact vs the integer reference" if exact else
                       f"ok within rtol {rtol:g}") if same else "MISMATCH"
            print(f"check {name}: {verdict} (max abs diff {diff:.3g})")
            status |= 0 if same else 1
        if getattr(args, "per_layer", False):
            status |= _check_per_layer(module, inputs, getattr(args, "dump_layers", None))
    module.close()
    return status
