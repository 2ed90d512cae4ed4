"""The report options (`--report`, `--csv`, `--json`, `--roofline`, `--trace`) that `compile`,
`run`, `demo` and `report` share, and writing the report they ask for."""
from __future__ import annotations

import argparse
import sys
import importlib.util
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError, TargetError
from ..report.module import module_report


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


def check_report_paths(args: argparse.Namespace) -> None:
    """For run/compile: validate the report file options before the work starts."""
    if wants_report(args):
        _check_paths(args)


def report_after(module, args: argparse.Namespace) -> int:
    """The report options' output for a module compiled (or run) here: 0, or 1 when a report
    that was asked for failed (its one-line warning printed; the module is unaffected)."""
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
