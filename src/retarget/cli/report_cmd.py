"""`retarget report DIR|MODEL [--target T] [--csv F] [--json F] [--roofline F.svg|.png]
[--trace F.json]`: where the time goes in a compiled module, from the cycle model.

Timing only: the cycle model reads no data, so a module directory is reported without inputs
and without running the behavioural simulator. A model file is compiled first (--target vta).
The same report options are added to `retarget run` and `retarget compile` (add_report_options,
emit_report), where `--report` prints the table and the file options write their files.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError, TargetError
from .compile_options import (add_compile_options, add_target_options, add_verify_option,
                              compile_from_args, load_artifact, load_plugins)
from .report_options import _check_paths, add_report_options, emit_report


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="where the time goes: per-layer cycle-model report of a compiled module",
        description="Time every VTA region of a compiled module (a directory written by "
                    "`retarget compile -o`, or a model compiled here with --target) with the "
                    "cycle model and print, per layer, MACs, cycles, GOPS at the config's "
                    "clock, compute utilisation, DRAM bytes per buffer, arithmetic intensity "
                    "and the roofline bound; per region and for the whole network, cycles, "
                    "time and frames per second. Needs no inputs (no data is simulated).")
    p.add_argument("model", help="compiled module directory, or an ONNX model with --target")
    add_target_options(p, target_required=False)
    add_compile_options(p)
    add_verify_option(p)
    add_report_options(p, flag=False)
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    _check_paths(args)
    path = Path(args.model)
    if path.is_dir():
        load_plugins(args.plugin)
        if args.target:
            raise TargetError(f"{path} is a compiled module (for its own target); "
                              f"--target applies to model files only")
        module = load_artifact(path, args)
    else:
        if not args.target:
            raise InputError(f"{path} is a model file: give --target (e.g. --target vta) to "
                             f"compile it, or a compiled module directory")
        module = compile_from_args(args)
    emit_report(module, args)
    return 0


