"""`retarget report DIR|MODEL [--target T] [--csv F] [--json F] [--roofline F.svg|.png]
[--trace F.json]`: where the time goes in a compiled module, from the cycle model.

Timing only: the cycle model reads no data, so a module directory is reported without inputs
and without running the behavioural simulator. A model file is compiled first (--target vta).
The same report options are added to `retarget run` and `retarget compile` (add_report_options,
emit_report), where `--report` prints the table and the file options write their files.
"""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from ..errors import InputError, TargetError

FILE_OPTIONS = ("csv", "json", "roofline", "trace")


def add_report_options(p: argparse.ArgumentParser, *, flag: bool) -> None:
    """--csv/--json/--roofline/--trace (and, with `flag`, --report to print the table)."""
    g = p.add_argument_group("where the time goes (cycle model; vta regions)")
    if flag:
        g.add_argument("--report", action="store_true",
                       help="print the per-layer cycle-model report (cycles, GOPS, "
                            "utilisation, bytes, roofline) and the per-region summary")
    g.add_argument("--csv", default=None, metavar="FILE.csv",
                   help="write the report as CSV (one line per layer, region and the network)")
    g.add_argument("--json", default=None, metavar="FILE.json", help="write the report as JSON")
    g.add_argument("--roofline", default=None, metavar="FILE.svg|FILE.png",
                   help="plot each layer on the roofline (.svg needs nothing; .png matplotlib)")
    g.add_argument("--trace", default=None, metavar="FILE.json",
                   help="write a Chrome/Perfetto trace of the load/compute/store modules, "
                        "layer by layer (open in ui.perfetto.dev)")


def wants_report(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "report", False)) or any(getattr(args, k, None)
                                                       for k in FILE_OPTIONS)


def _check_paths(args: argparse.Namespace) -> None:
    """Bad file names fail before any compiling or simulating is done."""
    roof = getattr(args, "roofline", None)
    if roof and not roof.endswith((".svg", ".png")):
        raise InputError(f"--roofline {roof}: the file name must end in .svg or .png")
    if roof and roof.endswith(".png") and importlib.util.find_spec("matplotlib") is None:
        raise InputError(f"--roofline {roof}: a PNG needs matplotlib (pip install "
                         f"'retarget[plot]'); an .svg needs nothing")
    for opt in FILE_OPTIONS:
        path = getattr(args, opt, None)
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"--{opt} {path}: directory {Path(path).parent} does not exist")


def emit_report(module, args: argparse.Namespace, *, print_table: bool = True,
                profile=None) -> object:
    """Build the module's report; print it (print_table) and write the files args ask for.
    Returns the ModuleReport."""
    from ..report.module import module_report
    tables = [k.report_table() for k in module.kernels.values() if k.report_table()]
    if tables:   # targets whose kernels report themselves (sunway's cost model)
        asked = [f"--{o}" for o in ("csv", "json", "roofline", "trace") if getattr(args, o, None)]
        if asked:
            raise TargetError(f"{', '.join(asked)}: target {module.target.name!r} has no "
                              f"instruction-level cycle model; its report is the table only")
        if print_table:
            print("\n\n".join(tables))
        return None
    rep = module_report(module, profile)
    if print_table:
        print(rep.table())
    for opt, write in (("csv", rep.write_csv), ("json", rep.write_json),
                       ("roofline", rep.write_roofline), ("trace", rep.write_trace)):
        path = getattr(args, opt, None)
        if path:
            write(path)
            print(f"wrote {path}")
    return rep


def register(subparsers) -> None:
    from .compile_cmd import add_compile_options, add_target_options, add_verify_option
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
    from .compile_cmd import compile_from_args, load_artifact, load_plugins
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


def check_report_paths(args: argparse.Namespace) -> None:
    """For run/compile: validate the report file options before the work starts."""
    if wants_report(args):
        _check_paths(args)
