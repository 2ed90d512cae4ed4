"""`retarget run MODEL (--input x.npy | --input NAME=x.npy ... | --random [--seed N])
[--output y.npy|out.npz] [--check-ort]`: run a model on the reference executor and summarise
its outputs; `--check-ort` also runs it on onnxruntime and compares (frontend/ort_check.py).

With `--target T` (or a compiled module directory as MODEL) the model is compiled and run
through `run_compiled` below instead; there `--report`, `--csv F`, `--json F`,
`--roofline F.svg` and `--trace F.json` add the cycle model's report (cli/report_options.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ..errors import InputError, TargetError
from ..frontend.litert_check import litert_outputs
from ..frontend.onnx import read_onnx
from ..frontend.ort_check import DEFAULT_TOLERANCE, compare_with_onnxruntime, format_diffs
from ..frontend.tflite import is_tflite_path
from ..ir.graph import Graph
from ..ops.reference import run_graph
from ..runtime.check import check_outputs, random_inputs
from ..runtime.executor import format_profile
from ..runtime.per_layer import check_layers, format_checks, save_checks
from .arrays import load_array_file
from .compile_options import (add_compile_options, add_target_options, add_verify_option,
                              compile_from_args, load_artifact, load_plugins)
from .inspect_cmd import add_input_shape_option, load_model, model_input_names
from .report_options import add_report_options, check_report_paths, report_after, wants_report


TOP_K = 5


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="run a model on the reference executor (or compiled, with --target)",
        description="Run MODEL on the NumPy reference executor with inputs from .npy/.npz files "
                    "or seeded random data, print each output's shape and summary (top-5 "
                    "for a classifier's scores) and optionally save them.")
    p.add_argument("model", help="ONNX model file (or a compiled module directory with --target)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="[NAME=]FILE",
                   help="input array: FILE.npy for a one-input model, NAME=FILE.npy per input, "
                        "or FILE.npz holding arrays by input name (repeatable)")
    p.add_argument("--random", action="store_true",
                   help="fill the inputs not given by --input with seeded random data")
    p.add_argument("--seed", type=int, default=0, help="seed for --random (default 0)")
    p.add_argument("--output", "-o", default=None, metavar="FILE.npy|FILE.npz",
                   help="save the outputs: .npy for a one-output model, .npz by output name")
    add_input_shape_option(p)
    # The compiled path (run_compiled) reads these.
    add_target_options(p, target_required=False)
    add_compile_options(p)
    add_verify_option(p)
    p.add_argument("--check", action="store_true",
                   help="with --target: compare with the CPU reference executor")
    p.add_argument("--per-layer", action="store_true",
                   help="with --check: also run each offloaded region on the reference's "
                        "inputs, compare every hardware layer's output with the integer "
                        "reference and name the first that differs (bit-exact targets)")
    p.add_argument("--dump-layers", default=None, metavar="FILE.npz",
                   help="with --per-layer: save every hardware layer's output")
    p.add_argument("--profile", action="store_true", help="with --target: print the profile")
    p.add_argument("--check-litert", action="store_true",
                   help="without --target, for a .tflite model: also run it on LiteRT's "
                        "reference kernels and compare each output exactly (exit status 1 "
                        "when one differs)")
    p.add_argument("--check-ort", action="store_true",
                   help="without --target: also run the model on onnxruntime and compare each "
                        "output (exit status 1 beyond --ort-tolerance)")
    p.add_argument("--ort-tolerance", type=float, default=DEFAULT_TOLERANCE, metavar="REL",
                   help="largest |error| over largest |value| --check-ort accepts "
                        f"(default {DEFAULT_TOLERANCE:g})")
    add_report_options(p, flag=True)
    p.set_defaults(func=run_model)


def run_model(args: argparse.Namespace) -> int:
    if args.target or Path(args.model).is_dir():
        if args.check_ort:
            raise InputError("--check-ort compares the float reference executor with "
                             "onnxruntime; a compiled (quantised) model is checked with --check")
        return run_compiled(args)
    if wants_report(args):
        raise InputError("--report/--csv/--json/--roofline/--trace time a compiled module: "
                         "give --target vta (or a compiled module directory)")
    if is_tflite_path(args.model):
        if args.check_ort:
            raise InputError(f"--check-ort runs onnxruntime on an ONNX file; {args.model} is "
                             f"a TFLite model (--check-litert compares with LiteRT)")
        model = None
        graph = load_model(args.model, args.input_shape)
        given = read_input_files(args.input, [v.name for v in graph.inputs])
    else:
        model = read_onnx(args.model)
        given = read_input_files(args.input, model_input_names(model))
        graph = load_model(args.model, args.input_shape, _dynamic_bindings(model, given))
    inputs = complete_inputs(graph, given, args.random, args.seed)
    outputs = run_graph(graph, inputs)
    print(summarize_outputs(outputs))
    if args.output:
        save_outputs(outputs, args.output)
        print(f"wrote {args.output}")
    if getattr(args, "check_litert", False):
        return _check_litert(args.model, inputs, outputs)
    if args.check_ort:
        diffs = compare_with_onnxruntime(model, inputs, outputs, args.ort_tolerance)
        print(format_diffs(diffs))
        return 0 if all(d.ok for d in diffs) else 1
    return 0


def _check_litert(path: str, inputs: dict, outputs: dict) -> int:
    """--check-litert: the reference's outputs against LiteRT's reference kernels, exactly
    (retarget's int8-tflite arithmetic is theirs, docs/quantization.md)."""
    if not is_tflite_path(path):
        raise InputError(f"--check-litert runs LiteRT on a .tflite file; {path} is not one")
    theirs = litert_outputs(Path(path).read_bytes(), inputs)
    ok = True
    for name, ours in outputs.items():
        ref = theirs[name]
        same = ours.shape == ref.shape and bool(np.array_equal(ours, ref))
        diff = "" if same or ours.shape != ref.shape else \
            f" (max |diff| {np.abs(ours.astype(np.float64) - ref).max():g})"
        print(f"check-litert {name}: {'bit-exact with' if same else 'DIFFERS from'} LiteRT's "
              f"reference kernels{diff}")
        ok &= same
    return 0 if ok else 1


def _load_array_file(path: str, item: str):
    return load_array_file(path, f"--input {item}")


def read_input_files(items: list[str], input_names: list[str]) -> dict[str, np.ndarray]:
    """--input arguments -> {input name: array}."""
    arrays: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = "", item
        data = _load_array_file(path, item)
        if isinstance(data, dict):
            if name:  # NAME=file.npz: the file must hold that one array
                if name not in data:
                    raise InputError(f"--input {item!r}: {path} has no array {name!r} "
                                     f"(it has {sorted(data)})")
                arrays[name] = data[name]
            else:
                arrays.update(data)
            continue
        if not name:
            if len(input_names) != 1:
                raise InputError(f"--input {item!r}: the model has inputs {input_names}; give "
                                 f"each as NAME=FILE.npy")
            name = input_names[0]
        arrays[name] = data
    unknown = sorted(set(arrays) - set(input_names))
    if unknown:
        raise InputError(f"--input gives unknown input(s) {unknown}; the model's inputs are "
                         f"{input_names}")
    return arrays


def _dynamic_bindings(model, given: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Shapes for inputs the model leaves dynamic, taken from the arrays given for them.
    Static inputs are not bound, so an array of the wrong shape is reported as such."""
    bind = {}
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in given and any(not d.HasField("dim_value") for d in dims):
            bind[vi.name] = tuple(given[vi.name].shape)
    return bind


def complete_inputs(graph: Graph, given: dict[str, np.ndarray], random: bool,
                    seed: int) -> dict[str, np.ndarray]:
    """The given arrays plus, with `random`, seeded random data for the other inputs."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"--seed {seed!r}: expected a non-negative integer")
    missing = [v for v in graph.inputs if v.name not in given]
    if missing and not random:
        raise InputError(f"no data for input(s) {[f'{v.name}: {v.type}' for v in missing]}; "
                         f"give --input NAME=FILE.npy or --random")
    return random_inputs(graph, seed, given)


def is_classifier_output(a: np.ndarray) -> bool:
    """Scores of shape (batch, classes) with enough classes for a top-k to mean something."""
    return a.ndim == 2 and a.shape[1] >= TOP_K and a.dtype.kind == "f"


def summarize_outputs(outputs: dict[str, np.ndarray], max_rows: int = 4) -> str:
    lines = []
    for name, a in outputs.items():
        line = f"{name}: {a.dtype}[{','.join(map(str, a.shape))}]"
        if a.size and a.dtype.kind in "fiub":
            x = a.astype(np.float64)
            line += f"  min={x.min():.6g} mean={x.mean():.6g} max={x.max():.6g}"
        lines.append(line)
        if is_classifier_output(a):
            for row in range(min(a.shape[0], max_rows)):
                top = np.argsort(-a[row], kind="stable")[:TOP_K]
                items = ", ".join(f"{int(c)} ({float(a[row, c]):.4g})" for c in top)
                lines.append(f"  top-{TOP_K} [{row}]: {items}")
            if a.shape[0] > max_rows:
                lines.append(f"  ... {a.shape[0] - max_rows} more rows")
    return "\n".join(lines)


def save_outputs(outputs: dict[str, np.ndarray], path: str) -> None:
    suffix = Path(path).suffix.lower()
    if suffix == ".npy":
        if len(outputs) != 1:
            raise InputError(f"--output {path}: the model has {len(outputs)} outputs "
                             f"({list(outputs)}); save them to an .npz file")
        np.save(path, next(iter(outputs.values())))
    elif suffix == ".npz":
        np.savez(path, **outputs)
    else:
        raise InputError(f"--output {path}: expected a .npy or .npz file name")


# ---- the compiled run --------------------------------------------------------------------------
def _check_per_layer(module, inputs, dump: str | None) -> int:
    """`--per-layer`: every hardware layer against the integer reference (1: one differs)."""
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


def run_compiled(args: argparse.Namespace) -> int:
    """Run a module artifact directory (args.model is a DIR) or compile MODEL for args.target
    and run it. Prints the outputs' summary (and the profile); with args.check, compares with
    the CPU reference and returns 1 when they differ."""

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
        save_outputs(outputs, args.output)
        print(f"wrote {args.output}")
    if getattr(args, "profile", False):
        print(format_profile(module.profile))
    # the cycle model's figures, beside this run's measured host times
    status = report_after(module, args)
    if args.check:
        # The reference runs the module's own graph: for a quantising target (vta) that is the
        # integer graph, which the accelerator must reproduce bit for bit.
        for c in check_outputs(module, outputs, run_graph(module.graph, inputs)):
            print(f"check {c.name}: {c.verdict()} (max abs diff {c.max_abs_diff:.3g})")
            status |= 0 if c.ok else 1
        if getattr(args, "per_layer", False):
            status |= _check_per_layer(module, inputs, getattr(args, "dump_layers", None))
    module.close()
    return status
