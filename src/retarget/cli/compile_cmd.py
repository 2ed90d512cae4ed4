"""`retarget compile MODEL --target T [-o DIR]`: partition and lower a model, print where every
node runs, and write the Module artifact.

The options it shares with `run --target` and `report` (including `--plugin`, which loads a
target defined outside retarget: a Python file the user names, e.g. examples/toy_accelerator.py;
artifacts themselves never contain code) are in compile_options.py.
"""
from __future__ import annotations

import argparse

from ..compiler import SEEDED_CALIBRATION, qdq_unfit_reason
from ..frontend.onnx import load_onnx, read_onnx
from ..frontend.onnx_quantized import QDQ_OPS, format_qdq_error, qdq_error
from ..frontend.tflite import io_quantization, is_tflite_path, load_tflite, model_samples
from ..passes.calibrate import random_samples, sample_batches
from ..report.deviation import format_deviation, qdq_deviation, tflite_deviation
from ..runtime.check import random_inputs
from .compile_options import (add_compile_options, add_target_options, compile_from_args,
                              read_calibration)
from .report_options import add_report_options, check_report_paths, nonfatal, report_after


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
    add_report_options(p, flag=True)
    p.set_defaults(func=run_compile)


def run_compile(args: argparse.Namespace) -> int:
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
    nonfatal(args, "the comparison with onnxruntime",
             lambda: _print_qdq_deviation(args, module))
    if args.output:
        module.save(args.output)
        print(f"wrote {args.output}")
    if args.export_regions:
        module.export_regions(args.export_regions)
        print(f"wrote {args.export_regions}")
    return report_after(module, args)


def _print_prequantized_error(model_path: str, module) -> None:
    """For an already-quantised (QDQ) ONNX file compiled into a multiplier + shift target,
    how far the integer graph (which the target reproduces exactly) is from onnxruntime's run
    of the same file, on seeded random inputs: the conversion is not exact (docs/quantization.md)."""
    fmt = module.target.number_format
    if fmt is None or fmt.scales != "multiplier" or not str(model_path).endswith(".onnx"):
        return
    model = read_onnx(model_path)
    if not any(n.op_type in QDQ_OPS for n in model.graph.node) or \
            qdq_unfit_reason(load_onnx(model_path), module.target) is not None:
        return       # not QDQ, or re-quantised from its float form: _print_qdq_deviation
    inputs = [random_inputs(module.graph, s) for s in range(4)]
    print(format_qdq_error(qdq_error(model, module.graph, inputs)) +
          "\n  (4 seeded random inputs; the compiled module equals the integer graph exactly)")


def _print_tflite_deviation(args: argparse.Namespace, module) -> None:
    """For a TFLite int8 model compiled into another number format: per output, how far the
    module's integer result is from the model's own arithmetic (report/deviation.py), on the
    calibration inputs or, without them, 8 seeded inputs uniform over the int8 range."""
    fmt = module.target.number_format
    if not is_tflite_path(args.model) or fmt is None or fmt.name == "int8-tflite":
        return
    calibration = read_calibration(getattr(args, "calibration", None))
    ref = load_tflite(args.model)
    inputs = model_samples(ref, calibration, io_quantization(args.model))
    where = (f"{len(inputs)} calibration inputs" if calibration is not None
             else f"{len(inputs)} seeded inputs uniform over the int8 range")
    print(format_deviation(tflite_deviation(module, args.model, inputs, ref),
                           module.target.name, where) +
          "\n  (the compiled module itself equals retarget's integer reference of "
          f"{fmt.name} exactly: `retarget run DIR --check`)")


def _print_qdq_deviation(args: argparse.Namespace, module) -> None:
    """For a QDQ model re-quantised into the target's format (compiler._load_onnx_model):
    per output, how far the module is from onnxruntime's run of the file, on the calibration
    inputs or, without them, the seeded inputs it was calibrated on."""
    if is_tflite_path(args.model) or not str(args.model).endswith(".onnx") or \
            module.target.number_format is None or not any(
                n.op_type in QDQ_OPS for n in read_onnx(args.model).graph.node):
        return
    graph = load_onnx(args.model)
    if qdq_unfit_reason(graph, module.target) is None:
        return
    calibration = read_calibration(getattr(args, "calibration", None))
    if calibration is not None:
        inputs, where = sample_batches(graph, calibration), "calibration inputs"
    else:
        inputs = random_samples(graph, SEEDED_CALIBRATION)
        where = "seeded standard-normal inputs (the calibration)"
    print(format_deviation(qdq_deviation(module, args.model, inputs), module.target.name,
                           f"{len(inputs)} {where}", runtime="qdq") +
          "\n  (the compiled module itself equals retarget's integer reference of "
          f"{module.target.number_format.name} exactly: `retarget run DIR --check`)")
